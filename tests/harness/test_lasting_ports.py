"""The test harness's lasting ports (tests/processes.py `lasting_port`): xdist workers pick in disjoint
slices, and one worker never gives out a span that overlaps one it gave before (two gangs in two workers
once met at a port of their spans and both failed). Real sockets on loopback."""

from __future__ import annotations

import itertools
import socket

import pytest

from tests import processes
from tests.processes import _worker_slice, lasting_port


def test_workers_take_disjoint_equal_slices() -> None:
    env = {"PYTEST_XDIST_WORKER_COUNT": "3"}
    slices = [_worker_slice(10_000, 32_768, {**env, "PYTEST_XDIST_WORKER": f"gw{i}"}) for i in range(3)]
    assert slices == [(10_000, 17_589), (17_589, 25_178), (25_178, 32_767)]


@pytest.mark.parametrize(
    "env",
    [{}, {"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "1"}, {"PYTEST_XDIST_WORKER": "master"},
     {"PYTEST_XDIST_WORKER": "gwx", "PYTEST_XDIST_WORKER_COUNT": "3"}],
)  # fmt: skip
def test_without_several_workers_the_whole_range_is_one_slice(env: dict[str, str]) -> None:
    assert _worker_slice(10_000, 32_768, env) == (10_000, 32_768)


def test_a_worker_gives_out_spans_that_never_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    monkeypatch.setattr(processes, "_next_lasting", {})
    low, high = _worker_slice(processes.LASTING_LOW, processes._ephemeral_low(), {
        "PYTEST_XDIST_WORKER": "gw1", "PYTEST_XDIST_WORKER_COUNT": "3"})  # fmt: skip
    ports = [lasting_port(16) for _ in range(20)]
    spans = sorted((p, p + 16) for p in ports)
    assert all(low <= start and end <= high for start, end in spans)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))


def test_a_span_with_a_port_taken_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "_next_lasting", {})
    first = lasting_port(4)
    with socket.socket() as taken:
        taken.bind(("", first + 4 + 2))  # inside the span the cursor reaches next
        monkeypatch.setattr(processes, "_next_lasting", {k: first for k in processes._next_lasting})
        again = lasting_port(4)
        assert again == first  # the cursor was set back: the same free span
        nxt = lasting_port(4)
        assert not nxt <= first + 4 + 2 < nxt + 4
