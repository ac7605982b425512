"""The SDK's side of out-of-memory reports, collective timing and restores: what it sends, that it
never raises, and what it recognises as an OOM without importing torch."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.sdk.fakes import Recorder
from trainguard.sdk import reporter as reporter_module
from trainguard.sdk import torch_state
from trainguard.sdk.collectives import BUCKETS, OPS_MAX, CollectiveHistogram


def torch_class(name: str, base: type[BaseException] = RuntimeError) -> type[BaseException]:
    """An exception class as torch defines it (module torch), without torch."""
    return type(name, (base,), {"__module__": "torch"})


def test_the_histogram_buckets_by_upper_bound_and_starts_over_after_each_take() -> None:
    h = CollectiveHistogram()
    for seconds in (0.0, 0.001, 0.0011, 59.0, 61.0):
        assert h.observe(seconds, "all_reduce")
    report = h.take()
    assert report is not None and report["type"] == "collectives" and report["le"] == list(BUCKETS)
    counts = report["ops"]["all_reduce"]["counts"]
    assert len(counts) == len(BUCKETS) + 1
    assert (counts[0], counts[1], counts[-2], counts[-1]) == (2, 1, 1, 1)
    assert report["ops"]["all_reduce"]["sum"] == pytest.approx(120.0021)
    assert h.take() is None, "nothing observed since"


def test_the_histogram_refuses_bad_values_and_too_many_ops() -> None:
    h = CollectiveHistogram()
    assert not h.observe(float("inf"), "all_reduce") and not h.observe(-0.1, "all_reduce")
    for i in range(OPS_MAX):
        assert h.observe(0.01, f"op{i}")
    assert not h.observe(0.01, "one-too-many")
    assert h.observe(0.01, "op0"), "a known op still counts"


def test_a_timed_block_is_observed_even_when_the_collective_raises() -> None:
    tg = Recorder()
    with pytest.raises(TimeoutError), tg.collective("broadcast") as timed:
        time.sleep(0.005)
        raise TimeoutError("NCCL watchdog")
    assert timed.seconds >= 0.005
    report = tg._collectives.take()
    assert report is not None and sum(report["ops"]["broadcast"]["counts"]) == 1


def test_report_oom_never_raises_and_keeps_the_oom() -> None:
    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no")

    tg = Recorder()
    tg.report_oom(3, Unprintable())  # type: ignore[arg-type]
    tg.report_oom(True)  # type: ignore[arg-type]
    tg.report_oom()
    assert [(e["device"], e["message"]) for e in tg.reports("oom")] == [(3, ""), (None, ""), (None, "")]


def test_what_counts_as_an_out_of_memory_error() -> None:
    oom = torch_class("OutOfMemoryError")
    assert torch_state.is_oom(oom("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert torch_state.is_oom(type("Sub", (oom,), {})("x")), "a subclass of torch's"
    assert torch_state.is_oom(RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; ...)"))
    assert not torch_state.is_oom(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not torch_state.is_oom(type("OutOfMemoryError", (Exception,), {})("not torch's"))
    assert not torch_state.is_oom(MemoryError())  # host memory: the kernel's OOM killer, not this counter


def test_the_device_an_oom_names_is_the_pods_gpu_index() -> None:
    exc = RuntimeError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.1 GiB"
    )
    assert torch_state.oom_device(exc) == 1
    assert torch_state.oom_device(exc, "4,6") == 6
    assert torch_state.oom_device(RuntimeError("CUDA out of memory.")) is None


def test_one_error_is_reported_once_however_many_layers_see_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    tg = Recorder()
    exc = torch_class("OutOfMemoryError")("CUDA out of memory. GPU 0 has a total capacity of 79 GiB")
    assert torch_state.report_oom(tg, exc)
    assert torch_state.report_oom(tg, exc), "still an OOM, not sent again"
    assert not torch_state.report_oom(tg, ValueError("shape mismatch"))
    assert [e["device"] for e in tg.reports("oom")] == [2]


def test_a_restore_reports_start_progress_and_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = tmp_path / "ckpt.bin"
    ckpt.write_bytes(b"x" * 50_000)
    tg = Recorder()
    with tg.restore(str(ckpt)) as r:
        ckpt.read_bytes()
        time.sleep(0.01)
        r.progress()  # what the Reporter's thread does every RESTORE_PROGRESS_EVERY_S
        assert r.progress_due(time.monotonic() + reporter_module.RESTORE_PROGRESS_EVERY_S)
    states = [(e["state"], e["path"]) for e in tg.reports("restore")]
    assert states == [("start", str(ckpt)), ("progress", str(ckpt)), ("end", str(ckpt))]
    end = tg.reports("restore")[-1]
    assert end["ok"] is True and end["read_bytes_per_second"] == pytest.approx(50_000 / end["seconds"])
    assert not r.progress_due(time.monotonic() + 100), "no progress after the end"
    r.end()
    assert len(tg.reports("restore")) == 3, "ending twice sends one end"


def test_a_restore_that_raises_ends_not_ok(tmp_path: Path) -> None:
    tg = Recorder()
    with pytest.raises(OSError), tg.restore(str(tmp_path / "missing")):
        (tmp_path / "missing").read_bytes()
    assert [(e["state"], e.get("ok")) for e in tg.reports("restore")] == [("start", None), ("end", False)]
