"""Goodput from the remediation records: time lost to restarts and to work done again, counted once when
records overlap, never taken back (the counters are Prometheus counters), and kept when records are
pruned."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trainguard.remediation.goodput import (
    LAG_S,
    Carried,
    carried_of,
    carried_status,
    carry,
    job_goodput,
    monitor_goodput,
)
from trainguard.times import rfc3339

T0 = 1_700_000_000.0
"""The monitor's creation."""


def record(
    rid: str,
    created: float,
    updated: float,
    *,
    kinds: tuple[str, ...] = ("Pause", "RestartGang"),
    phase: str = "Succeeded",
    resume_ts: float | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    steps = []
    for kind in kinds:
        step: dict[str, Any] = {"kind": kind, "phase": "Succeeded" if phase == "Succeeded" else "Planned"}
        if kind in ("RestartGang", "ReplacePod"):
            pointer = (
                None
                if resume_ts is None
                else {"step": 100, "path": "/ckpt/100", "kind": "full", "ts": resume_ts}
            )
            step["progress"] = {"count": 2, "resumeFrom": json.dumps(pointer)}
        steps.append(step)
    return {"id": rid, "phase": phase, "dryRun": dry_run, "created": rfc3339(created), "updated": rfc3339(updated),
            "steps": steps}  # fmt: skip


def at(now: float, *records: dict[str, Any], carried: Carried | None = None) -> dict[str, float]:
    return dict(job_goodput(list(records), carried or Carried(), T0, now + LAG_S).lost)


def test_a_restart_counts_from_the_alert_to_the_last_step_and_its_redone_work_after() -> None:
    # checkpoint at T0+1000, fault seen at T0+1600, gang placed at T0+1700: 600 s of work to do again
    r = record("a", T0 + 1600, T0 + 1700, resume_ts=T0 + 1000)
    assert at(T0 + 2000, r) == {"restart": 100.0, "maintenance": 0.0, "redone_work": 300.0}
    lost = at(T0 + 5000, r)
    assert lost == {"restart": 100.0, "maintenance": 0.0, "redone_work": 600.0}
    account = job_goodput([r], Carried(), T0, T0 + 5000 + LAG_S)
    assert account.wall == 5000 and account.productive == 4300
    assert account.top_cause == "redone_work"
    assert account.ettr == pytest.approx(4300 / 5000)


def test_a_running_remediation_counts_as_it_goes() -> None:
    r = record("a", T0 + 100, T0 + 100, phase="InProgress")
    assert at(T0 + 160, r)["restart"] == 60.0
    assert at(T0 + 400, r)["restart"] == 300.0


def test_a_dry_run_or_a_plan_that_stops_nothing_is_not_lost_time() -> None:
    dry = record("d", T0 + 100, T0 + 200, dry_run=True, resume_ts=T0)
    cordon = record("c", T0 + 100, T0 + 200, kinds=("Cordon", "Taint"))
    assert at(T0 + 1000, dry, cordon) == {"restart": 0.0, "maintenance": 0.0, "redone_work": 0.0}
    assert job_goodput([dry, cordon], Carried(), T0, T0 + 1000 + LAG_S).top_cause is None


def test_a_restart_without_a_named_checkpoint_leaves_its_redone_work_unknown() -> None:
    in_place = record("i", T0 + 100, T0 + 110, kinds=("Pause", "RestartInPlace"))
    no_pointer = record("g", T0 + 200, T0 + 210)
    account = job_goodput([in_place, no_pointer], Carried(), T0, T0 + 1000)
    assert account.redo_unknown == 2 and account.lost["redone_work"] == 0


def test_resuming_from_an_older_checkpoint_redoes_only_the_work_not_already_lost() -> None:
    # first fault: checkpoint at 1000, fault at 1600, placed at 1700, redo 600 s until 2300
    first = record("a", T0 + 1600, T0 + 1700, resume_ts=T0 + 1000)
    # second fault at 3000, resumed from the same (older than the first restart) checkpoint: the work of
    # 1000..3000 less the 100 s restart and 600 s redo already lost, 1300 s, is done again from 3100
    second = record("b", T0 + 3000, T0 + 3100, resume_ts=T0 + 1000)
    assert at(T0 + 10_000, first, second) == {
        "restart": 200.0,
        "maintenance": 0.0,
        "redone_work": 600.0 + 1300.0,
    }


def test_a_fault_during_redone_work_ends_it_there() -> None:
    first = record("a", T0 + 1600, T0 + 1700, resume_ts=T0 + 1000)  # would redo until 2300
    second = record("b", T0 + 2000, T0 + 2050, resume_ts=T0 + 1500)
    lost = at(T0 + 10_000, first, second)
    # first's redo 1700..2000 (300 s); second's work since 1500: 500 s less 100 s restart and 300 s redo
    assert lost == {"restart": 150.0, "maintenance": 0.0, "redone_work": 300.0 + 100.0}


def test_overlapping_records_count_their_time_once() -> None:
    a = record("a", T0 + 100, T0 + 400, kinds=("Pause",))
    b = record("b", T0 + 300, T0 + 600, kinds=("Pause",))
    inside = record("c", T0 + 350, T0 + 380, kinds=("Pause",))
    assert at(T0 + 1000, a, b, inside)["restart"] == 500.0


def test_the_counts_never_go_down_as_records_come_and_finish() -> None:
    a = record("a", T0 + 1600, T0 + 1700, resume_ts=T0 + 1000)
    b_running = record("b", T0 + 2000, T0 + 2000, phase="InProgress")
    b_done = record("b", T0 + 2000, T0 + 2050, resume_ts=T0 + 1500)
    timeline = [(t, [a]) for t in range(1700, 2000, 7)]
    timeline += [(t, [a, b_running]) for t in range(2000, 2050, 3)]
    timeline += [(t, [a, b_done]) for t in range(2050, 4000, 11)]
    before = {"restart": 0.0, "maintenance": 0.0, "redone_work": 0.0, "productive": 0.0}
    for t, records in timeline:
        account = job_goodput(records, Carried(), T0, T0 + t)  # the record is seen as soon as written
        now = {**account.lost, "productive": account.productive}
        assert all(now[k] >= before[k] - 1e-9 for k in now), (t, before, now)
        before = now


def test_pruned_records_leave_their_counts_in_the_status() -> None:
    old = [record(f"r{i}", T0 + 1000 * i, T0 + 1000 * i + 50, kinds=("Pause",)) for i in range(1, 5)]
    now = T0 + 4200
    whole = job_goodput(old, Carried(), T0, now)
    carried = carry(old, Carried(), T0, now)
    kept = old[2:]
    assert carried.until == now - LAG_S
    later = job_goodput(kept, carried, T0, now)
    assert later.lost == whole.lost and later.productive == whole.productive
    newer = record("r5", T0 + 5000, T0 + 5100, kinds=("Pause",))
    assert job_goodput([*kept, newer], carried, T0, T0 + 6000).lost["restart"] == 4 * 50 + 100
    # through the status and back, as the apiserver keeps it
    assert carried_of({"goodput": carried_status(carried)}) == carried


def test_the_ettr_is_over_the_last_day() -> None:
    long_ago = record("a", T0 + 1000, T0 + 4600, kinds=("Pause",))  # an hour lost on day one
    recent = record("b", T0 + 3 * 86400 - 7200, T0 + 3 * 86400 - 7200 + 864, kinds=("Pause",))
    account = job_goodput([long_ago, recent], Carried(), T0, T0 + 3 * 86400 + LAG_S)
    assert account.ettr == pytest.approx(0.99)
    assert account.lost["restart"] == 3600 + 864


def test_a_monitor_body_reads_its_records_and_carried_counts() -> None:
    body = {
        "metadata": {"name": "job", "namespace": "ml", "creationTimestamp": rfc3339(T0)},
        "status": {
            "remediations": [record("a", T0 + 100, T0 + 200, kinds=("Pause",))],
            "goodput": {"restartSeconds": 30, "redoneWorkSeconds": 7.5, "until": rfc3339(T0 + 50)},
        },
    }
    account = monitor_goodput(body, T0 + 1000 + LAG_S)
    assert account.lost == {"restart": 130.0, "maintenance": 0.0, "redone_work": 7.5}
    assert account.wall == 1000


def test_a_planned_maintenance_move_counts_as_maintenance_not_restart() -> None:
    moved = {**record("m", T0 + 1000, T0 + 1090, resume_ts=T0 + 995), "class": "maintenance"}
    assert at(T0 + 2000, moved) == {"restart": 0.0, "maintenance": 90.0, "redone_work": 5.0}
    # overlapping a fault's restart: those instants are the restart's (the redone work's 5 s too)
    fault = record("f", T0 + 1050, T0 + 1150, kinds=("Pause",))
    assert at(T0 + 2000, moved, fault) == {"restart": 100.0, "maintenance": 50.0, "redone_work": 0.0}


def test_carried_maintenance_seconds_survive_pruning() -> None:
    carried = carried_of({"goodput": {"maintenanceSeconds": 42, "until": rfc3339(T0 + 10)}})
    assert carried.seconds["maintenance"] == 42
    assert carried_status(carried)["maintenanceSeconds"] == 42


def slow_node(created: float, updated: float, wait: str, waited_until: float, phase: str) -> dict[str, Any]:
    """A slowNode record: confirmed, then AwaitCheckpoint (`wait`: its phase, done at `waited_until`), then
    the restart (done when `phase` is Succeeded), resuming from the checkpoint saved just before."""
    r = record("s", created, updated, kinds=("ConfirmFault", "AwaitCheckpoint", "Cordon", "RestartGang"),
               phase=phase, resume_ts=waited_until - 10)  # fmt: skip
    r["steps"][1].update(phase=wait, time=rfc3339(waited_until))
    return r


def test_a_slow_node_loses_nothing_while_its_record_waits_for_the_checkpoint() -> None:
    """The job trains on (slower) while the record waits: its time is lost from the wait's end only, and
    the work redone is what was done since the checkpoint it waited for."""
    waiting = slow_node(T0 + 100, T0 + 100, "InProgress", T0 + 100, "InProgress")
    assert at(T0 + 1000, waiting) == {"restart": 0.0, "maintenance": 0.0, "redone_work": 0.0}
    failed = slow_node(T0 + 100, T0 + 7300, "Failed", T0 + 7300, "Failed")
    assert at(T0 + 8000, failed) == {"restart": 0.0, "maintenance": 0.0, "redone_work": 0.0}
    done = slow_node(T0 + 100, T0 + 1060, "Succeeded", T0 + 1000, "Succeeded")
    assert at(T0 + 5000, done) == {"restart": 60.0, "maintenance": 0.0, "redone_work": 10.0}
