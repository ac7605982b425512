"""The drill's scenarios as data and the decisions made from them: which sidecars a scenario injects
into (or which synthetic alerts it posts instead), which alerts it must raise, and whether an automatic
action and resumed training are to be expected. Pure: no I/O, so every cell is tested without a cluster.

The fault kinds are the exporter's (`exporter/faults.py`, served on POST /v1/faults when a sidecar runs
with --enable-fault-injection); a test pins them to that module, which the drill may not import (it
talks to sidecars over the wire only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from trainguard.api.monitor import Remediation
from trainguard.catalog import ALERTS_BY_NAME
from trainguard.catalog.severity import grade_labels
from trainguard.remediation.plan import (
    AT_P1,
    ECC_DEGRADED,
    INTERRUPTED,
    NODE_FAULT,
    NONFINITE_LOSS,
    SLOW_NODE,
    STALL,
    STRAGGLER_ALERT,
    TRAINING_ADVICE,
    response_class,
)

DRILL_LABEL = "trainguard_drill"
"""Every synthetic alert carries it (the drill's id), so a person who is paged sees it is a drill."""

RESTARTING_ACTIONS = frozenset(
    {"CheckpointCordonReschedule", "RestartFromCheckpoint", "ReplaceAtCheckpoint", "ReplaceNow"}
)
"""Actions after which the job runs again in new pods without anyone's help: resumed training is measured."""


class Spread(StrEnum):
    """Which of the job's pods a scenario's faults go to."""

    ONE_POD = "one-pod"
    EVERY_POD = "every-pod"
    """Job-wide signals (throughput, stall) judge the whole job: one pod alone would not move them."""
    TWO_NODES = "two-nodes"
    """One pod on each of two nodes."""
    ONE_NODE = "one-node"
    """Every pod of one node (synthetic only: a node is never really taken down)."""


@dataclass(frozen=True)
class Fault:
    kind: str
    gpu: int | None = None

    def body(self) -> dict[str, Any]:
        """The JSON body of POST /v1/faults."""
        return {"fault": self.kind, **({} if self.gpu is None else {"gpu": self.gpu})}


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    faults: tuple[Fault, ...]
    """Injected through each chosen sidecar; empty: the scenario is always synthetic."""
    alerts: tuple[str, ...]
    """Catalogue alerts the scenario must raise, every one of them, for the alert stage to pass."""
    spread: Spread
    stops_training: bool = False
    """The fault itself stops the steps, so resumed training is measured once the drill clears it."""
    synthetic_why: str = ""
    """Why the scenario is synthetic even where sidecars allow injection."""
    may_raise: tuple[str, ...] = ()
    """Catalogue alerts the fault may raise too, not required for the alert stage: the operator records
    one fault of a node once, whichever of its alerts comes first, so a record of one of these is the
    scenario's action as well."""

    @property
    def acted_on(self) -> tuple[str, ...]:
        """The alerts whose new record is the operator's action on this scenario's fault."""
        return self.alerts + self.may_raise


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("oom", "a CUDA out-of-memory error reported by one trainer", (Fault("oom"),),
                 ("GPUOutOfMemory",), Spread.ONE_POD),
        Scenario("nan", "a NaN loss in one trainer", (Fault("nan-loss"),), ("TrainingLossNonFinite",),
                 Spread.ONE_POD),
        Scenario("node-down", "a GPU node of the job goes NotReady", (), ("GPUNodeDown",), Spread.ONE_NODE,
                 synthetic_why="a drill never takes a node down: it posts what the node's state would raise"),
        Scenario("net-jitter", "heavy packet loss on one pod's training network", (Fault("packet-loss"),),
                 ("NetworkPacketLossHigh",), Spread.ONE_POD),
        Scenario("throughput-drop", "every rank's throughput falls to 40%", (Fault("throughput-drop"),),
                 ("TrainingThroughputDrop",), Spread.EVERY_POD),
        Scenario("stall", "every rank stops completing steps", (Fault("stall"),), ("TrainingJobStalled",),
                 Spread.EVERY_POD, stops_training=True),
        Scenario("multi-node", "a GPU falls off the bus (XID 79) on two nodes at once", (Fault("xid-79", gpu=0),),
                 ("GPULost", "GPUCriticalXid"), Spread.TWO_NODES),
        Scenario("partition", "one node is cut off: its sidecars unreachable, the node NotReady", (),
                 ("GPUNodeDown", "TrainguardExporterDown"), Spread.ONE_NODE,
                 synthetic_why="a drill never cuts a node off: it posts what a partition would raise"),
        Scenario("slow-gpu", "one GPU's clocks held 30% down by a hardware slowdown (slow, not dead)",
                 (Fault("hw-slowdown", gpu=0),), ("GPUClocksThrottled",), Spread.ONE_POD,
                 may_raise=("GPUClockBelowPeers",)),
    )
}  # fmt: skip


class DrillError(ValueError):
    """The drill cannot run as asked (no pods, too few nodes, an unknown scenario)."""


@dataclass(frozen=True)
class PodView:
    """One of the job's pods as the drill sees it."""

    name: str
    node: str
    ip: str = ""
    port: int = 0
    """The exporter sidecar's port; 0 without a sidecar."""
    injectable: bool = False
    """Its sidecar answered GET /v1/faults (fault injection is on)."""


@dataclass(frozen=True)
class Targets:
    """Where a scenario goes: the sidecars to inject into, or (synthetic) the pods whose labels the
    synthetic alerts carry."""

    synthetic: bool
    pods: tuple[PodView, ...]
    why: str
    """Why synthetic, or which sidecars: said in the plan and the report."""


def scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise DrillError(f"unknown scenario {name!r}; one of: {', '.join(SCENARIOS)}") from None


def _by_node(pods: Sequence[PodView]) -> dict[str, list[PodView]]:
    out: dict[str, list[PodView]] = {}
    for p in sorted(pods, key=lambda p: (p.node, p.name)):
        out.setdefault(p.node, []).append(p)
    return out


def choose_targets(s: Scenario, pods: Sequence[PodView]) -> Targets:
    """The sidecars a scenario injects into, or the pods its synthetic alerts are about when it is
    synthetic by nature or no (or not enough) sidecars allow injection."""
    pods = sorted((p for p in pods if p.node), key=lambda p: (p.name, p.node))
    if not pods:
        raise DrillError("the monitor selects no running pod on a node: nothing to drill")
    injectable = [p for p in pods if p.injectable and p.port]
    nodes = _by_node(pods)
    if s.spread == Spread.ONE_NODE:
        node = pods[0].node
        return Targets(True, tuple(nodes[node]), s.synthetic_why or "synthetic by nature")
    if s.spread == Spread.TWO_NODES:
        if len(nodes) < 2:
            raise DrillError(f"{s.name} needs a job on two nodes; its pods run on {len(nodes)}")
        inj = _by_node(injectable)
        if len(inj) >= 2:
            chosen = tuple(inj[n][0] for n in sorted(inj)[:2])
            return Targets(False, chosen, "sidecars " + ", ".join(f"{p.name} ({p.node})" for p in chosen))
        chosen = tuple(nodes[n][0] for n in sorted(nodes)[:2])
        return Targets(True, chosen, "fewer than two nodes have a sidecar with fault injection on")
    if s.spread == Spread.EVERY_POD:
        if len(injectable) == len(pods):
            return Targets(False, tuple(pods), f"every sidecar ({len(pods)})")
        why = "no sidecar has" if not injectable else f"only {len(injectable)} of {len(pods)} sidecars have"
        return Targets(True, tuple(pods), f"{why} fault injection on, and {s.name} is judged job-wide")
    if injectable:
        return Targets(False, (injectable[0],), f"sidecar {injectable[0].name} ({injectable[0].node})")
    return Targets(True, (pods[0],), "no sidecar has fault injection on")


_SCOPE_DEFAULTS = {"gpu": "0", "interface": "eth0", "device": "nvme0n1", "port": "1", "rack": "unknown"}


def alert_labels(alertname: str, pod: PodView, namespace: str, job: str) -> dict[str, str]:
    """The identifying labels a real instance of `alertname` about `pod` would carry (its scope's)."""
    alert = ALERTS_BY_NAME[alertname]
    known = {"namespace": namespace, "training_job": job, "pod": pod.name, "node": pod.node}
    labels = {"alertname": alertname, **grade_labels(alert.severity)}
    for key in alert.scope.labels:
        labels[key] = known.get(key) or _SCOPE_DEFAULTS.get(key, "")
    return labels


def synthetic_alerts(
    s: Scenario, targets: Targets, *, namespace: str, job: str, drill_id: str, starts: str, ends: str
) -> list[dict[str, Any]]:
    """Postable alerts (Alertmanager API v2) standing in for the scenario's faults: one per alert and
    scope (a job-wide alert once, a node alert once per node), each marked with DRILL_LABEL. `ends`
    bounds them should the drill die without cleaning up; cleanup posts them again ending now."""
    out: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for pod in targets.pods:
        for name in s.alerts:
            labels = alert_labels(name, pod, namespace, job) | {DRILL_LABEL: drill_id}
            key = tuple(sorted(labels.items()))
            out.setdefault(key, {
                "labels": labels,
                "annotations": {
                    "summary": f"[drill] {ALERTS_BY_NAME[name].summary}",
                    "description": f"trainguard drill {drill_id} ({s.name}): a synthetic alert, no real fault",
                },
                "startsAt": starts,
                "endsAt": ends,
            })  # fmt: skip
    return list(out.values())


def _action_of(rem: Remediation, cls: str, name: str = "") -> str:
    a = rem.actions
    if cls == SLOW_NODE:
        return a.slow_node.straggler if name == STRAGGLER_ALERT else a.slow_node.gpu
    return {
        NONFINITE_LOSS: a.non_finite_loss,
        NODE_FAULT: a.node_fault,
        STALL: a.stall,
        INTERRUPTED: a.interrupted,
        ECC_DEGRADED: a.ecc_degraded,
        TRAINING_ADVICE: "AdviseTrainers" if rem.training_advice else "Notify",
    }.get(cls, "Notify")


def expected_action(alerts: Sequence[str], rem: Remediation) -> str | None:
    """The automatic action the operator takes on the first of `alerts` it acts on at their catalogue
    severity, under the monitor's `spec.remediation`; None when it takes none (remediation disabled,
    no response class, a `Notify` action)."""
    if not rem.enabled:
        return None
    for name in alerts:
        cls = response_class(name)
        alert = ALERTS_BY_NAME.get(name)
        if cls is None or alert is None or (cls not in AT_P1 and alert.severity != "P0"):
            continue
        action = _action_of(rem, cls, name)
        if action != "Notify":
            return action
    return None


class Stage(StrEnum):
    ALERT = "alert"
    NOTIFICATION = "notification"
    ACTION = "action"
    RESUMED = "resumed"


def applicable(s: Scenario, action: str | None, allow_actions: bool) -> dict[Stage, str]:
    """Each stage that applies to this drill, with what it waits for; a stage left out is n/a.
    Resumed training applies when the fault itself stops training (the drill clears it), or when the
    operator really restarts the job (actions allowed, a restarting action)."""
    out = {
        Stage.ALERT: "every expected alert active in Alertmanager",
        Stage.NOTIFICATION: "Alertmanager delivered a notification to a receiver other than the operator",
    }
    if action is not None:
        out[Stage.ACTION] = (
            f"a {'' if allow_actions else 'dry-run '}remediation record ({action}) in the status"
        )
    if s.stops_training:
        out[Stage.RESUMED] = "a sidecar's training step advances again after the drill clears the fault"
    elif allow_actions and action in RESTARTING_ACTIONS:
        out[Stage.RESUMED] = "a new pod's training step advances after the operator's restart"
    return out
