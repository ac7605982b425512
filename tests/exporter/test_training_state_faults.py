"""TrainingState on its own (a clock of the test's): restores of several trainer processes in one pod,
and the faults that keep moving while they last."""

from __future__ import annotations

import pytest

from tests.clock import Clock
from trainguard.exporter.faults import Faults
from trainguard.exporter.training import TrainingState

TIB = 2**40


def restore(state: TrainingState, pid: int, phase: str, rate: float | None = None) -> None:
    report: dict[str, object] = {"type": "restore", "state": phase, "pid": pid, "path": "/ckpt/full-100"}
    if rate is not None:
        report["read_bytes_per_second"] = rate
    state.ingest(report)


def test_ranks_restoring_together_sum_their_throughput_until_the_last_one_is_done() -> None:
    """Each rank of a pod reads its own shard from the same storage: the pod reads at their sum."""
    s = TrainingState()
    restore(s, 11, "start")
    restore(s, 12, "start")
    v = s.snapshot()
    assert v.restoring and v.restore_read_bytes_per_s is None, "no figure before the first progress"
    restore(s, 11, "progress", 100e6)
    restore(s, 12, "progress", 80e6)
    assert s.snapshot().restore_read_bytes_per_s == 180e6
    restore(s, 11, "end", 120e6)
    v = s.snapshot()
    assert v.restoring and v.restore_read_bytes_per_s == 200e6
    restore(s, 12, "end", 90e6)
    v = s.snapshot()
    assert not v.restoring and v.restore_read_bytes_per_s == 210e6, "the last restore's figure stays"
    restore(s, 11, "start")
    v = s.snapshot()
    assert v.restoring and v.restore_read_bytes_per_s is None, "a new restore starts without the old figure"


def test_a_trainer_that_says_bye_mid_restore_is_no_longer_restoring() -> None:
    s = TrainingState()
    restore(s, 11, "start")
    s.ingest({"type": "bye", "pid": 11})
    assert not s.snapshot().restoring


def test_checkpoint_fs_filling_drops_two_percent_a_second_and_stops_at_zero() -> None:
    clock, faults = Clock(), Faults()
    s = TrainingState(faults=faults, clock=clock)
    s.ingest({"type": "checkpoint", "step": 100, "kind": "full", "path": "/ckpt/100", "ok": True,
              "size_bytes": 5e9, "fs_avail_bytes": 7e11, "fs_size_bytes": 1e12})  # fmt: skip
    assert s.snapshot().checkpoint_fs_avail_bytes == 7e11
    faults.add("checkpoint-fs-filling")
    assert s.snapshot().checkpoint_fs_avail_bytes == 0.5 * 10 * TIB
    clock.now += 10
    v = s.snapshot()
    assert v.checkpoint_fs_avail_bytes == pytest.approx(0.3 * 10 * TIB)
    assert v.checkpoint_fs_size_bytes == 10 * TIB and v.checkpoint_size_bytes["full"] == TIB
    clock.now += 100
    assert s.snapshot().checkpoint_fs_avail_bytes == 0.0
    faults.clear()
    v = s.snapshot()
    assert (v.checkpoint_fs_avail_bytes, v.checkpoint_size_bytes["full"]) == (7e11, 5e9), (
        "the reported values"
    )
    faults.add("checkpoint-fs-filling")
    assert s.snapshot().checkpoint_fs_avail_bytes == 0.5 * 10 * TIB, "a new fault starts from half again"


def test_collective_slow_adds_one_two_second_observation_per_second() -> None:
    clock, faults = Clock(), Faults()
    s = TrainingState(faults=faults, clock=clock)
    faults.add("collective-slow")
    assert s.snapshot().collectives["all_reduce"].count == 1
    assert s.snapshot().collectives["all_reduce"].count == 1, "a second snapshot in the same second adds none"
    clock.now += 3.5
    h = s.snapshot().collectives["all_reduce"]
    assert h.count == 4 and h.sum == 8.0
    faults.clear()
    clock.now += 10
    assert s.snapshot().collectives["all_reduce"].count == 4


def test_a_histogram_keeps_at_most_16_ops() -> None:
    s = TrainingState()
    for i in range(20):
        s.ingest({"type": "collectives", "le": [0.1], "ops": {f"op{i}": {"counts": [1, 0], "sum": 0.05}}})
    assert len(s.snapshot().collectives) == 16
