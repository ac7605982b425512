"""The P0 response matrix as a pure decision: every class x every action x dry run, the storm guard,
the restart budget, duplicates across the two paths, and the signals that must change nothing."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.conftest import monitor as make_monitor
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.alerts import TRAINING_INTERRUPTED
from trainguard.catalog.events import fingerprint
from trainguard.remediation import plan as planning
from trainguard.remediation.model import (
    ClusterState,
    Phase,
    Plan,
    Signal,
    Source,
    Step,
    StepKind,
)
from trainguard.remediation.plan import cordon_cap, plan, quiet, record_id
from trainguard.remediation.records import mark, new_record
from trainguard.times import rfc3339

T0 = 1_700_000_000.0
NODE = "gpu-a"
JOB = {"namespace": "ml", "training_job": "llama-pretrain"}
NODE_FAULTS = ("GPUNodeDown", "GPUDoubleBitECCError", "GPUCriticalXid", "GPULost")
JOB_NODES = frozenset({"gpu-a", "gpu-b"})
"""The nodes the job's live pods are on, as the pod cache shows them."""

P, PIN, CKPT, CORDON, TAINT, RESTART, CONFIRM, ADVISE, NOTIFY = (
    StepKind.PAUSE,
    StepKind.PIN_CHECKPOINT,
    StepKind.REQUEST_CHECKPOINT,
    StepKind.CORDON,
    StepKind.TAINT,
    StepKind.RESTART_GANG,
    StepKind.CONFIRM_PLACEMENT,
    StepKind.ADVISE,
    StepKind.NOTIFY,
)
CONFIRM_FAULT = StepKind.CONFIRM_FAULT
IN_PLACE = StepKind.RESTART_IN_PLACE
RESTART_JOB = (IN_PLACE, RESTART, CONFIRM)
"""A stall's or an interruption's: in place where every pod runs trainguard launch, else new pods."""
NODE_DOWN_PLAN = (CORDON, TAINT, CKPT, RESTART, CONFIRM)
"""GPUNodeDown's plan at the defaults: cordon and taint first, then the checkpoint and the restart."""
FULL_NODE_FAULT = (CONFIRM_FAULT, *NODE_DOWN_PLAN)
"""A GPU fault's (XID, DBE, lost): the node's sidecar confirms it first."""


def full_plan(alert: str, *, cordon_only: bool = False) -> tuple[StepKind, ...]:
    steps = (CORDON, TAINT) if cordon_only else NODE_DOWN_PLAN
    return steps if alert == "GPUNodeDown" else (CONFIRM_FAULT, *steps)


def signal(
    alertname: str = "GPUCriticalXid",
    *,
    severity: str = "P0",
    node: str = NODE,
    gpu: str = "0",
    source: Source = Source.SIDECAR,
    starts_at: float = T0,
    firing: bool = True,
    **labels: str,
) -> Signal:
    all_labels = {"alertname": alertname, "severity": severity, **JOB, **labels}
    if node:
        all_labels["node"] = node
    if gpu:
        all_labels["gpu"] = gpu
    return Signal(
        alertname=alertname,
        severity=severity,
        labels=all_labels,
        fingerprint=fingerprint(all_labels),
        source=source,
        starts_at=starts_at,
        firing=firing,
    )


def monitor(**remediation: Any) -> TrainingJobMonitor:
    return make_monitor(**{"spec.remediation": remediation})


def state(
    *,
    now: float = T0 + 5,
    gpu_nodes: int = 40,
    cordons: tuple[tuple[str, float], ...] = (),
    records: Any = (),
    job_nodes: frozenset[str] = JOB_NODES,
    unready: frozenset[str] = JOB_NODES,
) -> ClusterState:
    return ClusterState(now=now, gpu_nodes=gpu_nodes, cordons=cordons, records=tuple(records),
                        job_nodes=job_nodes, unready_nodes=unready)  # fmt: skip


def kinds(p: Plan) -> tuple[StepKind, ...]:
    return tuple(s.kind for s in p.steps)


def finished(record: dict[str, Any], at: float) -> dict[str, Any]:
    """The record carried out to the end at `at` (every step Succeeded)."""
    for i in range(len(record["steps"])):
        record = mark(record, i, Phase.SUCCEEDED, "done", at)
    return record


# ---- the matrix -------------------------------------------------------------------------------------

# (alert, spec.remediation, expected steps); every cell is also run in dry run
MATRIX: list[tuple[str, dict[str, Any], tuple[StepKind, ...]]] = [
    ("TrainingLossNonFinite", {"actions": {"nonFiniteLoss": "PauseAndPinCheckpoint"}}, (P, PIN, IN_PLACE)),
    ("TrainingLossNonFinite", {"actions": {"nonFiniteLoss": "Notify"}}, ()),
    *[(a, {"actions": {"nodeFault": "CheckpointCordonReschedule"}}, full_plan(a)) for a in NODE_FAULTS],
    *[(a, {"actions": {"nodeFault": "Cordon"}}, full_plan(a, cordon_only=True)) for a in NODE_FAULTS],
    *[(a, {"actions": {"nodeFault": "Notify"}}, ()) for a in NODE_FAULTS],
    ("TrainingJobStalled", {"actions": {"stall": "RestartFromCheckpoint"}}, RESTART_JOB),
    ("TrainingJobStalled", {"actions": {"stall": "Notify"}}, ()),
    (TRAINING_INTERRUPTED, {"actions": {"interrupted": "RestartFromCheckpoint"}}, RESTART_JOB),
    (TRAINING_INTERRUPTED, {"actions": {"interrupted": "Notify"}}, ()),
    ("GradientExplosion", {"trainingAdvice": True}, (ADVISE,)),
    ("GradientExplosion", {"trainingAdvice": False}, ()),
]


@pytest.mark.parametrize("dry_run", [False, True], ids=["live", "dry-run"])
@pytest.mark.parametrize(("alert", "settings", "expected"), MATRIX)
def test_response_matrix(
    alert: str, settings: dict[str, Any], expected: tuple[StepKind, ...], dry_run: bool
) -> None:
    severity = "P1" if alert == "GradientExplosion" else "P0"
    p = plan(signal(alert, severity=severity), monitor(**settings, dryRun=dry_run), state())
    assert kinds(p) == expected
    assert p.dry_run is dry_run
    assert p.alert == alert
    if expected:
        assert p.skipped == ""
    else:
        assert p.skipped and quiet(p)


def test_default_settings_answer_each_class() -> None:
    """The defaults: pause and pin, the full node-fault response, restart an interrupted gang, and only
    notify a stall (a restart on a slow step is not what a default should do)."""
    m = make_monitor()
    assert kinds(plan(signal("TrainingLossNonFinite"), m, state())) == (P, PIN, IN_PLACE)
    assert kinds(plan(signal("GPULost"), m, state())) == FULL_NODE_FAULT
    assert kinds(plan(signal(TRAINING_INTERRUPTED), m, state())) == RESTART_JOB
    stall = plan(signal("TrainingJobStalled"), m, state())
    assert kinds(stall) == () and stall.skipped.startswith(planning.NOTIFY_ONLY)
    assert kinds(plan(signal("GradientExplosion", severity="P1"), m, state())) == ()


@pytest.mark.parametrize("alert", NODE_FAULTS)
def test_node_fault_steps_name_the_node_and_avoid_it(alert: str) -> None:
    p = plan(signal(alert), monitor(emergencyCheckpointTimeout="90s"), state())
    params = {s.kind: s.params for s in p.steps}
    assert params[CKPT] == {"kind": "full", "timeout_s": "90", "avoid": NODE}
    assert params[CORDON] == {"node": NODE, "reason": alert}
    assert params[TAINT] == {"node": NODE, "reason": alert}
    assert params[RESTART] == {"from": "newest-good-checkpoint", "avoid": NODE}
    assert params[CONFIRM] == {"avoid": NODE}
    assert (p.node, p.gpu, p.p0_class) == (NODE, "0", "nodeFault")


def test_emergency_checkpoint_timeout_defaults_to_five_minutes() -> None:
    p = plan(signal("GPUDoubleBitECCError"), make_monitor(), state())
    assert {s.kind: s.params for s in p.steps}[CKPT]["timeout_s"] == "300"


def test_classes_are_named_after_their_settings() -> None:
    m = monitor(trainingAdvice=True, actions={"stall": "RestartFromCheckpoint"})
    assert plan(signal("TrainingLossNonFinite"), m, state()).p0_class == "nonFiniteLoss"
    assert plan(signal("GPUNodeDown", gpu=""), m, state()).p0_class == "nodeFault"
    assert plan(signal("TrainingJobStalled"), m, state()).p0_class == "stall"
    assert plan(signal(TRAINING_INTERRUPTED), m, state()).p0_class == "interrupted"
    assert plan(signal("GradientExplosion", severity="P1"), m, state()).p0_class == "trainingAdvice"


def test_advice_is_clip_gradients() -> None:
    p = plan(signal("GradientExplosion", severity="P1"), monitor(trainingAdvice=True), state())
    assert [s.params for s in p.steps] == [{"advice": "clip_gradients"}]


def test_stall_and_interrupted_restart_without_avoiding_a_node() -> None:
    m = monitor(actions={"stall": "RestartFromCheckpoint"})
    for alert in ("TrainingJobStalled", TRAINING_INTERRUPTED):
        p = plan(signal(alert), m, state())
        gang = [s.params.get("avoid") for s in p.steps if s.kind != IN_PLACE]
        assert gang == ["", ""]  # the node is not at fault


# ---- a node fault without a node --------------------------------------------------------------------


def test_node_fault_without_node_label_does_what_it_can_and_says_why() -> None:
    p = plan(signal("GPUCriticalXid", node=""), make_monitor(), state())
    assert kinds(p) == (NOTIFY, CKPT, RESTART, CONFIRM)
    assert p.steps[0].params["reason"].startswith(planning.NO_NODE)
    assert p.skipped == ""
    assert all(s.params.get("avoid") == "" for s in p.steps[1:])


def test_node_fault_without_node_label_and_cordon_action_only_notifies() -> None:
    p = plan(signal("GPULost", node=""), monitor(actions={"nodeFault": "Cordon"}), state())
    assert kinds(p) == (NOTIFY,)
    assert p.skipped.startswith(planning.NO_NODE) and not quiet(p)


# ---- non-finite loss: the pinned checkpoint is older than the NaN ------------------------------------


@pytest.mark.parametrize("source", list(Source))
@pytest.mark.parametrize("scrape", ["5s", "15s", "1m"])
def test_nonfinite_loss_pins_a_checkpoint_saved_before_the_nan(source: Source, scrape: str) -> None:
    """The NaN was logged at T_NAN. The sidecar stamps its event as the report arrives (at most a
    moment later); Prometheus's alert starts at the evaluation after the scrape after it (each at most a
    scrape interval later). Whatever the path, before_ts is not after T_NAN: a checkpoint saved at or
    after the NaN is never pinned."""
    t_nan = T0
    interval = {"5s": 5.0, "15s": 15.0, "1m": 60.0}[scrape]
    latest = {Source.SIDECAR: t_nan + 0.5, Source.ALERTMANAGER: t_nan + 2 * interval}
    starts_at = latest.get(source, t_nan + 2 * interval)
    m = make_monitor(**{"spec.exporter": {"gpuBackend": "simulated", "scrapeInterval": scrape}})
    p = plan(signal("TrainingLossNonFinite", source=source, starts_at=starts_at), m, state(now=starts_at + 1))
    pin = next(s for s in p.steps if s.kind == PIN)
    before = float(pin.params["before_ts"])
    assert before <= t_nan
    assert before < starts_at
    assert CORDON not in kinds(p) and TAINT not in kinds(p) and RESTART not in kinds(p)


def test_nonfinite_loss_never_cordons_even_with_a_node_label() -> None:
    p = plan(signal("TrainingLossNonFinite", node=NODE, pod="llama-0"), make_monitor(), state())
    assert kinds(p) == (P, PIN, IN_PLACE)
    assert p.node == NODE  # recorded, not cordoned


# ---- storm guard ------------------------------------------------------------------------------------


def cordoned(n: int, at: float = T0) -> tuple[tuple[str, float], ...]:
    return tuple((f"other-{i}", at) for i in range(n))


@pytest.mark.parametrize(("gpu_nodes", "cap"), [(0, 1), (3, 1), (10, 1), (19, 1), (20, 2), (40, 4)])
def test_default_cordon_cap_is_ten_percent_of_gpu_nodes_at_least_one(gpu_nodes: int, cap: int) -> None:
    assert cordon_cap(make_monitor().spec.remediation, gpu_nodes) == cap


@pytest.mark.parametrize(("gpu_nodes", "cap"), [(3, 1), (10, 1), (40, 4)])
def test_storm_guard_default_cap_acts_below_and_notifies_at_it(gpu_nodes: int, cap: int) -> None:
    m = make_monitor()
    below = plan(signal("GPUNodeDown"), m, state(gpu_nodes=gpu_nodes, cordons=cordoned(cap - 1)))
    assert kinds(below) == NODE_DOWN_PLAN
    at = plan(signal("GPUNodeDown"), m, state(gpu_nodes=gpu_nodes, cordons=cordoned(cap)))
    assert kinds(at) == (NOTIFY,)
    assert at.skipped.startswith(planning.CORDON_CAP) and not quiet(at)
    assert at.steps[0].params["reason"] == at.skipped
    assert f"cap {cap}" in at.skipped and NODE in at.skipped


def test_storm_guard_explicit_cap_overrides_the_default() -> None:
    m = monitor(maxCordonedNodes=2)
    assert kinds(plan(signal(), m, state(gpu_nodes=1000, cordons=cordoned(1)))) == FULL_NODE_FAULT
    assert kinds(plan(signal(), m, state(gpu_nodes=1000, cordons=cordoned(2)))) == (NOTIFY,)
    assert kinds(plan(signal(), monitor(maxCordonedNodes=0), state())) == (NOTIFY,)


def test_storm_guard_counts_only_the_cordon_window() -> None:
    m = make_monitor()  # 10m window, 40 nodes: cap 4
    now = T0 + 5
    old = cordoned(4, at=now - 601)
    assert kinds(plan(signal(), m, state(now=now, cordons=old))) == FULL_NODE_FAULT
    recent = cordoned(4, at=now - 599)
    assert kinds(plan(signal(), m, state(now=now, cordons=recent))) == (NOTIFY,)
    hour = monitor(cordonWindow="1h")
    assert kinds(plan(signal(), hour, state(now=now, cordons=old))) == (NOTIFY,)


def test_storm_guard_lets_a_node_already_cordoned_be_cordoned_again() -> None:
    """Re-cordoning a node trainguard already cordoned adds nothing to the count: idempotent."""
    cordons = ((NODE, T0), *cordoned(3))
    assert kinds(plan(signal(), make_monitor(), state(cordons=cordons))) == FULL_NODE_FAULT


def test_storm_guard_counts_cordons_this_monitor_is_about_to_make() -> None:
    """Two nodes fail at once with a cap of one: the first plan's record exists but its cordon is not
    made yet (no node annotation to read): the second must still notify."""
    m = monitor(maxCordonedNodes=1)
    first = plan(signal(node="gpu-a"), m, state())
    assert kinds(first) == FULL_NODE_FAULT
    pending = new_record(first, T0 + 5)
    second = plan(signal(node="gpu-b"), m, state(now=T0 + 6, records=[pending]))
    assert kinds(second) == (NOTIFY,)


def test_storm_guard_ignores_dry_run_cordons_that_were_never_made() -> None:
    m = monitor(maxCordonedNodes=1, dryRun=True)
    first = new_record(plan(signal(node="gpu-a"), m, state()), T0 + 5)
    second = plan(signal(node="gpu-b"), monitor(maxCordonedNodes=1), state(records=[first]))
    assert kinds(second) == FULL_NODE_FAULT


def test_storm_guard_applies_to_the_cordon_action_and_not_to_a_stall() -> None:
    full = state(cordons=cordoned(4))
    assert kinds(plan(signal(), monitor(actions={"nodeFault": "Cordon"}), full)) == (NOTIFY,)
    stall = monitor(actions={"stall": "RestartFromCheckpoint"})
    assert kinds(plan(signal("TrainingJobStalled"), stall, full)) == RESTART_JOB


def test_storm_guard_is_decided_in_dry_run_too() -> None:
    p = plan(signal(), monitor(dryRun=True), state(cordons=cordoned(4)))
    assert kinds(p) == (NOTIFY,) and p.dry_run and p.skipped.startswith(planning.CORDON_CAP)


# ---- restart budget ---------------------------------------------------------------------------------


def restart_records(n: int, at: float, **overrides: Any) -> list[dict[str, Any]]:
    """n finished restarts of this job (interrupted pods), each a distinct fault instance."""
    m = make_monitor()
    out = []
    for i in range(n):
        s = signal(TRAINING_INTERRUPTED, pod=f"llama-{i}", starts_at=at + i)
        rec = finished(new_record(plan(s, m, state(now=at + i)), at + i), at + i + 1)
        out.append(rec | overrides)
    return out


@pytest.mark.parametrize("alert", [TRAINING_INTERRUPTED, "TrainingJobStalled", "GPUCriticalXid"])
def test_restart_budget_allows_up_to_the_budget_then_notifies(alert: str) -> None:
    m = monitor(actions={"stall": "RestartFromCheckpoint"}, jobRestartBudget=3)
    now = T0 + 3600
    two = restart_records(2, at=T0)
    assert RESTART in kinds(plan(signal(alert, starts_at=now), m, state(now=now, records=two)))
    three = restart_records(3, at=T0)
    p = plan(signal(alert, starts_at=now), m, state(now=now, records=three))
    assert kinds(p) == (NOTIFY,)
    assert p.skipped.startswith(planning.RESTART_BUDGET) and "3 restart(s)" in p.skipped


def test_restart_budget_counts_only_the_budget_window() -> None:
    now = T0 + 86400 + 60
    old = restart_records(3, at=T0)  # created more than 24h before now
    assert (
        kinds(plan(signal(TRAINING_INTERRUPTED, starts_at=now), make_monitor(), state(now=now, records=old)))
        == RESTART_JOB
    )
    short = monitor(budgetWindow="1h")
    recent = restart_records(3, at=now - 1800)
    assert kinds(
        plan(signal(TRAINING_INTERRUPTED, starts_at=now), short, state(now=now, records=recent))
    ) == (NOTIFY,)


def test_restart_budget_ignores_dry_runs_and_restarts_never_reached() -> None:
    now = T0 + 3600
    dry = restart_records(3, at=T0, dryRun=True)
    assert RESTART in kinds(
        plan(signal(TRAINING_INTERRUPTED, starts_at=now), make_monitor(), state(now=now, records=dry))
    )
    # a node-fault record that failed at its checkpoint step never restarted anything
    failed = []
    for i in range(3):
        rec = new_record(
            plan(
                signal(node=f"n{i}", starts_at=T0 + i),
                make_monitor(),
                state(now=T0 + i, job_nodes=frozenset({f"n{i}"})),
            ),
            T0 + i,
        )
        failed.append(mark(rec, 0, Phase.FAILED, "no sidecar answered", T0 + i + 1))
    assert RESTART in kinds(
        plan(signal(TRAINING_INTERRUPTED, starts_at=now), make_monitor(), state(now=now, records=failed))
    )


def test_restart_budget_counts_a_restart_still_to_come() -> None:
    m = monitor(jobRestartBudget=1)
    pending = new_record(plan(signal(TRAINING_INTERRUPTED), m, state()), T0 + 5)
    p = plan(signal("GPULost", node="gpu-b", starts_at=T0 + 6), m, state(now=T0 + 7, records=[pending]))
    assert kinds(p) == (NOTIFY,) and p.skipped.startswith(planning.RESTART_BUDGET)


def test_zero_restart_budget_never_restarts() -> None:
    p = plan(signal(TRAINING_INTERRUPTED), monitor(jobRestartBudget=0), state())
    assert kinds(p) == (NOTIFY,) and p.skipped.startswith(planning.RESTART_BUDGET)


# ---- duplicates -------------------------------------------------------------------------------------


def test_same_fault_by_fast_path_then_alertmanager_acts_once() -> None:
    m = make_monitor()
    fast = signal("GPUCriticalXid", source=Source.SIDECAR, starts_at=T0)
    first = plan(fast, m, state(now=T0 + 0.2))
    assert kinds(first) == FULL_NODE_FAULT
    rec = new_record(first, T0 + 0.2)
    via_am = signal("GPUCriticalXid", source=Source.ALERTMANAGER, starts_at=T0 + 20)
    assert via_am.fingerprint == fast.fingerprint and record_id(via_am) != record_id(fast)
    for now, records in ((T0 + 25, [rec]), (T0 + 300, [finished(rec, T0 + 60)])):
        second = plan(via_am, m, state(now=now, records=records))
        assert kinds(second) == () and second.skipped == f"duplicate of {rec['id']}" and quiet(second)


def test_alertmanager_then_fast_path_acts_once() -> None:
    m = make_monitor()
    rec = new_record(
        plan(signal(source=Source.ALERTMANAGER, starts_at=T0 + 20), m, state(now=T0 + 21)), T0 + 21
    )
    late_fast = plan(signal(source=Source.SIDECAR, starts_at=T0), m, state(now=T0 + 22, records=[rec]))
    assert late_fast.skipped == f"duplicate of {rec['id']}"


def test_same_instance_reposted_long_after_it_was_handled_is_a_duplicate() -> None:
    """Alertmanager re-sends a firing alert (repeat_interval, or a group change): still the fault the
    record handled, however late."""
    m = make_monitor()
    rec = finished(new_record(plan(signal(), m, state()), T0 + 5), T0 + 60)
    again = plan(signal(starts_at=T0), m, state(now=T0 + 4 * 3600, records=[rec]))
    assert again.skipped == f"duplicate of {rec['id']}"


def test_new_instance_after_the_record_finished_acts_again() -> None:
    m = monitor(actions={"stall": "RestartFromCheckpoint"})
    rec = finished(new_record(plan(signal("TrainingJobStalled"), m, state()), T0 + 5), T0 + 60)
    within = plan(signal("TrainingJobStalled", starts_at=T0 + 300), m, state(now=T0 + 301, records=[rec]))
    assert within.skipped.startswith(planning.DUPLICATE)  # finished less than 10 minutes ago
    later = plan(signal("TrainingJobStalled", starts_at=T0 + 3600), m, state(now=T0 + 3601, records=[rec]))
    assert kinds(later) == RESTART_JOB


def test_one_dead_node_raising_several_alerts_acts_once() -> None:
    """XID 79 raises GPUCriticalXid and GPULost; a dying node may add GPUNodeDown: one node, one response."""
    m = make_monitor()
    rec = new_record(plan(signal("GPUCriticalXid", gpu="3"), m, state()), T0 + 5)
    for alert, gpu in (("GPULost", "3"), ("GPUDoubleBitECCError", "5"), ("GPUNodeDown", "")):
        p = plan(signal(alert, gpu=gpu, starts_at=T0 + 2), m, state(now=T0 + 6, records=[rec]))
        assert p.skipped == f"duplicate of {rec['id']}", alert
    other_node = plan(signal("GPULost", node="gpu-b"), m, state(now=T0 + 6, records=[rec]))
    assert kinds(other_node) == FULL_NODE_FAULT


def test_a_gang_restart_under_way_covers_the_stall_and_the_failed_pods_it_caused() -> None:
    """A dead GPU hangs the collective (a stall) and fails pods (TrainingInterrupted) on other nodes:
    the node fault's restart answers them all, while it runs and when re-posted after it finished."""
    m = monitor(actions={"stall": "RestartFromCheckpoint"})
    rec = new_record(plan(signal("GPUCriticalXid"), m, state()), T0 + 5)
    stall = signal("TrainingJobStalled", node="", gpu="", starts_at=T0 + 30)
    oom = signal(TRAINING_INTERRUPTED, node="gpu-b", gpu="", starts_at=T0 + 10)
    for s in (stall, oom):
        assert plan(s, m, state(now=T0 + 40, records=[rec])).skipped == f"duplicate of {rec['id']}"
    done = finished(rec, T0 + 90)
    for s in (stall, oom):
        assert plan(s, m, state(now=T0 + 3600, records=[done])).skipped == f"duplicate of {rec['id']}"
    # a stall that began after the restart finished is a new fault
    fresh = signal("TrainingJobStalled", node="", gpu="", starts_at=T0 + 200)
    assert kinds(plan(fresh, m, state(now=T0 + 201, records=[done]))) == RESTART_JOB


def test_a_failed_restart_does_not_cover_a_later_interruption() -> None:
    m = make_monitor()
    rec = new_record(plan(signal(TRAINING_INTERRUPTED), m, state()), T0 + 5)
    failed = mark(rec, 0, Phase.FAILED, "pods not deleted", T0 + 6)
    other = signal(TRAINING_INTERRUPTED, node="gpu-b", starts_at=T0 + 2)
    assert kinds(plan(other, m, state(now=T0 + 700, records=[failed]))) == RESTART_JOB


def test_a_node_fault_is_not_covered_by_a_restart_under_way() -> None:
    """The node must still be cordoned, and the gang kept away from it."""
    m = make_monitor()
    rec = new_record(plan(signal(TRAINING_INTERRUPTED, node="gpu-b"), m, state()), T0 + 5)
    assert kinds(plan(signal("GPULost"), m, state(now=T0 + 6, records=[rec]))) == FULL_NODE_FAULT


def test_a_skipped_record_holds_off_only_for_the_duplicate_window() -> None:
    """At the cordon cap the same firing alert is re-posted: within 10 minutes it is a duplicate (no
    second notice); later it is decided again, and acts once the window has room."""
    m = monitor(maxCordonedNodes=1)
    capped = plan(signal(), m, state(cordons=(("other", T0),)))
    rec = finished(new_record(capped, T0 + 5), T0 + 6)
    assert rec["phase"] == Phase.SKIPPED
    soon = plan(signal(), m, state(now=T0 + 300, cordons=(("other", T0),), records=[rec]))
    assert soon.skipped.startswith(planning.DUPLICATE)
    later = plan(signal(), m, state(now=T0 + 700, cordons=(("other", T0),), records=[rec]))
    assert kinds(later) == FULL_NODE_FAULT


def test_a_claim_its_sidecar_did_not_confirm_holds_off_only_its_own_copies() -> None:
    """A GPUCriticalXid posted to Alertmanager by anyone, refused at ConfirmFault: the node's real fault
    after it (its sidecar's fast path, another of its GPUs) is acted on; copies of the forged claim, which
    began before the refusal (re-posted, or by the other path), are duplicates."""
    m = make_monitor()
    forged = signal(source=Source.ALERTMANAGER, starts_at=T0)
    rec = new_record(plan(forged, m, state()), T0 + 5)
    refused = mark(rec, 0, Phase.FAILED, "unconfirmed: no sidecar on gpu-a saw GPUCriticalXid", T0 + 6)
    assert refused["phase"] == Phase.FAILED and rec["steps"][0]["kind"] == CONFIRM_FAULT
    after = state(now=T0 + 30, records=[refused])
    for copy in (forged, signal(source=Source.SIDECAR, starts_at=T0 + 1)):  # Alertmanager's repeat, in flight
        assert plan(copy, m, after).skipped == f"duplicate of {rec['id']}"
    real = signal(source=Source.SIDECAR, starts_at=T0 + 20)
    assert real.fingerprint == forged.fingerprint
    assert kinds(plan(real, m, after)) == FULL_NODE_FAULT
    assert kinds(plan(signal("GPULost", gpu="5", starts_at=T0 + 2), m, after)) == FULL_NODE_FAULT
    assert kinds(plan(signal("GPUNodeDown", gpu="", starts_at=T0 + 20), m, after)) == NODE_DOWN_PLAN
    # a record that failed once it acted (its cordon) still holds the node's faults off
    cordon_failed = mark(mark(rec, 0, Phase.SUCCEEDED, "confirmed", T0 + 6), 1, Phase.FAILED, "409", T0 + 7)
    assert plan(real, m, state(now=T0 + 30, records=[cordon_failed])).skipped == f"duplicate of {rec['id']}"


def test_dry_run_records_do_not_hold_off_a_live_response() -> None:
    dry = new_record(plan(signal(), monitor(dryRun=True), state()), T0 + 5)
    assert dry["phase"] == Phase.DRY_RUN
    again_dry = plan(signal(), monitor(dryRun=True), state(now=T0 + 60, records=[dry]))
    assert again_dry.skipped == f"duplicate of {dry['id']}"
    live = plan(signal(), make_monitor(), state(now=T0 + 60, records=[dry]))
    assert kinds(live) == FULL_NODE_FAULT


def test_an_unfinished_record_is_a_duplicate_however_old() -> None:
    m = make_monitor()
    rec = mark(new_record(plan(signal(), m, state()), T0 + 5), 0, Phase.IN_PROGRESS, "", T0 + 6)
    p = plan(signal(starts_at=T0 + 86400), m, state(now=T0 + 86400, records=[rec]))
    assert p.skipped == f"duplicate of {rec['id']}"


# ---- signals that change nothing --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sig", "reason"),
    [
        (signal(firing=False), planning.RESOLVED),
        (replace(signal(), labels={**signal().labels, "namespace": "other"}), planning.FOREIGN),
        (replace(signal(), labels={**signal().labels, "training_job": "other"}), planning.FOREIGN),
        (signal("GPUMemoryCritical", severity="P1"), planning.NO_RESPONSE),
        (signal("GPUMemoryCritical", severity="P0", escalated_from="P1"), planning.NO_RESPONSE),
        (signal("GPUCriticalXid", severity="P1"), planning.NO_RESPONSE),  # a policy made it a P1
        (signal("MyCustomRule"), planning.NO_RESPONSE),
        (signal("GradientExplosion", severity="P1"), planning.NO_RESPONSE),  # not opted in
    ],
)
def test_signals_that_change_nothing(sig: Signal, reason: str) -> None:
    p = plan(sig, make_monitor(), state())
    assert p.steps == () and p.skipped.startswith(reason) and quiet(p)


def test_remediation_disabled_changes_nothing() -> None:
    for alert in ("TrainingLossNonFinite", "GPULost", TRAINING_INTERRUPTED):
        p = plan(signal(alert), monitor(enabled=False), state())
        assert p.steps == () and p.skipped == planning.DISABLED and quiet(p)


def test_a_resolved_signal_of_a_disabled_monitor_says_resolved() -> None:
    assert plan(signal(firing=False), monitor(enabled=False), state()).skipped == planning.RESOLVED


# ---- ids --------------------------------------------------------------------------------------------


def test_record_id_is_one_per_alert_instance() -> None:
    a = plan(signal(starts_at=T0 + 0.4), make_monitor(), state())
    assert a.record_id == plan(signal(starts_at=T0 + 0.4), make_monitor(), state(now=T0 + 99)).record_id
    assert a.record_id == f"{a.fingerprint}-{int(T0)}"
    assert a.record_id != plan(signal(starts_at=T0 + 60), make_monitor(), state()).record_id
    assert len(a.record_id) <= 63


def test_plan_reads_records_by_their_wire_times() -> None:
    """Records hold RFC 3339 times; the duplicate window runs from the record's `updated`."""
    m = monitor(actions={"stall": "RestartFromCheckpoint"})
    rec = finished(new_record(plan(signal("TrainingJobStalled"), m, state()), T0), T0)
    rec = rec | {"updated": rfc3339(T0 + 1000)}
    p = plan(signal("TrainingJobStalled", starts_at=T0 + 1100), m, state(now=T0 + 1100, records=[rec]))
    assert p.skipped.startswith(planning.DUPLICATE)


def test_storm_guard_defaults_follow_the_issue() -> None:
    rem = make_monitor().spec.remediation
    assert (rem.max_cordoned_nodes, rem.cordon_window) == (None, "10m")
    assert (rem.job_restart_budget, rem.budget_window) == (3, "24h")
    assert rem.training_advice is False and rem.actions.interrupted == "RestartFromCheckpoint"


# ---- triage: what is dropped before any cluster state is read --------------------------------------


@pytest.mark.parametrize(
    ("sig", "settings", "reason"),
    [
        (signal(namespace="other"), {}, "a signal of other/llama-pretrain"),
        (signal(firing=False), {}, "resolved"),
        (signal("GPUMemoryHigh", severity="P3"), {}, "no automatic response to GPUMemoryHigh"),
        (signal(severity="P1"), {}, "no automatic response to GPUCriticalXid at severity P1"),
        (signal(), {"enabled": False}, "remediation disabled"),
        (signal(), {"actions": {"nodeFault": "Notify"}}, "notify only"),
    ],
    ids=["foreign", "resolved", "no-response", "below-p0", "disabled", "notify"],
)
def test_triage_drops_what_no_cluster_state_could_make_actionable(
    sig: Signal, settings: dict[str, Any], reason: str
) -> None:
    dropped = planning.triage(sig, monitor(**settings))
    assert dropped is not None and dropped.startswith(reason)
    decided = plan(sig, monitor(**settings), state())
    assert quiet(decided) and decided.skipped == dropped


def test_triage_passes_an_actionable_p0() -> None:
    assert planning.triage(signal(), monitor()) is None


# ---- claims are verified against the cluster -------------------------------------------------------


@pytest.mark.parametrize("alert", [*NODE_FAULTS, "GPUSingleBitECCErrorsHigh"])
@pytest.mark.parametrize("source", list(Source))
def test_a_node_the_job_has_no_live_pod_on_is_never_cordoned(alert: str, source: Source) -> None:
    """The labels are claims: anyone who reaches Alertmanager's API can post one naming any node."""
    severity = "P1" if alert == "GPUSingleBitECCErrorsHigh" else "P0"
    forged = signal(alert, severity=severity, node="gpu-c", source=source)
    p = plan(forged, make_monitor(), state(unready=frozenset({"gpu-c"})))
    assert p.steps == () and quiet(p)
    assert p.skipped.startswith(planning.UNVERIFIED) and "gpu-c" in p.skipped


@pytest.mark.parametrize("source", [Source.ALERTMANAGER, Source.SIDECAR])
def test_a_node_down_claim_on_a_node_the_cache_shows_ready_is_refused(source: Source) -> None:
    p = plan(signal("GPUNodeDown", gpu="", source=source), make_monitor(), state(unready=frozenset()))
    assert p.steps == () and p.skipped.startswith(planning.UNVERIFIED) and "Ready" in p.skipped
    down = plan(
        signal("GPUNodeDown", gpu="", source=source), make_monitor(), state(unready=frozenset({NODE}))
    )
    assert kinds(down) == NODE_DOWN_PLAN


def test_the_operators_own_node_down_detection_is_its_own_verification() -> None:
    """detect.py judged the node from its Lease and conditions on the operator's clock."""
    own = signal("GPUNodeDown", gpu="", source=Source.OPERATOR)
    assert kinds(plan(own, make_monitor(), state(unready=frozenset()))) == NODE_DOWN_PLAN


@pytest.mark.parametrize("alert", ["GPUCriticalXid", "GPUDoubleBitECCError", "GPULost"])
def test_a_gpu_fault_is_confirmed_by_the_nodes_sidecar_before_the_cordon(alert: str) -> None:
    p = plan(signal(alert, gpu="3"), make_monitor(), state())
    assert p.steps[0] == Step(CONFIRM_FAULT, {"node": NODE, "alert": alert, "gpu": "3"})
    assert kinds(p)[1:3] == (CORDON, TAINT)


def test_a_stall_or_interruption_names_no_node_and_needs_no_node_verification() -> None:
    m = monitor(actions={"stall": "RestartFromCheckpoint"})
    for alert in ("TrainingJobStalled", TRAINING_INTERRUPTED):
        assert kinds(plan(signal(alert, node="gpu-c"), m, state())) == RESTART_JOB


def test_a_dry_run_plans_an_unverified_claim_since_it_acts_on_nothing() -> None:
    """A drill posts synthetic alerts (a GPUNodeDown for a node that is Ready) to a monitor it has put in
    dry run: the plan is recorded, and nothing is done."""
    p = plan(signal("GPUNodeDown", gpu=""), monitor(dryRun=True), state(unready=frozenset()))
    assert p.dry_run and kinds(p) == NODE_DOWN_PLAN


# ---- in place ---------------------------------------------------------------------------------------


def in_place_records(n: int, at: float, *, launchers: bool = True) -> list[dict[str, Any]]:
    """n finished interruptions, each restarted in place (its gang steps then Skipped) or, without
    `launchers`, its RestartInPlace Skipped and the gang restarted by new pods."""
    m = make_monitor()
    out = []
    for i in range(n):
        rec = new_record(
            plan(signal(TRAINING_INTERRUPTED, pod=f"llama-{i}", starts_at=at + i), m, state(now=at + i)),
            at + i,
        )
        if launchers:
            rec = mark(rec, 0, Phase.SUCCEEDED, "generation 1 runs", at + i + 1)
            rec = mark(
                mark(rec, 1, Phase.SKIPPED, "not needed", at + i + 1),
                2,
                Phase.SKIPPED,
                "not needed",
                at + i + 1,
            )
        else:
            rec = mark(rec, 0, Phase.SKIPPED, "no live trainguard launch in llama-1", at + i + 1)
            rec = mark(
                mark(rec, 1, Phase.SUCCEEDED, "deleted", at + i + 1), 2, Phase.SUCCEEDED, "placed", at + i + 1
            )
        out.append(rec)
    return out  # fmt: skip


@pytest.mark.parametrize("launchers", [True, False], ids=["in-place", "new-pods"])
def test_a_restart_counts_once_against_the_budget_in_place_or_by_new_pods(launchers: bool) -> None:
    m = monitor(jobRestartBudget=3)
    now = T0 + 3600
    two = in_place_records(2, at=T0, launchers=launchers)
    assert (
        kinds(plan(signal(TRAINING_INTERRUPTED, starts_at=now), m, state(now=now, records=two)))
        == RESTART_JOB
    )
    three = in_place_records(3, at=T0, launchers=launchers)
    p = plan(signal(TRAINING_INTERRUPTED, starts_at=now), m, state(now=now, records=three))
    assert kinds(p) == (NOTIFY,) and "3 restart(s)" in p.skipped


def test_over_the_budget_a_nan_is_still_paused_and_pinned_only_the_restart_is_withheld() -> None:
    m = monitor(jobRestartBudget=1)
    now = T0 + 3600
    p = plan(
        signal("TrainingLossNonFinite", starts_at=now), m, state(now=now, records=in_place_records(1, at=T0))
    )
    assert kinds(p) == (P, PIN, NOTIFY) and not p.skipped
    assert p.steps[-1].params["reason"].startswith(planning.RESTART_BUDGET)
    assert "training stays paused at the pin" in p.steps[-1].params["reason"]


def test_a_nan_whose_pods_had_no_launcher_spent_no_restart() -> None:
    m = monitor(jobRestartBudget=1)
    rec = new_record(plan(signal("TrainingLossNonFinite", starts_at=T0), m, state()), T0 + 1)
    rec = mark(mark(rec, 0, Phase.SUCCEEDED, "paused", T0 + 2), 1, Phase.SUCCEEDED, "pinned", T0 + 2)
    rec = mark(rec, 2, Phase.SKIPPED, "no live trainguard launch in llama-0", T0 + 2)
    later = signal(TRAINING_INTERRUPTED, starts_at=T0 + 3600)
    assert kinds(plan(later, m, state(now=T0 + 3600, records=[rec]))) == RESTART_JOB


def test_an_in_place_restart_covers_the_interruption_it_caused() -> None:
    m = make_monitor()
    rec = new_record(plan(signal(TRAINING_INTERRUPTED, pod="llama-0"), m, state()), T0 + 5)
    under_way = mark(rec, 0, Phase.IN_PROGRESS, "posting generation 1", T0 + 6)
    other = signal(TRAINING_INTERRUPTED, node="gpu-b", starts_at=T0 + 6)
    assert plan(other, m, state(now=T0 + 7, records=[under_way])).skipped == f"duplicate of {rec['id']}"
