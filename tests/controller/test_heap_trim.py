"""controller/heap.py: the C heap's free pages handed back to the kernel (malloc_trim), and
--heap-trim-seconds. The behaviour test runs glibc's real malloc_trim in a child process, on a heap
fragmented the way a burst of reconciles leaves it."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap

import pytest

from trainguard.cli import build_parser
from trainguard.controller import heap
from trainguard.controller.heap import TRIM_EVERY_S, HeapTrim, glibc_trim, resident_bytes

GLIBC = sys.platform == "linux" and glibc_trim() is not None


def test_one_trim_is_timed_and_says_what_it_gave_back() -> None:
    calls: list[str] = []
    resident = iter([300 * 2**20, 200 * 2**20])
    ticks = iter([10.0, 10.004])
    trim = HeapTrim(lambda: calls.append("trim"), resident=lambda: next(resident), clock=lambda: next(ticks))
    assert trim.run() == 100 * 2**20
    assert calls == ["trim"]


def test_without_malloc_trim_there_is_nothing_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """musl and macOS have no malloc_trim: the loop is not started (controller/run.py)."""

    def no_libc(*_: object, **__: object) -> object:
        raise OSError("no such library")

    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    assert heap.glibc_trim() is None


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc_trim: Linux with glibc only")
def test_the_resident_set_of_this_process_is_read() -> None:
    assert resident_bytes() > 10 * 2**20


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc_trim: Linux with glibc only")
def test_freed_heap_pages_go_back_to_the_kernel() -> None:
    """About 120 MB of 2 KB buffers (malloc'd: above Python's small-object limit), nine in ten freed and
    every tenth kept, so that no free block reaches the heap's top and glibc's own trim cannot run: the
    resident set stays up until the trim, which gives most of the freed pages back."""
    child = textwrap.dedent(
        """
        from trainguard.controller.heap import HeapTrim, glibc_trim, resident_bytes
        held = [bytes(2048) for _ in range(60_000)]
        kept = held[::10]
        del held
        before = resident_bytes()
        trim = glibc_trim()
        assert trim is not None
        print(before, HeapTrim(trim).run())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, check=True, timeout=60,
        env={"MALLOC_ARENA_MAX": "2", "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)},
    ).stdout.split()  # fmt: skip
    before, gave_back = int(out[0]), int(out[1])
    freed = 54_000 * 2048
    assert gave_back > freed * 0.6, f"trim gave back {gave_back / 2**20:.1f} MiB of {freed / 2**20:.1f} freed"
    assert before - gave_back > 0


def test_the_flag_defaults_to_a_minute_and_zero_turns_it_off() -> None:
    assert build_parser().parse_args(["operator"]).heap_trim_seconds == TRIM_EVERY_S == 60.0
    assert build_parser().parse_args(["operator", "--heap-trim-seconds", "0"]).heap_trim_seconds == 0


@pytest.mark.parametrize("value", ["-1", "often"])
def test_a_bad_value_is_refused_naming_the_flag(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["operator", "--heap-trim-seconds", value])
    assert "--heap-trim-seconds" in capsys.readouterr().err
