"""What to do about one signal: the P0 response matrix (docs/architecture.md), decided from the
signal, the monitor's `spec.remediation` and the cluster state alone, so every cell is testable without
a cluster. The executor carries a plan out; nothing here calls anything.

Guards, in the order they are checked: those of `triage`, which need no cluster state (a signal of
another job, a resolved one, one with no automatic response at its severity, an escalated copy of a P1
the loop acts on, remediation disabled, a `Notify` action), then a duplicate, then the cordon guards (the platform's circuit breaker, ceiling, pool budget and
rate, remediation/guardrails.py, and the monitor's own cap, which may only lower them) and the job's
restart budget. A plan stopped by a guard has no steps (`skipped` says why), except the cordon guards
and the budget, which leave one NOTIFY step so that a human hears what was not done. With the
operator in dry-run mode every plan is a dry run.

Restarts go through the workload's owner (kube/workloads.py, resolved by the edge into
ClusterState.workload): a workloadRef that does not resolve, or an owner that allows no restart (a
JobSet without failurePolicy.maxRestarts, one Kueue evicted), turns the restart steps into a NOTIFY
saying why, while the node is still cordoned; the restart budget is the smaller of jobRestartBudget's
and the owner's. A node fault of a JobSet, TrainJob or PyTorchJob replaces only the faulty node's pod
(REPLACE_POD) instead of restarting the gang, and its healthy ranks restart in place as a new generation
that the replacement joins (RestartInPlace with `rejoin`: the executor skips it where a pod has no launcher).

A restart (a stall, an interruption, and a NaN after its pin) is planned in place first: RestartInPlace,
which the executor carries out only where every pod runs `trainguard launch` (it reads the sidecars;
the planner reads none), then the RestartGang and ConfirmPlacement that restart by new pods where it
cannot (a NaN has none: it stays paused). Both count once against the restart budget.

Planned maintenance (NodeMaintenancePlanned, the operator's own P2, remediation/maintenance.py) is
acted on at any grade, only as the operator's own detection reports it, outside jobRestartBudget:
a full checkpoint from every rank, then the owner-aware move (`_maintenance_steps`).

Three classes are acted on at P1: trainingAdvice (GradientExplosion, opt-in), eccDegraded
(GPUSingleBitECCErrorsHigh: a checkpoint, then cordon and taint; the job is not restarted) and slowNode
(a GPU slow, not dead, or a straggling rank: confirmed, then at the job's next periodic checkpoint, or
after an emergency one, cordon and taint and move the node's rank(s) off it through the owner). The
operator's escalation re-posts an unacknowledged P1 as a P0 copy (`escalated_from`) that reaches the
receiver too; the copy re-pages, it is not a new fault, so it never acts: the P1 itself was decided.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from trainguard.api import duration_seconds
from trainguard.api.monitor import Remediation, TrainingJobMonitor
from trainguard.catalog import ALERTS_BY_NAME
from trainguard.catalog.alerts import NODE_MAINTENANCE, TRAINING_INTERRUPTED
from trainguard.kube.workloads import Workload
from trainguard.remediation.escalation import ESCALATED_FROM
from trainguard.remediation.guardrails import (
    CORDON_CAP,
    DRY_RUN,
    OFF,
    CordonView,
    withheld_by_breaker,
    withheld_cordon,
)
from trainguard.remediation.maintenance import BY_ANNOTATION, MAINTENANCE
from trainguard.remediation.model import (
    ClusterState,
    Phase,
    Plan,
    Signal,
    Source,
    Step,
    StepKind,
)
from trainguard.remediation.records import is_finished
from trainguard.times import unix

NONFINITE_LOSS = "nonFiniteLoss"
NODE_FAULT = "nodeFault"
STALL = "stall"
INTERRUPTED = "interrupted"
TRAINING_ADVICE = "trainingAdvice"
ECC_DEGRADED = "eccDegraded"
SLOW_NODE = "slowNode"
"""Response classes: the catalogue's classes (P0s, and GPUSingleBitECCErrorsHigh's eccDegraded, a P1),
SLOW_NODE_ALERTS' slowNode,
the operator's own TrainingInterrupted, and GradientExplosion's advice when the monitor opts in. Each
names its setting in spec.remediation."""

STRAGGLER_ALERT = "StragglerRank"
SLOW_GPU_ALERTS = ("GPUPCIeLinkDegraded", "GPUClocksThrottled", "GPUClockBelowPeers")
SLOW_NODE_ALERTS = (*SLOW_GPU_ALERTS, STRAGGLER_ALERT)
"""The slowNode class: a GPU slow, not dead (a PCIe link trained down, clocks throttled by a hardware
reason, an SM clock below its peers'), and a rank whose step time is an outlier among its peers. Their
catalogue entries carry no p0_class: this tuple is where they are classed."""
AT_P1 = (TRAINING_ADVICE, ECC_DEGRADED, SLOW_NODE)
"""The classes acted on below P0. Every other class acts on a P0 only (a policy may lower its alert)."""
ECC_SEVERITIES = ("P0", "P1")
"""Severities eccDegraded and slowNode act at: their P1, or a P0 where a policy raised it. A policy that
lowers one to P2 or P3 asks for a report, not for the node to be taken out of service."""

SAME_NODE: dict[str, tuple[str, ...]] = {
    NODE_FAULT: (NODE_FAULT,),
    ECC_DEGRADED: (ECC_DEGRADED, NODE_FAULT),
    MAINTENANCE: (MAINTENANCE, NODE_FAULT),
    SLOW_NODE: (SLOW_NODE, NODE_FAULT),
}
"""Per class, the record classes that handle a signal of the same node: a dead node's several alerts act
once; a degraded node is isolated once whichever of its GPUs reports it, and a node fault already cordoned
it; a slow node is replaced once whichever of its signals (a throttled clock and the straggling rank it
causes) comes first, and a node fault already moved the job off it. Not the other way round: a node fault
on a node only isolated, or one whose slowNode record still waits for a checkpoint, must still move the
job at once."""

ADVICE_ALERT = "GradientExplosion"
CLIP_GRADIENTS = "clip_gradients"
NEWEST_GOOD_CHECKPOINT = "newest-good-checkpoint"
RESTARTS = (StepKind.RESTART_IN_PLACE, StepKind.RESTART_GANG, StepKind.REPLACE_POD)
"""The steps that restart the job (in place, by new pods, or the faulty node's pod replaced through the
owner): counted against jobRestartBudget once per record, and turned into a notice when the owner
allows no restart."""

DUPLICATE_WINDOW_S = 600.0
"""A fault is acted on once: another signal of it within this long after its record finished is a
duplicate (the fast path and Alertmanager, Alertmanager's re-posts of a group)."""

FASTPATH_MARGIN_S = 1.0
"""How much earlier than the sidecar's event time a non-finite loss may have been logged (the SDK sends
it at once; this covers the hand-over and the clocks' granularity)."""

# Skip reasons begin with these; QUIET ones need no record (see `quiet`).
RESOLVED = "resolved"
FOREIGN = "a signal of "
NO_RESPONSE = "no automatic response"
DUPLICATE = "duplicate of "
DISABLED = "remediation disabled"
NOTIFY_ONLY = "notify only"
RESTART_BUDGET = "restart budget spent"
NO_NODE = "no node label"
ESCALATED = "escalated copy"
UNVERIFIED = "unverified claim"
MODE_OFF = "remediation off operator-wide"
QUIET = (RESOLVED, FOREIGN, NO_RESPONSE, ESCALATED, DUPLICATE, DISABLED, NOTIFY_ONLY, UNVERIFIED, MODE_OFF)

NODE_DOWN = "GPUNodeDown"
REPLACE_ONE = ("JobSet", "TrainJob", "PyTorchJob")
"""Owners whose node-fault plan replaces only the faulty node's pod: their gang restart is the JobSet's
own (counted against maxRestarts, every pod recreated), a pod's replacement is not; a PyTorchJob's
training-operator recreates a removed pod under its name at once and counts no failure against
runPolicy.backoffLimit (e2e/test_training_controllers.py, TestPyTorchJobPodReplacement)."""
HARDWARE_CLAIMS = ("GPUCriticalXid", "GPUDoubleBitECCError", "GPULost", *SLOW_GPU_ALERTS)
"""Alerts that claim a GPU fault the job's sidecar on that node saw itself (exporter/fastpath.py): their
plans start with CONFIRM_FAULT, so that a label in an alert posted by anyone who reaches Alertmanager's
API cordons nothing the sidecar has not seen."""


def response_class(alertname: str) -> str | None:
    """The response class of an alert, or None when trainguard never acts on it."""
    if alertname == TRAINING_INTERRUPTED:
        return INTERRUPTED
    if alertname == NODE_MAINTENANCE:
        return MAINTENANCE
    alert = ALERTS_BY_NAME.get(alertname)
    if alert is not None and alert.p0_class is not None:
        return str(alert.p0_class)
    if alertname == ADVICE_ALERT:
        return TRAINING_ADVICE
    if alertname in SLOW_NODE_ALERTS:
        return SLOW_NODE
    return None


def cordon_cap(remediation: Remediation, gpu_nodes: int) -> int:
    """The monitor's own cap: nodes trainguard may cordon per cordonWindow, cluster-wide:
    maxCordonedNodes, or when unset 10% of the GPU nodes (rounded down), at least 1. The platform's
    guardrails apply besides (remediation/guardrails.py): this can only lower them."""
    if remediation.max_cordoned_nodes is not None:
        return remediation.max_cordoned_nodes
    return max(1, gpu_nodes // 10)


def record_id(signal: Signal) -> str:
    """One id per alert instance: the same instance re-posted gets the same id."""
    return f"{signal.fingerprint}-{max(0, int(signal.starts_at))}"


def quiet(plan: Plan) -> bool:
    """A skip that needs no record: another job's signal, a resolved one, one with no automatic
    response, an escalated copy of a P1 (the P1 was decided), a duplicate (its record exists),
    remediation disabled or a Notify action (Alertmanager has notified, the spec says nothing more is
    wanted), or the operator's mode off. Not recording these also means that turning
    remediation on mid-incident acts on the next re-post of a firing alert."""
    return bool(plan.skipped) and plan.skipped.startswith(QUIET)


def triage(signal: Signal, monitor: TrainingJobMonitor) -> str | None:
    """Why nothing is done about `signal` whatever the cluster's state (a QUIET skip reason), or None when
    it may be acted on. Decided from the signal and the spec alone, so the receiver and the planner drop
    irrelevant signals before reading or writing anything: another job's, a resolved one, one with no
    automatic response at its severity, an escalated copy, remediation disabled, a Notify action."""
    rem = monitor.spec.remediation
    cls = response_class(signal.alertname)
    if (signal.namespace, signal.training_job) != (monitor.namespace, monitor.name):
        return f"{FOREIGN}{signal.namespace}/{signal.training_job}, not of {monitor.namespace}/{monitor.name}"
    if not signal.firing:
        return RESOLVED
    if cls is None:
        return f"{NO_RESPONSE} to {signal.alertname}"
    if cls == TRAINING_ADVICE and not rem.training_advice:
        return f"{NO_RESPONSE} to {signal.alertname}: trainingAdvice is off"
    if cls in (ECC_DEGRADED, SLOW_NODE) and signal.severity not in ECC_SEVERITIES:
        return (
            f"{NO_RESPONSE} to {signal.alertname} at severity {signal.severity or 'unset'}: only a P1 or P0"
        )
    if cls not in (*AT_P1, MAINTENANCE) and signal.severity != "P0":
        return f"{NO_RESPONSE} to {signal.alertname} at severity {signal.severity or 'unset'}: only a P0"
    if cls in AT_P1 and ESCALATED_FROM in signal.labels:
        return (
            f"{ESCALATED} of {signal.alertname} (from {signal.labels[ESCALATED_FROM] or 'unset'}): it re-pages,"
            f" the {cls} response was decided on the alert itself"
        )
    if not rem.enabled:
        return DISABLED
    if _action(rem, cls, signal.alertname) == "Notify":
        return f"{NOTIFY_ONLY}: the {cls} action is Notify, Alertmanager has notified"
    return None


def plan(signal: Signal, monitor: TrainingJobMonitor, state: ClusterState) -> Plan:
    """The plan for `signal` on `monitor`'s job, given `state` (records oldest first)."""
    rem = monitor.spec.remediation
    cls = response_class(signal.alertname)
    base = Plan(
        record_id=record_id(signal),
        fingerprint=signal.fingerprint,
        alert=signal.alertname,
        p0_class=cls or "",
        steps=(),
        node=signal.node,
        gpu=signal.labels.get("gpu", ""),
        dry_run=rem.dry_run or state.guardrails.mode == DRY_RUN,
    )

    def skip(reason: str, *steps: Step) -> Plan:
        return replace(base, skipped=reason, steps=steps)

    untouched = triage(signal, monitor)
    if untouched is not None or cls is None:
        return skip(untouched or NO_RESPONSE)
    if state.guardrails.mode == OFF:
        return skip(f"{MODE_OFF} (--remediation-mode off)")
    dup = _duplicate_of(signal, cls, state.records, state.now, base.dry_run)
    if dup:
        return skip(f"{DUPLICATE}{dup}")
    action = _action(rem, cls, signal.alertname)

    doubt = _unverified(signal, cls, state)
    if doubt and not rem.dry_run:  # a dry run acts on nothing: a drill's synthetic alert is planned
        return skip(f"{UNVERIFIED}: {doubt}")
    steps = _through_owner(_steps(signal, monitor, cls, action), state.workload, signal.node)
    if not any(s.kind != StepKind.NOTIFY for s in steps):
        # nothing but the notice of what could not be done
        return skip(steps[0].params["reason"], *steps)
    if any(s.kind == StepKind.CORDON for s in steps):
        guard = state.guardrails
        view = CordonView(
            gpu_nodes=state.gpu_nodes,
            held=state.held,
            recent=frozenset(_cordoned_nodes(state, guard.cordon_window_s)),
            pools=state.pools,
            pool_sizes=state.pool_sizes,
            open_breakers=state.open_breakers,
        )
        breaker = withheld_by_breaker(signal.node, guard, view)
        if breaker:
            return skip(breaker, _notify(breaker))
        cordoned = _cordoned_nodes(state, duration_seconds(rem.cordon_window))
        cap = cordon_cap(rem, state.gpu_nodes)
        if signal.node not in cordoned and len(cordoned) >= cap:
            reason = (
                f"{CORDON_CAP}: {len(cordoned)} node(s) cordoned by trainguard in the last {rem.cordon_window}"
                f" (cap {cap}); {signal.node} is not cordoned and nothing is done"
            )
            return skip(reason, _notify(reason))
        withheld = withheld_cordon(signal.node, guard, rem.max_cordoned_nodes, view)
        if withheld:
            return skip(withheld, _notify(withheld))
    if cls != MAINTENANCE and any(s.kind in RESTARTS for s in steps):  # a planned move is not a fault's
        restarts = _restarts(state, duration_seconds(rem.budget_window))
        if restarts >= rem.job_restart_budget:
            spent = (
                f"{RESTART_BUDGET}: {restarts} restart(s) of this job in the last {rem.budget_window}"
                f" (jobRestartBudget {rem.job_restart_budget})"
            )
            if cls == NONFINITE_LOSS:  # the pause and the pin still hold the good checkpoint
                reason = f"{spent}; the trainers are not restarted, training stays paused at the pin"
                return replace(base, steps=(*(s for s in steps if s.kind not in RESTARTS), _notify(reason)))
            reason = f"{spent}; nothing is done"
            return skip(reason, _notify(reason))
    return replace(base, steps=steps)


WORKLOAD_UNRESOLVED = "workload unresolved"
OWNER_REFUSES = "the owner allows no restart"


def _through_owner(steps: tuple[Step, ...], workload: Workload | None, node: str) -> tuple[Step, ...]:
    """`steps` with their restart (and the placement it waits for) turned into one NOTIFY when the owner
    cannot be resolved, allows no restart now (the budget it has left included: trainguard never spends
    more than the owner allows), or would fail rather than replace the faulty node's pod. The steps
    before it (cordon, taint, checkpoint) stay: a bad node is taken out of service whoever owns the pods."""
    if workload is None or not any(s.kind in RESTARTS for s in steps):
        return steps
    why = ""
    if workload.problem:
        why = f"{WORKLOAD_UNRESOLVED}: {workload.problem}; nothing is restarted"
    elif workload.refusal:
        why = f"{OWNER_REFUSES}: {workload.refusal}"
    elif any(s.kind == StepKind.REPLACE_POD for s in steps):
        targets = workload.replacements(node)
        refused = [r.refusal for r in targets if r.refusal]
        if refused:
            why = f"{OWNER_REFUSES}: {refused[0]}"
        elif workload.kind in JOBSET_OWNERS and any(r.child_job is None for r in targets):
            steps = _gang_through_the_jobset(steps, node)
    if not why:
        if workload.attempt is None:
            return steps
        # the JobSet's restart attempt the plan saw: the executor does nothing when the JobSet has since
        # restarted the gang itself (its own failure policy, for the same fault)
        attempt = str(workload.attempt)
        return tuple(
            replace(s, params={**s.params, "attempt": attempt}) if s.kind in RESTARTS else s for s in steps
        )
    kept = tuple(s for s in steps if s.kind not in (*RESTARTS, StepKind.CONFIRM_PLACEMENT))
    return (*kept, _notify(why))


JOBSET_OWNERS = ("JobSet", "TrainJob")


def _gang_through_the_jobset(steps: tuple[Step, ...], node: str) -> tuple[Step, ...]:
    """A JobSet's (a TrainJob's) faulty pod whose child Job holds other ranks too (a TrainJob's nodes
    share one) is not replaced alone: only its Job could recreate it, after its back-off, and with a
    podFailurePolicy only once the old pod is terminal (in e2e it never came within two minutes, the
    healthy rank waiting at the rendezvous). The JobSet's gang restart instead: its child Jobs deleted and
    recreated at once, at the same restart attempt, nothing counted against maxRestarts."""
    out: list[Step] = []
    for s in steps:
        if s.kind == StepKind.REPLACE_POD:
            out.append(Step(StepKind.RESTART_GANG, {"from": NEWEST_GOOD_CHECKPOINT, "avoid": node}))
        elif s.kind != StepKind.RESTART_IN_PLACE:
            out.append(s)
    return tuple(out)


def _unverified(signal: Signal, cls: str, state: ClusterState) -> str:
    """Why the node a signal names is not to be believed, or "" when it is. A node is cordoned only when
    the cluster says the job runs there (a live pod of its selector, from the pod cache), and a
    GPUNodeDown from a sender other than the operator's own detection only when the node cache shows the
    node not Ready. The labels of an alert are claims: Alertmanager's API takes posts from anyone who
    reaches it, and a tenant's token is the tenant's."""
    if cls == MAINTENANCE and signal.source != Source.OPERATOR:
        return (
            f"{signal.alertname} from {signal.source}: only the operator's own reading of the node cache"
            " plans a maintenance move; nothing is done"
        )
    if cls not in (NODE_FAULT, ECC_DEGRADED, MAINTENANCE, SLOW_NODE) or not signal.node:
        return ""
    if signal.node not in state.job_nodes:
        return (
            f"{signal.alertname} names node {signal.node}, which hosts no live pod of"
            f" {signal.namespace}/{signal.training_job}; nothing is done"
        )
    if (
        signal.alertname == NODE_DOWN
        and signal.source != Source.OPERATOR
        and signal.node not in state.unready_nodes
    ):
        return f"GPUNodeDown names node {signal.node}, which the node cache shows Ready; nothing is done"
    return ""


def _action(rem: Remediation, cls: str, alertname: str) -> str:
    actions = rem.actions
    if cls == SLOW_NODE:
        return actions.slow_node.straggler if alertname == STRAGGLER_ALERT else actions.slow_node.gpu
    return {
        NONFINITE_LOSS: actions.non_finite_loss,
        NODE_FAULT: actions.node_fault,
        STALL: actions.stall,
        INTERRUPTED: actions.interrupted,
        ECC_DEGRADED: actions.ecc_degraded,
        MAINTENANCE: actions.maintenance,
        TRAINING_ADVICE: "Advise",
    }[cls]


def _notify(reason: str) -> Step:
    return Step(StepKind.NOTIFY, {"reason": reason})


def _checkpoint(monitor: TrainingJobMonitor, avoid: str) -> Step:
    """The emergency full checkpoint, from every rank not on `avoid`, waited for up to the timeout."""
    timeout = math.ceil(duration_seconds(monitor.spec.remediation.emergency_checkpoint_timeout))
    return Step(StepKind.REQUEST_CHECKPOINT, {"kind": "full", "timeout_s": str(timeout), "avoid": avoid})


def _isolate(signal: Signal, node: str, reason: str) -> tuple[Step, ...]:
    """Cordon and taint, first: they disturb no running pod and stop new pods landing on a known-bad node
    while the checkpoint is taken. A hardware claim is confirmed by the node's sidecar before either."""
    confirm: tuple[Step, ...] = ()
    if signal.alertname in HARDWARE_CLAIMS:
        params = {"node": node, "alert": signal.alertname}
        if signal.labels.get("gpu"):
            params["gpu"] = signal.labels["gpu"]
        confirm = (Step(StepKind.CONFIRM_FAULT, params),)
    return (
        *confirm,
        Step(StepKind.CORDON, {"node": node, "reason": reason}),
        Step(StepKind.TAINT, {"node": node, "reason": reason}),
    )


def _maintenance_steps(signal: Signal, monitor: TrainingJobMonitor) -> tuple[Step, ...]:
    """CheckpointAndMove: a full checkpoint from every rank, the node's too (the node is healthy; the
    eviction gate holds a drain until the step is done), then the job moved off the node as a node fault
    moves it (the node's pod replaced through a JobSet, TrainJob or PyTorchJob, the gang restarted
    otherwise), placement confirmed away from it. A node only annotated is cordoned first (no taint: it
    is not faulty), so that the new pods land elsewhere; a person's cordon is left as it is."""
    node = signal.node
    if not node:
        return (_notify(f"{NO_NODE} on {signal.alertname}: the node going into maintenance is unknown"),)
    cordon = (Step(StepKind.CORDON, {"node": node, "reason": signal.alertname}),)
    first = cordon if signal.labels.get("by") == BY_ANNOTATION else ()
    ref = monitor.spec.workload_ref
    move: tuple[Step, ...] = (
        Step(StepKind.RESTART_GANG, {"from": NEWEST_GOOD_CHECKPOINT, "avoid": node}),
        Step(StepKind.CONFIRM_PLACEMENT, {"avoid": node}),
    )
    if ref is not None and ref.kind in REPLACE_ONE:
        move = (
            Step(StepKind.REPLACE_POD, {"from": NEWEST_GOOD_CHECKPOINT, "node": node}),
            Step(StepKind.RESTART_IN_PLACE, {"from": NEWEST_GOOD_CHECKPOINT, "rejoin": node}),
            Step(StepKind.CONFIRM_PLACEMENT, {"avoid": node}),
        )
    return (*first, _checkpoint(monitor, ""), *move)


def _steps(signal: Signal, monitor: TrainingJobMonitor, cls: str, action: str) -> tuple[Step, ...]:
    if cls == MAINTENANCE:
        return _maintenance_steps(signal, monitor)
    if cls == ECC_DEGRADED:
        # CordonAfterCheckpoint: the node is cordoned first (no running pod is disturbed), then every
        # rank is asked, those on the node too: its errors were corrected, its ranks hold their shards,
        # and the checkpoint is the one to resume from if they turn uncorrectable. No restart: the job
        # runs on until it next restarts, the node takes no new pods.
        if not signal.node:
            return (_notify(f"{NO_NODE} on {signal.alertname}: the degraded GPU's node cannot be cordoned"),)
        return (*_isolate(signal, signal.node, signal.alertname), _checkpoint(monitor, ""))
    if cls == SLOW_NODE:
        return _slow_node_steps(signal, monitor, action)
    node = signal.node if cls == NODE_FAULT else ""
    restart: tuple[Step, ...] = (
        Step(StepKind.RESTART_GANG, {"from": NEWEST_GOOD_CHECKPOINT, "avoid": node}),
        Step(StepKind.CONFIRM_PLACEMENT, {"avoid": node}),
    )
    if node:
        restart = _move_off(signal, monitor, node)
    # the trainers, not the pods, where every pod runs `trainguard launch`: the step reads the sidecars
    # (the planner calls none) and, where a pod has no launcher, leaves the restart to the steps after it
    in_place = Step(StepKind.RESTART_IN_PLACE, {"from": NEWEST_GOOD_CHECKPOINT})
    if cls == NONFINITE_LOSS:
        return (
            Step(StepKind.PAUSE),
            Step(StepKind.PIN_CHECKPOINT, {"before_ts": repr(_nan_bound(signal, monitor))}),
            in_place,
        )
    if cls == TRAINING_ADVICE:
        return (Step(StepKind.ADVISE, {"advice": CLIP_GRADIENTS}),)
    if cls in (STALL, INTERRUPTED):
        return (in_place, *restart)
    # NODE_FAULT
    checkpoint = _checkpoint(monitor, node)
    if not node:
        notice = _notify(f"{NO_NODE} on {signal.alertname}: the faulty node cannot be cordoned")
        if action == "Cordon":
            return (notice,)
        return (notice, checkpoint, *restart)
    cordon = _isolate(signal, node, signal.alertname)
    if action == "Cordon":
        return cordon
    return (*cordon, checkpoint, *restart)


def _move_off(signal: Signal, monitor: TrainingJobMonitor, node: str) -> tuple[Step, ...]:
    """The restart that moves the job off `node`: the gang's new pods avoid it, or, for an owner of
    REPLACE_ONE, only its pod is replaced through the owner and nothing is counted against the JobSet's
    maxRestarts or the PyTorchJob's backoffLimit. The healthy ranks then restart in place as a new
    generation that the replacement joins (where every pod runs `trainguard launch`; else the owner's
    failure policy restarts them when their trainers fail, as it would without trainguard)."""
    ref = monitor.spec.workload_ref
    if ref is None or ref.kind not in REPLACE_ONE:
        return (
            Step(StepKind.RESTART_GANG, {"from": NEWEST_GOOD_CHECKPOINT, "avoid": node}),
            Step(StepKind.CONFIRM_PLACEMENT, {"avoid": node}),
        )
    down = {"nodeDown": "true"} if signal.alertname == NODE_DOWN else {}
    return (
        Step(StepKind.REPLACE_POD, {"from": NEWEST_GOOD_CHECKPOINT, "node": node, **down}),
        Step(StepKind.RESTART_IN_PLACE, {"from": NEWEST_GOOD_CHECKPOINT, "rejoin": node}),
        Step(StepKind.CONFIRM_PLACEMENT, {"avoid": node}),
    )


def _slow_node_steps(signal: Signal, monitor: TrainingJobMonitor, action: str) -> tuple[Step, ...]:
    """A slow node: its claim confirmed (a GPU's by the node's sidecar, a straggler from the sidecars'
    step times or the job's rule), then the checkpoint the move resumes from, then cordon, taint and the
    move off it. ReplaceAtCheckpoint waits for the job's next periodic checkpoint before it touches the
    node (nothing is cordoned while it waits: a wait that times out leaves the job as it was);
    ReplaceNow isolates first and asks every rank (the slow node's too: its ranks are alive and hold their
    shards) for an emergency checkpoint, as a node fault does."""
    node = signal.node
    if not node:
        return (_notify(f"{NO_NODE} on {signal.alertname}: the slow node cannot be cordoned"),)
    confirm, cordon, taint = _claim(signal, node), *_isolate(signal, node, signal.alertname)[-2:]
    if action == "ReplaceNow":
        return (confirm, cordon, taint, _checkpoint(monitor, ""), *_move_off(signal, monitor, node))
    wait = math.ceil(duration_seconds(monitor.spec.remediation.slow_node_checkpoint_wait))
    await_checkpoint = Step(StepKind.AWAIT_CHECKPOINT, {"timeout_s": str(wait)})
    return (confirm, await_checkpoint, cordon, taint, *_move_off(signal, monitor, node))


def _claim(signal: Signal, node: str) -> Step:
    """The CONFIRM_FAULT of a slowNode claim: a GPU's names its GPU, a straggler's its pod and rank."""
    params = {"node": node, "alert": signal.alertname}
    for label in ("gpu", "pod", "rank"):
        if signal.labels.get(label):
            params[label] = signal.labels[label]
    return Step(StepKind.CONFIRM_FAULT, params)


def _nan_bound(signal: Signal, monitor: TrainingJobMonitor) -> float:
    """A time at or before the first non-finite loss: a checkpoint saved before it is good. The
    sidecar's event is stamped as it receives the report; Prometheus's alert starts at the evaluation
    after the scrape after the loss, each at most a scrape interval later (the rule group is evaluated
    at the scrape interval)."""
    if signal.source == Source.SIDECAR:
        return signal.starts_at - FASTPATH_MARGIN_S
    scrape = duration_seconds(monitor.spec.exporter.scrape_interval)
    return signal.starts_at - 2 * scrape - FASTPATH_MARGIN_S


def _live(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if not r.get("dryRun")]


def _duplicate_of(
    signal: Signal, cls: str, records: tuple[dict[str, Any], ...], now: float, dry_run: bool
) -> str | None:
    """The id of the record that already handles this fault, or None.

    The same fault: the same fingerprint, or the same node for a class of SAME_NODE (one dead node raises
    several alerts, XID 79 both GPUCriticalXid and GPULost). Handled: its record is unfinished, or
    finished within DUPLICATE_WINDOW_S, or acted and finished after this signal started (the instance
    it handled, re-posted). A stall or an interruption is also handled by any gang restart of the job
    under way, or done after it started (a dead GPU hangs the job and fails its pods too: one restart).
    A live plan ignores dry-run records: turning dry run off acts on a fault still firing.

    A record whose ConfirmFault failed handled no fault: the node's sidecar had not seen what the alert
    claimed, and nothing was done. It holds off only the copies of its own claim (its fingerprint) that
    began before it was refused: the claim by its other path, Alertmanager's repeats. A claim that
    begins later, or another claim about that node, is checked anew; else an alert anyone can post to
    Alertmanager, refused, would make the node's real fault a duplicate for ten minutes."""
    for r in reversed(records if dry_run else tuple(_live(records))):
        same = r.get("fingerprint") == signal.fingerprint or (
            bool(signal.node) and r.get("node") == signal.node and r.get("class") in SAME_NODE.get(cls, ())
        )
        covers = cls in (STALL, INTERRUPTED) and _restarts_gang(r)
        if not (same or covers):
            continue
        if not is_finished(r):
            return str(r.get("id"))
        finished = unix(str(r.get("updated", "")))
        if _unconfirmed(r):
            if r.get("fingerprint") == signal.fingerprint and signal.starts_at <= finished:
                return str(r.get("id"))
            continue
        if same and now - finished < DUPLICATE_WINDOW_S:
            return str(r.get("id"))
        acted = r.get("phase") in (Phase.SUCCEEDED, Phase.DRY_RUN) or (
            same and r.get("phase") == Phase.FAILED
        )
        if acted and signal.starts_at <= finished:
            return str(r.get("id"))
    return None


def _unconfirmed(record: dict[str, Any]) -> bool:
    """The record failed at its ConfirmFault step: the claim was not confirmed and nothing was done."""
    return record.get("phase") == Phase.FAILED and any(
        s.get("kind") == StepKind.CONFIRM_FAULT and s.get("phase") == Phase.FAILED
        for s in record.get("steps", [])
    )


def _restarts_gang(record: dict[str, Any]) -> bool:
    """The record restarts the job (the gang, or the pod a fault took): an interruption it caused (the
    replaced pod, failed on purpose) is the same restart."""
    return any(s.get("kind") in RESTARTS and s.get("phase") != Phase.SKIPPED for s in record.get("steps", []))


def _cordoned_nodes(state: ClusterState, window: float) -> set[str]:
    """Nodes trainguard cordoned within the window, cluster-wide (node annotations), plus the cordons
    this monitor's live records are about to make or just made (the annotation may not be read yet)."""
    since = state.now - window
    nodes = {node for node, ts in state.cordons if ts >= since}
    for r in _live(state.records):
        for step in r.get("steps", []):
            if step.get("kind") != StepKind.CORDON:
                continue
            phase = step.get("phase")
            pending = not is_finished(r) and phase in (Phase.PLANNED, Phase.IN_PROGRESS)
            done = phase == Phase.SUCCEEDED and unix(str(step.get("time", ""))) >= since
            if pending or done:
                nodes.add(str(step.get("params", {}).get("node", "")))
    nodes.discard("")
    return nodes


def _restarts(state: ClusterState, window: float) -> int:
    """Restarts of this job within the window, one per record whose restart (in place, of the gang's
    pods, or of a pod replaced through the owner) has begun (InProgress, Succeeded or Failed) or is still
    to come in an unfinished record; a restart that a failed earlier step never reached does not count,
    nor one skipped (an in-place restart with no launcher, whose RestartGang then counts, or a NaN's that
    leaves training paused), nor a planned maintenance move (a person's decision, not the job's fault)."""
    since = state.now - window
    count = 0
    for r in _live(state.records):
        if unix(str(r.get("created", ""))) < since or r.get("class") == MAINTENANCE:
            continue
        phases = [s.get("phase") for s in r.get("steps", []) if s.get("kind") in RESTARTS]
        if any(p in (Phase.IN_PROGRESS, Phase.SUCCEEDED, Phase.FAILED) for p in phases) or (
            Phase.PLANNED in phases and not is_finished(r)
        ):
            count += 1
    return count
