"""Replays of signed records: whoever may patch a monitor's status can put back a state of a record the
operator once wrote and signed (the Planned record, a step InProgress). The executor refuses a record
this operator process saw finished, and one the operator last wrote longer ago than the resume window;
the legitimate cases (a record resumed after a restart, one planned just before a crash, an alert planned
again after a dry run) still run. The P0 loop as the operator wires it, on the tests' in-memory API and
cluster (tests/kube/fakes.py, tests/remediation/fakes.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.clock import T0, Clock
from tests.conftest import MONITOR
from tests.kube.fakes import FakeKube, merge_patch
from tests.remediation.fakes import loop_rig, p0_signal
from trainguard.remediation.dispatch import FinishedRecords
from trainguard.remediation.loop import RemediationLoop
from trainguard.remediation.model import Phase
from trainguard.remediation.records import RESUME_WINDOW_S, horizon
from trainguard.times import unix

NS, JOB = MONITOR["metadata"]["namespace"], MONITOR["metadata"]["name"]


def written(kube: FakeKube) -> list[dict[str, Any]]:
    """Every state of the one record the operator wrote, in order (each signed)."""
    return [copy.deepcopy(w["remediations"][0]) for w in kube.status_writes if w.get("remediations")]


def put_back(kube: FakeKube, record: dict[str, Any]) -> None:
    """Someone who may patch the monitor's status writes `record` there."""
    kube.put(merge_patch(kube.get_monitor(NS, JOB), {"status": {"remediations": [record]}}))


def finished_run() -> tuple[RemediationLoop, FakeKube, list[tuple[str, ...]]]:
    responder, kube, cluster = loop_rig()
    responder.handle(p0_signal("GPUCriticalXid"))
    assert responder.idle()
    assert kube.records(NS, JOB)[0]["phase"] == Phase.SUCCEEDED
    assert [e[0] for e in cluster.effects].count("cordon") == 1
    return responder, kube, cluster.effects


def refused(kube: FakeKube, why: str) -> dict[str, Any]:
    [record] = kube.records(NS, JOB)
    assert record["phase"] == Phase.FAILED and record["message"].startswith(why), record
    warnings = [m for r, m in kube.events if r == "RemediationFailed"]
    assert warnings and why in warnings[-1], kube.events
    return record


# ---- the attacks --------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["planned", "midway"])
def test_a_finished_record_put_back_as_the_operator_once_wrote_it_is_refused_as_a_replay(state: str) -> None:
    responder, kube, effects = finished_run()
    before = list(effects)
    states = written(kube)
    copy_ = states[0] if state == "planned" else next(
        s for s in states if any(st["kind"] == "RestartGang" and st["phase"] == Phase.IN_PROGRESS for st in s["steps"])
    )  # fmt: skip
    assert copy_["signature"] and copy_["phase"] in (Phase.PLANNED, Phase.IN_PROGRESS)
    put_back(kube, copy_)
    assert responder.resume.run() == 1
    assert responder.idle()
    refused(kube, "refused as a replay")
    assert effects == before, "nothing cordoned, tainted or deleted again"
    assert responder.resume.run() == 0, "refused once"


def test_after_a_restart_a_finished_record_the_new_operator_saw_is_refused_as_a_replay() -> None:
    _, kube, _ = finished_run()
    planned = written(kube)[0]
    restarted, _, cluster = loop_rig(kube=kube, clock=Clock(T0 + 120))
    assert restarted.resume.run() == 0, "its first pass sees the record finished"
    put_back(kube, planned)
    assert restarted.resume.run() == 1
    assert restarted.idle()
    refused(kube, "refused as a replay")
    assert cluster.effects == []


def test_after_a_restart_an_old_record_put_back_is_refused_as_stale() -> None:
    """The new operator never saw the record finish; the state put back was written longer ago than an
    operator takes to come back."""
    _, kube, _ = finished_run()
    planned = written(kube)[0]
    put_back(kube, planned)
    restarted, _, cluster = loop_rig(kube=kube, clock=Clock(unix(planned["updated"]) + RESUME_WINDOW_S + 60))
    assert restarted.resume.run() == 1
    assert restarted.idle()
    refused(kube, "refused as stale")
    assert cluster.effects == []


def test_a_step_marked_done_by_hand_is_refused_and_nothing_is_cordoned() -> None:
    """Without signed phases, marking ConfirmFault Succeeded would skip the sidecar's confirmation and go
    straight to the cordon."""
    responder, kube, cluster = loop_rig()
    responder.dispatcher.dispatch = lambda *args, **kw: True  # type: ignore[method-assign]  # not run yet
    responder.handle(p0_signal("GPUCriticalXid"))
    [planned] = kube.records(NS, JOB)
    assert planned["steps"][0]["kind"] == "ConfirmFault"
    planned["steps"][0]["phase"] = Phase.SUCCEEDED
    put_back(kube, planned)
    del responder.dispatcher.dispatch
    assert responder.resume.run() == 1
    assert responder.idle()
    refused(kube, "refused: the record does not carry the operator's signature")
    assert cluster.effects == []


def test_a_record_of_a_monitor_deleted_and_created_again_is_refused_in_its_namesake() -> None:
    responder, kube, cluster = loop_rig()
    responder.dispatcher.dispatch = lambda *args, **kw: True  # type: ignore[method-assign]
    responder.handle(p0_signal("GPUCriticalXid"))
    kube.put(
        merge_patch(kube.get_monitor(NS, JOB), {"metadata": {"uid": "u-2"}})
    )  # the same record, a new monitor
    del responder.dispatcher.dispatch
    assert responder.resume.run() == 1
    assert responder.idle()
    refused(kube, "refused: the record does not carry the operator's signature")
    assert cluster.effects == []


# ---- what must still run ------------------------------------------------------------------------------


@pytest.mark.parametrize("after_s", [5.0, RESUME_WINDOW_S - 60])
def test_a_record_planned_just_before_a_crash_is_carried_out_by_the_restarted_operator(
    after_s: float,
) -> None:
    killed, kube, _ = loop_rig()
    killed.dispatcher.dispatch = lambda *args, **kw: True  # type: ignore[method-assign]  # died before it ran
    killed.handle(p0_signal("GPUCriticalXid"))
    killed.stop()
    [planned] = kube.records(NS, JOB)
    assert planned["phase"] == Phase.PLANNED
    restarted, _, cluster = loop_rig(kube=kube, clock=Clock(unix(planned["updated"]) + after_s))
    assert restarted.resume.run() == 1
    assert restarted.idle()
    assert kube.records(NS, JOB)[0]["phase"] == Phase.SUCCEEDED
    assert [e[0] for e in cluster.effects].count("cordon") == 1


@pytest.mark.parametrize(
    ("after_s", "phase"), [(120.0, Phase.SUCCEEDED), (RESUME_WINDOW_S + 60, Phase.FAILED)]
)
def test_a_record_stopped_midway_is_resumed_by_a_restarted_operator_within_the_window(
    after_s: float, phase: Phase
) -> None:
    """Killed right after the cordon (its step InProgress): the next operator resumes it a couple of
    minutes later; one that comes back after the window reports it stale instead."""
    killed, kube, _ = loop_rig()
    killed.handle(p0_signal("GPUCriticalXid"))
    assert killed.idle()
    crashed = next(s for s in written(kube) if s["steps"][1]["phase"] == Phase.IN_PROGRESS)
    put_back(kube, crashed)  # the status as the killed operator left it (the replay memory died with it)
    restarted, _, fresh = loop_rig(kube=kube, clock=Clock(unix(crashed["updated"]) + after_s))
    assert restarted.resume.run() == 1
    assert restarted.idle()
    [record] = kube.records(NS, JOB)
    assert record["phase"] == phase, record
    if phase == Phase.FAILED:
        assert record["message"].startswith("refused as stale") and fresh.effects == []
    else:
        assert [e[0] for e in fresh.effects].count("cordon") == 1


def test_an_alert_planned_again_after_dry_run_is_turned_off_runs() -> None:
    """The live record has the dry run's id (one per alert instance), not its creation time: another
    record, not a replay of the finished dry run."""
    clock = Clock()
    responder, kube, cluster = loop_rig(clock=clock)
    kube.put(merge_patch(kube.get_monitor(NS, JOB), {"spec": {"remediation": {"dryRun": True}}}))
    signal = p0_signal("GPUCriticalXid")
    responder.handle(signal)
    assert responder.idle()
    [dry] = kube.records(NS, JOB)
    assert dry["phase"] == Phase.DRY_RUN and cluster.effects == []
    clock.now += 60
    kube.put(merge_patch(kube.get_monitor(NS, JOB), {"spec": {"remediation": {"dryRun": False}}}))
    live = responder.handle(signal)
    assert live is not None and live["id"] == dry["id"]
    assert responder.idle()
    [record] = kube.records(NS, JOB)
    assert record["phase"] == Phase.SUCCEEDED, record
    assert [e[0] for e in cluster.effects].count("cordon") == 1


# ---- the memory --------------------------------------------------------------------------------------


def test_the_memory_keeps_a_finished_record_until_its_horizon_and_forgets_it_after() -> None:
    _, kube, _ = finished_run()
    done = kube.records(NS, JOB)[0]
    memory = FinishedRecords()
    now = unix(done["updated"])
    memory.remember(done, now)
    assert memory.knows(written(kube)[0], now), "known by its id and creation time, whatever its phase"
    assert memory.knows(done, horizon(done) - 1) and not memory.knows(done, horizon(done))
    other = {**done, "created": "2023-11-14T22:30:00.000Z"}
    assert not memory.knows(other, now), "a record planned again for the alert is another record"
    memory.remember(done, horizon(done) + 1)
    assert len(memory) == 1, "not remembered once every earlier state of it is stale anyway"
    memory = FinishedRecords()
    for i in range(FinishedRecords.PRUNE_AT):
        memory.remember({**done, "id": f"r-{i}"}, now)
    assert len(memory) == FinishedRecords.PRUNE_AT
    later = {**done, "id": "later", "updated": "2023-11-15T22:13:20.000Z"}
    memory.remember(later, horizon(done) + 1)  # past the others' horizon: they are dropped
    assert len(memory) == 1 and memory.knows(later, horizon(done) + 1)
