"""The sidecar's goodput counters (exporter/stalls.py): trainguard_train_stall_seconds_total counts the
gaps between steps beyond the grace, the open one at each snapshot, never a checkpoint write the SDK
reported; trainguard_checkpoint_save_seconds_total counts the writes, overlapping processes' once."""

from __future__ import annotations

from typing import Any

import pytest

from trainguard.exporter.stalls import STALL_FACTOR, STALL_MIN_S
from trainguard.exporter.training import TrainingState

STEP_S = 10.0
"""The trainer's step: a grace of STALL_FACTOR x 10 s = 50 s (over STALL_MIN_S)."""
GRACE_S = max(STALL_FACTOR * STEP_S, STALL_MIN_S)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(clock: Clock) -> TrainingState:
    s = TrainingState(clock=clock)
    s.ingest({"type": "hello", "pid": 42, "started_at": clock.now})
    return s


def step(state: TrainingState, clock: Clock, n: int, after: float = STEP_S) -> None:
    clock.now += after
    state.ingest({"type": "step", "step": n, "ts": clock.now})


def steady(state: TrainingState, clock: Clock, first: int, last: int) -> None:
    for n in range(first, last + 1):
        step(state, clock, n)


def counters(state: TrainingState) -> tuple[float, float]:
    view = state.snapshot()
    return view.stall_seconds_total, view.checkpoint_save_seconds_total


def test_a_steady_trainer_never_stalls(state: TrainingState, clock: Clock) -> None:
    steady(state, clock, 1, 50)
    clock.now += STEP_S * 0.9  # the next step is on its way
    assert counters(state) == (0.0, 0.0)


def test_a_long_gap_counts_what_it_took_beyond_a_step_at_the_step_that_ends_it(
    state: TrainingState, clock: Clock
) -> None:
    steady(state, clock, 1, 10)
    step(state, clock, 11, after=300.0)
    assert counters(state) == (300.0 - STEP_S, 0.0)
    steady(state, clock, 12, 20)
    assert counters(state)[0] == 300.0 - STEP_S


def test_an_open_gap_counts_once_past_the_grace_and_the_counter_never_goes_down(
    state: TrainingState, clock: Clock
) -> None:
    steady(state, clock, 1, 10)
    clock.now += GRACE_S - 1
    assert counters(state)[0] == 0.0  # within the grace: a slow step, not a stall
    clock.now += 2
    assert counters(state)[0] == GRACE_S + 1 - STEP_S
    clock.now += 100
    seen = counters(state)[0]
    assert seen == GRACE_S + 101 - STEP_S
    state.ingest({"type": "step", "step": 11, "ts": clock.now - 0.5})  # its report was half a second old
    assert counters(state)[0] == seen


def test_a_reported_checkpoint_write_is_no_stall(state: TrainingState, clock: Clock) -> None:
    """A 120 s write announced by Reporter.saving(): the gap that holds it is a normal step."""
    steady(state, clock, 1, 10)
    clock.now += 1
    state.ingest({"type": "saving", "ts": clock.now, "pid": 42})
    clock.now += 60
    assert counters(state) == (0.0, 60.0)  # the write is under way: counted as it goes, and no stall
    clock.now += 60
    state.ingest(
        {"type": "checkpoint", "step": 10, "kind": "full", "ok": True, "ts": clock.now, "seconds": 120.0}
    )
    step(state, clock, 11, after=STEP_S - 1)
    assert counters(state) == (0.0, 120.0)


def test_a_write_reported_only_at_its_end_is_no_stall_either(state: TrainingState, clock: Clock) -> None:
    steady(state, clock, 1, 10)
    clock.now += 40
    state.ingest(
        {"type": "checkpoint", "step": 10, "kind": "full", "ok": True, "ts": clock.now, "seconds": 40.0}
    )
    step(state, clock, 11, after=STEP_S)
    assert counters(state) == (0.0, 40.0)


def test_a_stall_after_a_write_counts_only_the_time_beyond_it(state: TrainingState, clock: Clock) -> None:
    steady(state, clock, 1, 10)
    clock.now += 30
    state.ingest(
        {"type": "checkpoint", "step": 10, "kind": "full", "ok": True, "ts": clock.now, "seconds": 30.0}
    )
    step(state, clock, 11, after=200.0)
    assert counters(state) == (200.0 - STEP_S, 30.0)


def test_a_failed_write_blocked_the_trainer_too(state: TrainingState, clock: Clock) -> None:
    state.ingest(
        {"type": "checkpoint", "step": 3, "kind": "full", "ok": False, "ts": clock.now, "seconds": 8.0}
    )
    assert counters(state)[1] == 8.0
    assert state.snapshot().checkpoint_ts == {}  # and it is no checkpoint


def test_the_processes_of_a_pod_writing_together_count_once(state: TrainingState, clock: Clock) -> None:
    """Eight ranks of the pod block on the same 20 s save (each reports it): 20 s of the pod's time."""
    clock.now += 20
    for pid in range(8):
        state.ingest({"type": "checkpoint", "step": 100, "kind": "full", "ok": True, "ts": clock.now - pid * 0.01,
                      "seconds": 20.0 - pid * 0.01, "pid": pid})  # fmt: skip
    assert counters(state)[1] == pytest.approx(20.0)


def test_the_processes_of_a_pod_reporting_each_step_do_not_shorten_the_typical_step(
    state: TrainingState, clock: Clock
) -> None:
    for n in range(1, 11):
        clock.now += STEP_S
        for rank in range(4):
            state.ingest({"type": "step", "step": n, "ts": clock.now + rank * 0.01})
    step(state, clock, 11, after=STEP_S * 3)  # a slow step, within the grace
    assert counters(state)[0] == 0.0


@pytest.mark.parametrize(
    "ends",
    [
        {"type": "restore", "state": "start", "pid": 43},
        {"type": "hello", "pid": 43},
        {"type": "bye", "pid": 42},
    ],
    ids=["restore", "new-trainer", "last-bye"],
)
def test_a_restart_ends_the_gap_and_the_steps_may_start_again_lower(
    state: TrainingState, clock: Clock, ends: dict[str, Any]
) -> None:
    steady(state, clock, 1, 100)
    clock.now += 200
    state.ingest({**ends, "ts": clock.now, "started_at": clock.now})
    stalled = counters(state)[0]
    assert stalled == 200.0 - STEP_S
    clock.now += 600  # the pods load the checkpoint: the restart's time, not a stall
    assert counters(state)[0] == stalled
    steady(state, clock, 50, 60)  # from the checkpoint's step, lower than before
    assert counters(state)[0] == stalled


def test_no_stall_is_judged_before_the_first_steps(state: TrainingState, clock: Clock) -> None:
    clock.now += 3600  # loading, compiling
    assert counters(state)[0] == 0.0
    steady(state, clock, 1, 2)
    clock.now += 3600
    assert counters(state)[0] == 0.0


def test_the_stall_fault_shows_as_stall_seconds(state: TrainingState, clock: Clock) -> None:
    steady(state, clock, 1, 10)
    state.faults.add("stall")
    step(state, clock, 11, after=600.0)  # the hung rank reports nothing
    assert counters(state)[0] == 600.0 - STEP_S
