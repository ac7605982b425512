"""The P0 loop wired in the operator: a signal is planned on the leader, its record written to the
monitor's status before anything happens, carried out once, and resumed after a crash; a signal
answered 200 and never planned is planned by the next leader's pass. The cluster and
the Kubernetes edge are the tests' in-memory fakes (tests/remediation/fakes.py, tests/kube/fakes.py),
which behave like the real ones."""

from __future__ import annotations

import copy
from typing import Any

from tests.clock import T0, Clock
from tests.conftest import MONITOR
from tests.kube.fakes import FakeKube, merge_patch
from tests.remediation.fakes import KEY, loop_rig, p0_signal
from trainguard.api import monitor_of
from trainguard.catalog.events import fingerprint
from trainguard.catalog.severity import MAPPED
from trainguard.remediation import tokens
from trainguard.remediation.loop import RemediationLoop
from trainguard.remediation.model import Phase, Signal, Source
from trainguard.remediation.passes import PENDING_GRACE_S, PENDING_RETRY_S
from trainguard.remediation.plan import record_id

NS, JOB = MONITOR["metadata"]["namespace"], MONITOR["metadata"]["name"]


def test_a_node_fault_is_recorded_before_it_is_acted_on_and_carried_out_once() -> None:
    responder, kube, cluster = loop_rig()
    record = responder.handle(p0_signal("GPUCriticalXid"))
    assert record is not None
    first = kube.status_writes[0]["remediations"]
    assert [r["phase"] for r in first] == [Phase.PLANNED], "written before any step"
    assert responder.idle()
    done = kube.records(NS, JOB)[0]
    assert done["phase"] == Phase.SUCCEEDED, done
    assert [e[0] for e in cluster.effects].count("cordon") == 1
    assert ("RemediationPlanned" in [r for r, _ in kube.events]) and (
        "RemediationSucceeded" in [r for r, _ in kube.events]
    )


def test_the_same_fault_by_the_other_path_acts_once() -> None:
    responder, kube, cluster = loop_rig()
    responder.handle(p0_signal("GPUCriticalXid"))
    assert responder.idle()
    assert responder.handle(p0_signal("GPUCriticalXid")) is None
    assert len(kube.records(NS, JOB)) == 1
    assert [e[0] for e in cluster.effects].count("cordon") == 1


def test_a_standby_plans_nothing() -> None:
    responder, kube, cluster = loop_rig(leader=False)
    assert responder.handle(p0_signal("GPUCriticalXid")) is None
    assert kube.records(NS, JOB) == [] and cluster.effects == []
    assert responder.resume.run() == 0


def test_an_unfinished_record_left_by_a_killed_operator_is_resumed_once() -> None:
    responder, kube, cluster = loop_rig()
    # killed right after the cordon took effect, before the record said so
    cluster.crash_after = _cordon_call()
    responder.handle(p0_signal("GPUCriticalXid"))
    assert responder.idle()
    cluster.crash_after = None
    crashed = kube.records(NS, JOB)[0]
    assert crashed["phase"] == Phase.IN_PROGRESS and crashed["steps"][1]["kind"] == "Cordon"
    assert crashed["steps"][1]["phase"] == Phase.IN_PROGRESS
    assert [e[0] for e in cluster.effects].count("cordon") == 1
    assert responder.resume.run() == 1
    assert responder.idle()
    assert kube.records(NS, JOB)[0]["phase"] == Phase.SUCCEEDED
    assert [e[0] for e in cluster.effects].count("cordon") == 1, "an idempotent cordon: no second change"
    assert responder.resume.run() == 0, "finished records are not resumed"


def _cordon_call() -> int:
    """The number of the cluster call that cordons the node in a clean run (the planner's reads count)."""
    responder, _, cluster = loop_rig()
    real, at = cluster.cordon, []

    def cordon(node: str, reason: str, record_id: str) -> str:
        out = real(node, reason, record_id)
        at.append(cluster.calls)
        return out

    cluster.cordon = cordon  # type: ignore[method-assign]
    responder.handle(p0_signal("GPUCriticalXid"))
    assert responder.idle()
    responder.stop()
    return at[0]


def test_a_signal_for_a_monitor_that_does_not_exist_does_nothing() -> None:
    responder, kube, _ = loop_rig()
    other = p0_signal("GPUCriticalXid")
    stranger = type(other)(**{**other.__dict__, "labels": {**other.labels, "training_job": "nobody"}})
    assert responder.handle(stranger) is None
    assert kube.records(NS, JOB) == []


def test_a_record_the_cache_still_shows_unfinished_is_read_again_before_it_is_resumed() -> None:
    """The watch cache may be a moment behind the executor: a record it shows InProgress that the API
    has as finished must not be carried out a second time."""
    responder, kube, cluster = loop_rig()
    responder.handle(p0_signal("GPUCriticalXid"))
    assert responder.idle()
    done = kube.records(NS, JOB)[0]
    stale = copy.deepcopy(done)
    stale["phase"] = Phase.IN_PROGRESS
    stale["steps"][1]["phase"] = Phase.IN_PROGRESS
    cached = merge_patch(kube.get_monitor(NS, JOB), {"status": {"remediations": [stale]}})
    effects = len(cluster.effects)
    kube.monitors = lambda: [copy.deepcopy(cached)]  # type: ignore[method-assign]
    responder.resume.run()
    assert responder.idle()
    assert kube.records(NS, JOB)[0] == done and len(cluster.effects) == effects, (
        "the finished record was left alone"
    )


def test_a_record_written_into_the_status_by_someone_else_is_refused_with_a_warning() -> None:
    """Who may patch the status could write an unfinished record; without the operator's signature it is
    not carried out: Failed, an Event, and no cordon."""
    responder, kube, cluster = loop_rig()
    responder.handle(p0_signal("GPUCriticalXid"))
    assert responder.idle()
    forged = copy.deepcopy(kube.records(NS, JOB)[0])
    forged.update(id="forged-1", phase=Phase.PLANNED, signature="")
    for step in forged["steps"]:
        step.update(phase=Phase.PLANNED, detail="")
    forged["steps"][1]["params"]["node"] = "gpu-c"
    kube.put(merge_patch(kube.get_monitor(NS, JOB), {"status": {"remediations": [forged]}}))
    effects = len(cluster.effects)
    assert responder.resume.run() == 1
    assert responder.idle()
    refused = kube.records(NS, JOB)[0]
    assert refused["phase"] == Phase.FAILED and refused["message"].startswith("refused"), refused
    assert len(cluster.effects) == effects and not cluster.nodes["gpu-c"]["unschedulable"]
    warnings = [m for r, m in kube.events if r == "RemediationFailed"]
    assert len(warnings) == 1 and "refused" in warnings[0]
    assert responder.resume.run() == 0, "refused once"


def test_the_operator_mode_off_plans_nothing() -> None:
    """The planner reads the mode before anything (a record under way when it turns off is the
    executor's to stop: tests/remediation/test_executor.py)."""
    responder, kube, cluster = loop_rig(mode="off")
    assert responder.handle(p0_signal("GPUCriticalXid")) is None
    assert responder.idle()
    assert kube.records(NS, JOB) == [] and cluster.effects == []


def test_a_plan_written_while_the_reconcile_writes_the_status_is_written_once() -> None:
    responder, kube, _ = loop_rig()
    kube.interleave.append(
        lambda k: k.put(merge_patch(k.get_monitor(NS, JOB), {"status": {"conditions": [{"type": "Ready"}]}}))
    )
    assert responder.handle(p0_signal("GPUCriticalXid")) is not None
    assert responder.idle()
    assert kube.conflicts == 1 and [r["phase"] for r in kube.records(NS, JOB)] == [Phase.SUCCEEDED]


def test_a_signal_answered_by_an_operator_killed_before_it_planned_is_acted_on_by_the_next() -> None:
    """The 200 was given (the signal is in the status), then the process died: its queue is lost. A new
    operator on the same API plans the pending signal on its first pass, and acts on the fault once."""
    killed, kube, _ = loop_rig()
    signal = p0_signal("GPUCriticalXid")
    killed.receive([signal])
    killed.stop()  # the planner thread never ran: the queue dies with the process

    clock = Clock(T0 + 30)
    restarted, _, cluster = loop_rig(kube=kube, clock=clock)
    assert restarted.pending.run() == 1
    planned = restarted.intake.next(timeout=0)
    assert planned is not None and record_id(planned) == record_id(signal)
    assert restarted.planner.try_handle(planned)
    assert restarted.idle()
    [record] = kube.records(NS, JOB)
    assert record["id"] == record_id(signal) and record["phase"] == Phase.SUCCEEDED, record
    assert [e[0] for e in cluster.effects].count("cordon") == 1
    assert pending(kube) == []
    assert restarted.pending.run() == 0, "decided: nothing left to plan"


def test_the_pending_pass_waits_for_the_planner_that_answered_and_hands_a_signal_over_once_a_minute() -> None:
    clock = Clock()
    responder, _, _ = loop_rig(clock=clock)
    responder.receive([p0_signal("GPUCriticalXid")])
    responder.intake.next(timeout=0)  # taken by a planner that then failed
    assert responder.pending.run() == 0, "within the grace: the planner that answered 200 decides it"
    clock.now += PENDING_GRACE_S
    assert responder.pending.run() == 1
    clock.now += PENDING_RETRY_S / 2
    assert responder.pending.run() == 0, "handed over a moment ago"
    clock.now += PENDING_RETRY_S / 2
    assert responder.pending.run() == 1


def test_a_standby_plans_no_pending_signal() -> None:
    leader, kube, _ = loop_rig()
    leader.receive([p0_signal("GPUCriticalXid")])
    standby, _, _ = loop_rig(leader=False, kube=kube, clock=Clock(T0 + 3600))
    assert standby.pending.run() == 0 and standby.intake.next(timeout=0) is None


def test_the_pending_pass_runs_after_resume_in_the_periodic_round() -> None:
    clock = Clock()
    responder, _, _ = loop_rig(clock=clock)
    responder.receive([p0_signal("GPUCriticalXid")])
    responder.intake.next(timeout=0)
    clock.now += PENDING_GRACE_S
    responder.passes()
    assert responder.intake.next(timeout=0) is not None


def pending(kube: FakeKube) -> list[dict[str, object]]:
    return list((kube.get_monitor(NS, JOB).get("status") or {}).get("pendingSignals") or [])


def test_the_dispatcher_says_how_long_ago_a_record_ended_and_nothing_while_it_runs() -> None:
    """What the planner judges its own planned cordons by (a record that ended without cordoning stops
    holding the cap)."""
    responder, _, _ = loop_rig()
    record = responder.handle(p0_signal("GPUCriticalXid"))
    assert record is not None and responder.idle()
    ended = responder.dispatcher.ended_since(record["id"])
    assert ended is not None and 0 <= ended < 5
    assert responder.dispatcher.ended_since("never-dispatched") is None


def test_the_sidecars_token_an_executor_is_given_is_bound_to_the_monitor_it_read() -> None:
    """The executor calls the sidecars with the token in the monitor's Secret, which the reconcile derived
    with the monitor's uid: a monitor created again under its name has another one."""
    responder, kube, _ = loop_rig()
    given: list[Any] = []
    factory = responder.dispatcher.executor_factory

    def executor(c: Any, save: Any, token_for: Any, **kw: Any) -> Any:
        given.append(token_for)
        return factory(c, save, token_for, **kw)

    responder.dispatcher.executor_factory = executor
    responder.handle(p0_signal("GPUCriticalXid"))
    assert responder.idle()
    monitor = monitor_of(kube.get_monitor(NS, JOB))
    assert monitor is not None and monitor.metadata.uid == "u-1"
    token = given[0](monitor)
    assert tokens.verify(KEY, tokens.EVENTS, NS, JOB, "u-1", presented=token)
    again = monitor.model_copy(update={"metadata": monitor.metadata.model_copy(update={"uid": "u-2"})})
    assert given[0](again) != token
    assert tokens.verify(KEY, tokens.EVENTS, NS, JOB, "u-2", presented=given[0](again))


def test_a_stopping_loop_starts_no_executor_and_leaves_its_records_to_the_next_leader() -> None:
    """After SIGTERM nothing more is carried out here (the running executors stop at their next step or
    poll: tests/remediation/test_executor.py); a record written meanwhile is the next leader's."""
    responder, kube, cluster = loop_rig()
    responder.stop()
    record = responder.handle(p0_signal("GPUCriticalXid"))
    assert record is not None and responder.idle()
    assert kube.records(NS, JOB)[0]["phase"] == Phase.PLANNED and cluster.effects == []
    assert responder.resume.run() == 0

    successor, _, _ = loop_rig(kube=kube)
    assert successor.resume.run() == 1 and successor.idle()
    assert kube.records(NS, JOB)[0]["phase"] == Phase.SUCCEEDED


def test_every_part_that_posts_to_alertmanager_is_given_the_platforms_severity_style() -> None:
    loop = RemediationLoop(None, FakeKube(), None, key=lambda: None, leader=lambda: False,  # type: ignore[arg-type]
                           lock=lambda ns, name: None, alertmanager_url="http://am", severity_style=MAPPED)  # fmt: skip
    try:
        assert loop.intake.pager is not None
        posting = [
            loop.intake.pager,
            loop.dispatcher,
            loop.breaker,
            loop.watch,
            loop.escalate,
            loop.cordon_notices,
        ]
        assert [p.severity_style for p in posting] == [MAPPED] * len(posting)
    finally:
        loop.stop()


def test_a_slow_node_record_waits_without_a_thread_and_the_resume_pass_finishes_it() -> None:
    """ReplaceAtCheckpoint's wait ends each run with the record InProgress (no Event, nothing cordoned,
    the executor's thread back in the pool); the resume pass hands it over again at each round, and the
    round after the trainers' own checkpoint carries it out, once."""
    responder, kube, cluster = loop_rig()
    cluster.hardware["job-0"].append({"alertname": "GPUClocksThrottled", "gpu": "1", "at": T0 - 5})
    labels = {"alertname": "GPUClocksThrottled", "severity": "P1", "namespace": NS, "training_job": JOB,
              "node": "gpu-a", "gpu": "1"}  # fmt: skip
    responder.handle(
        Signal("GPUClocksThrottled", "P1", labels, fingerprint(labels), Source.ALERTMANAGER, T0 - 5)
    )
    assert responder.idle()
    waiting = kube.records(NS, JOB)[0]
    assert waiting["class"] == "slowNode" and waiting["phase"] == Phase.IN_PROGRESS, waiting
    assert [(s["kind"], s["phase"]) for s in waiting["steps"][:2]] == [
        ("ConfirmFault", Phase.SUCCEEDED), ("AwaitCheckpoint", Phase.IN_PROGRESS)
    ]  # fmt: skip
    assert not [r for r, _ in kube.events if r in ("RemediationSucceeded", "RemediationFailed")]
    assert responder.resume.run() == 1 and responder.idle(), "looked again: still no checkpoint"
    assert kube.records(NS, JOB)[0]["steps"][1]["phase"] == Phase.IN_PROGRESS
    assert "cordon" not in [e[0] for e in cluster.effects]

    for pod in ("job-0", "job-1"):  # the job's own periodic checkpoint
        cluster.trainer_saves(cluster.sidecar[pod], "incremental")
    assert responder.resume.run() == 1 and responder.idle()
    done = kube.records(NS, JOB)[0]
    assert done["phase"] == Phase.SUCCEEDED, done
    assert [e[0] for e in cluster.effects].count("cordon") == 1
    assert "RemediationSucceeded" in [r for r, _ in kube.events]
    assert responder.resume.run() == 0
