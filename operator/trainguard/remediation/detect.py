"""The faults the operator sees for itself, from the Kubernetes objects, because no exporter can report
them: the exporter died with the training container, its pod or its node.

Pure: the caller lists the objects (plain API dicts, camelCase, as `sanitize_for_serialization` gives
them) and passes a clock reading; for node down, also its sightings of each node's state across passes
(`sight`, kept by remediation/passes.py's WatchPass), since a node is judged down by how long the
operator itself has seen its state unchanged. Every signal's time comes from the objects (or, for node
down, the first sighting), never from the clock of the pass, so the same fault read on the next pass
gives the same signal (same fingerprint, same time): the planner acts on it once and Alertmanager merges
the re-posts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.alerts import TRAINING_INTERRUPTED
from trainguard.catalog.severity import grade_labels, grade_of
from trainguard.kube.objects import Hearing
from trainguard.remediation.model import Phase, Signal, Source, StepKind
from trainguard.remediation.signals import signal_fingerprint
from trainguard.render.sidecar import EXPORTER
from trainguard.times import parse_rfc3339

NODE_DOWN = "GPUNodeDown"
SEVERITY = "P0"
LEASE_GRACE_S = 18.0
"""How long the operator must see a node's Lease unchanged (the same renewTime and resourceVersion), on
its own clock, before the node counts as down. A live kubelet renews every 10 s, so 18 s is a renewal
missed by 8 s; with the detection pass every 3 s (`--detect-seconds`) a node that dies just after a
renewal is found at most 3 + 18 = 21 s later (the first pass that sees the renewal, then 18 s), and
cordoned within 30 s (docs/p0-response.md#node-down)."""
NOT_READY_MIN_S = 12.0
"""How long the operator must see a node's Ready condition False or Unknown before the node counts as
down: a NotReady blip of a few seconds (a kubelet restart, a runtime hiccup) is not a node down."""
HEARING_S = 15.0
"""The longest the Lease cache may go without hearing from the API, and the longest gap between two
looks, for the looks to continue each other: every live kubelet renews its Lease every 10 s, so a Lease
cache quiet for longer is not hearing the API (or no kubelet is alive, which it cannot tell apart)."""
FINISHED_JOB_SEVERITY = "P2"
"""A failed Job with no live pod is reported at this severity: it notifies, and no response acts on it."""
EVICTED = "Evicted"
JOB_FAILED = "JobFailed"
OOM_KILLED = "OOMKilled"


def _time(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse_rfc3339(text)
    except (ValueError, OverflowError):
        return None


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _status(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("status") or {}


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in _status(obj).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def monitor_pods(pods: Iterable[dict[str, Any]], monitor: TrainingJobMonitor) -> list[dict[str, Any]]:
    """The pods the monitor's selector picks in its namespace (an empty selector picks none)."""
    return [
        p
        for p in pods
        if _meta(p).get("namespace") == monitor.namespace
        and monitor.spec.selector.matches(_meta(p).get("labels") or {})
    ]


def _job_labels(monitor: TrainingJobMonitor, **extra: str) -> dict[str, str]:
    labels = {
        **grade_labels(SEVERITY),
        "namespace": monitor.namespace,
        "training_job": monitor.name,
        **{k: v for k, v in extra.items() if v},  # an empty label is an absent one (Prometheus, Alertmanager)
    }
    return labels


def _signal(labels: dict[str, str], starts_at: float, now: float, annotations: dict[str, str]) -> Signal:
    return Signal(
        alertname=labels["alertname"],
        severity=grade_of(labels),
        labels=labels,
        fingerprint=signal_fingerprint(labels),
        source=Source.OPERATOR,
        starts_at=min(starts_at, now),  # a clock ahead of ours must not date the fault later
        annotations=annotations,
    )


# ---- TrainingInterrupted -------------------------------------------------------------------------


def _container_fault(status: dict[str, Any]) -> tuple[str, float | None] | None:
    """(reason, finishedAt) of the newest faulty termination of one training container, counting the
    last one (lastState) of a container that its kubelet has restarted in place (restartPolicy
    OnFailure): the other ranks of the gang are left hanging in a collective all the same."""
    found: list[tuple[float, str, float | None]] = []
    for terminated in (
        (status.get("state") or {}).get("terminated"),
        (status.get("lastState") or {}).get("terminated"),
    ):
        if not terminated:
            continue
        reason = str(terminated.get("reason") or "")
        code = terminated.get("exitCode")
        if reason == OOM_KILLED:
            label = OOM_KILLED
        elif isinstance(code, int) and code != 0:
            label = f"{reason or 'Error'}(exit {code})"
        else:
            continue
        finished = _time(terminated.get("finishedAt"))
        found.append((finished if finished is not None else float("-inf"), label, finished))
    if not found:
        return None
    _, label, finished = max(found)
    return label, finished


def _first_time(*candidates: float | None) -> float | None:
    return next((c for c in candidates if c is not None), None)


def _pod_interruption(pod: dict[str, Any]) -> tuple[str, float] | None:
    """(reason, time) of the pod's interruption, or None when there is none."""
    status = _status(pod)
    phase = status.get("phase")
    if phase == "Succeeded":
        return None
    faults = [
        f
        for s in status.get("containerStatuses") or []
        if s.get("name") != EXPORTER
        for f in [_container_fault(s)]
        if f is not None
    ]
    finished = [t for _, t in faults if t is not None]
    newest = max(finished) if finished else None

    def cond_time(kind: str) -> float | None:
        c = _condition(pod, kind)
        return None if c is None else _time(c.get("lastTransitionTime"))

    fallback = _first_time(
        cond_time("Ready"), _time(status.get("startTime")), _time(_meta(pod).get("creationTimestamp"))
    )
    if status.get("reason") == EVICTED:
        # the eviction is the cause; the containers' exit 137 is only its effect
        at = _first_time(cond_time("DisruptionTarget"), newest, fallback)
        return (EVICTED, at) if at is not None else None
    if faults:
        # the first container to fail is the cause; the others may have failed because of it
        dated = sorted((t, r) for r, t in faults if t is not None)
        reason, at = (dated[0][1], dated[0][0]) if dated else (faults[0][0], fallback)
        return (reason, at) if at is not None else None
    if phase == "Failed":
        at = _first_time(cond_time("DisruptionTarget"), fallback)
        return (str(status.get("reason") or "Failed"), at) if at is not None else None
    return None


def _live(pod: dict[str, Any]) -> bool:
    return not _meta(pod).get("deletionTimestamp") and _status(pod).get("phase") not in (
        "Succeeded",
        "Failed",
    )


def _created(pod: dict[str, Any]) -> float | None:
    return _time(_meta(pod).get("creationTimestamp"))


def restarted_before(records: Iterable[Mapping[str, Any]]) -> float | None:
    """Pods created before this (unix seconds, the apiserver's clock) belong to a gang trainguard has
    restarted, or None when it never restarted this job: one past the newest `createdUpTo` of a
    RestartGang step that Succeeded (the newest creation second among the pods it deleted). A step an
    older operator finished without that field counts the pods created before its record, as its redo
    would have deleted them. Dry runs restarted nothing."""
    bound: float | None = None
    for record in records:
        if record.get("dryRun"):
            continue
        for step in record.get("steps") or []:
            if step.get("kind") != StepKind.RESTART_GANG or step.get("phase") != Phase.SUCCEEDED:
                continue
            up_to = (step.get("progress") or {}).get("createdUpTo")
            if isinstance(up_to, int | float) and not isinstance(up_to, bool):
                cut: float | None = float(up_to) + 1
            else:
                created = _time(record.get("created"))
                cut = None if created is None else float(math.floor(created))
            if cut is not None and (bound is None or cut > bound):
                bound = cut
    return bound


GANG_SPREAD_S = 60.0
"""How far apart in creation the pods of one gang may be: a Job or JobSet controller creates a gang's pods
within seconds (creation times have one-second resolution), so a terminated pod created this much before
every live pod belongs to an earlier gang. Without the margin, a rank created a second before its peers
would look like history, and its OOM kill would go unanswered."""


def _replaced(pod: dict[str, Any], gang: float | None, restarted: float | None) -> bool:
    """Whether `pod` is older than the job's current gang (created GANG_SPREAD_S before every live pod of
    the job) or than its last gang restart: its termination is history, however recent it looks. Both
    compare pod creation times, which one clock writes (the apiserver's); a termination's finishedAt,
    written by the node's kubelet, is never compared with them."""
    created = _created(pod)
    if created is None:
        return False
    return (gang is not None and created < gang - GANG_SPREAD_S) or (
        restarted is not None and created < restarted
    )


def interruptions(
    pods: list[dict[str, Any]],
    jobs: list[dict[str, Any]],
    monitor: TrainingJobMonitor,
    now: float,
    records: Iterable[Mapping[str, Any]] = (),
) -> list[Signal]:
    """P0 TrainingInterrupted signals for the monitor's job, oldest first: a training container of the
    current gang terminated OOMKilled or with a non-zero exit (now or, restarted in place, last time), a
    pod of it Failed or Evicted, or the monitor's Job (spec.workloadRef kind Job) with a Failed condition.

    Not an interruption: a pod that Succeeded; a container that exited 0; the trainguard-exporter
    sidecar (its death is TrainguardExporterDown's business, training goes on); and any pod being
    deleted (deletionTimestamp set). A deletion is deliberate - trainguard's own gang restart, whose
    containers exit 137/143 on the way out, a user, the Job controller winding down a failed Job (its
    Failed condition is reported), or the eviction of pods from a dead node (GPUNodeDown is reported).
    Counting it would restart the gang again after every restart.

    Nor a pod of an earlier gang (`_replaced`): one created before every live pod of the job (a Job's
    failed pod that restartPolicy Never keeps after its replacement and a gang restart came), or before
    the job's last gang restart (`records`, the monitor's status.remediations; `restarted_before`). Its
    termination was acted on, or is moot, and must not restart the gang again when the operator
    forgets its record: at monitor creation, after a status loss, after leaving dry run, or once the
    record left the history.

    When the monitor's Job has failed and no live pod of the job is left, every signal of it (the Job's
    and its last pods') is a P2, which notifies (e-mail, ticket) and which no response acts on: the Job
    controller never recreates the pods of a failed Job, so a gang restart would delete nothing and
    only spend the restart budget. The job needs a person to resubmit it, not a restart; and a P2, unlike
    a P1, is never escalated back into a P0 that the planner would restart."""
    mine = monitor_pods(pods, monitor)
    gang = min((c for p in mine if _live(p) and (c := _created(p)) is not None), default=None)
    restarted = restarted_before(records)
    failed = _job_failures(jobs, monitor, now)
    # a failed Job with no live pod: nothing left to restart, so every signal of it only notifies
    over = bool(failed) and not any(_live(p) for p in mine)
    out: list[Signal] = []
    for pod in mine:
        if _meta(pod).get("deletionTimestamp") or _replaced(pod, gang, restarted):
            continue
        found = _pod_interruption(pod)
        if found is None:
            continue
        reason, at = found
        name = str(_meta(pod).get("name") or "")
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        labels = {
            "alertname": TRAINING_INTERRUPTED,
            **_job_labels(monitor, pod=name, node=node, reason=reason),
        }
        annotations = {
            "summary": "A training pod of the job was interrupted",
            "description": f"pod {monitor.namespace}/{name} on node {node or '(none)'}: {reason}",
        }
        out.append(_signal(labels, at, now, annotations))
    out.extend(failed)
    if over:
        out = [_notice(s) for s in out]
    return sorted(out, key=lambda s: (s.starts_at, s.labels.get("pod", "")))


def _notice(signal: Signal) -> Signal:
    """`signal` at FINISHED_JOB_SEVERITY: the job's Job failed and no pod of it is left."""
    labels = {**signal.labels, **grade_labels(FINISHED_JOB_SEVERITY)}
    note = "; the Job failed and no pod of it is left, which its controller does not recreate: resubmit it"
    return replace(
        signal,
        severity=FINISHED_JOB_SEVERITY,
        labels=labels,
        fingerprint=signal_fingerprint(labels),
        annotations={**signal.annotations, "description": signal.annotations.get("description", "") + note},
    )


def _job_failures(jobs: list[dict[str, Any]], monitor: TrainingJobMonitor, now: float) -> list[Signal]:
    ref = monitor.spec.workload_ref
    if ref is None or ref.kind != "Job":
        return []
    out = []
    for job in jobs:
        meta = _meta(job)
        if (meta.get("namespace"), meta.get("name")) != (monitor.namespace, ref.name):
            continue
        if job.get("kind", "Job") != "Job":
            continue
        failed = _condition(job, "Failed")
        if failed is None or failed.get("status") != "True":
            continue
        at = _first_time(
            _time(failed.get("lastTransitionTime")),
            _time(failed.get("lastProbeTime")),
            _time(meta.get("creationTimestamp")),
        )
        if at is None:
            continue
        why = str(failed.get("reason") or "")
        reason = f"{JOB_FAILED}({why})" if why else JOB_FAILED
        labels = {"alertname": TRAINING_INTERRUPTED, **_job_labels(monitor, reason=reason)}
        annotations = {
            "summary": "The training job's Job failed",
            "description": f"Job {monitor.namespace}/{ref.name} failed: {why or 'no reason given'}"
            + (f" - {failed['message']}" if failed.get("message") else ""),
        }
        out.append(_signal(labels, at, now, annotations))
    return out


# ---- GPUNodeDown ---------------------------------------------------------------------------------
#
# Node down is judged as the node lifecycle controller judges it: by how long the operator itself has
# watched a node's state stay the same, on its own monotonic clock. No time written by a kubelet (a
# Lease's renewTime, a NotReady's lastTransitionTime) is compared with the operator's clock: a kubelet
# whose clock is behind would otherwise look dead while it renews every 10 s.


@dataclass(frozen=True)
class NodeDownSettings:
    lease_grace_s: float = LEASE_GRACE_S
    """A node whose Lease the operator has seen unchanged this long is down."""
    not_ready_min_s: float = NOT_READY_MIN_S
    """A node whose Ready condition the operator has seen not True this long is down."""


@dataclass(frozen=True)
class Sighting:
    """One state of one node as the operator first saw it: `key` identifies the state (the Lease's
    renewTime and resourceVersion, or Ready's status and lastTransitionTime), `since` is the operator's
    monotonic clock and `seen` its wall clock at that first sighting (`seen` dates the signal, `since`
    times the verdict)."""

    key: tuple[str, str]
    since: float
    seen: float


@dataclass(frozen=True)
class NodeSighting:
    lease: Sighting | None = None
    """The node's Lease in kube-node-lease, None without one."""
    not_ready: Sighting | None = None
    """Its Ready condition while it is False or Unknown; None while True or absent."""


def _lease_key(lease: dict[str, Any]) -> tuple[str, str]:
    spec, meta = lease.get("spec") or {}, _meta(lease)
    return str(spec.get("renewTime") or ""), str(meta.get("resourceVersion") or "")


def _not_ready_key(node: dict[str, Any]) -> tuple[str, str] | None:
    ready = _condition(node, "Ready")
    if ready is None or ready.get("status") == "True":
        return None
    return str(ready.get("status") or "unset"), str(ready.get("lastTransitionTime") or "")


def _again(old: Sighting | None, key: tuple[str, str] | None, since: float, seen: float) -> Sighting | None:
    if key is None:
        return None
    if old is not None and old.key == key:
        return old
    return Sighting(key, since, seen)


def sight(
    previous: Mapping[str, NodeSighting],
    nodes: Iterable[dict[str, Any]],
    leases: Iterable[dict[str, Any]],
    since: float,
    seen: float,
) -> dict[str, NodeSighting]:
    """The sightings after one more look at `nodes` and their `leases`: a state seen before keeps its
    first sighting, a new one (a renewed Lease, a Ready condition that turned) starts at `since`
    (monotonic) and `seen` (wall clock). Only the caller decides whether the look continues the last
    one: after a gap in what the caches heard, pass an empty `previous`.

    NotReady is timed from the operator's first sighting of that transition, and the condition's
    lastTransitionTime serves only to tell transitions apart: a different lastTransitionTime is a new
    transition (the node was Ready in between, unseen between two passes), so its time restarts. That
    is "the later of the first sighting and lastTransitionTime" without reading lastTransitionTime as a
    time: it comes from the kubelet's clock (NotReady) or the controller manager's (Unknown), and
    compared with ours a clock behind would shorten the wait and one ahead would stretch it by its
    skew. Our own sighting can only come after the transition, so the wait is never shorter than
    `not_ready_min_s` of real time."""
    by_name = {
        str(_meta(lease).get("name")): lease
        for lease in leases
        if _meta(lease).get("namespace") in (None, "kube-node-lease")
    }
    out: dict[str, NodeSighting] = {}
    for node in nodes:
        name = str(_meta(node).get("name") or "")
        if not name:
            continue
        old = previous.get(name, NodeSighting())
        lease = by_name.get(name)
        out[name] = NodeSighting(
            lease=_again(old.lease, None if lease is None else _lease_key(lease), since, seen),
            not_ready=_again(old.not_ready, _not_ready_key(node), since, seen),
        )
    return out


def _node_down(
    node: dict[str, Any], sighting: NodeSighting, since: float, settings: NodeDownSettings
) -> tuple[str, float] | None:
    """(why, when) when the node is down at `since` (the operator's monotonic clock): its Lease seen
    unchanged for lease_grace_s, or its Ready condition seen False or Unknown for not_ready_min_s.
    `when` is the earliest of the evidence's dates, each the earlier of the object's own time and the
    operator's first sighting, so it is the same on every pass (the planner's record id) and a clock
    ahead of ours cannot date it later."""
    evidence: list[tuple[float, str]] = []
    ready = sighting.not_ready
    if ready is not None and since - ready.since >= settings.not_ready_min_s:
        cond = _condition(node, "Ready") or {}
        status = "NotReady" if ready.key[0] == "False" else f"Ready {ready.key[0]}"
        why = f"{status} ({cond['reason']})" if cond.get("reason") else status
        turned = _time(ready.key[1])
        at = min(turned, ready.seen) if turned is not None else ready.seen
        evidence.append((at, f"{why}, seen for over {settings.not_ready_min_s:g}s"))
    lease = sighting.lease
    if lease is not None and since - lease.since >= settings.lease_grace_s:
        renewed = _time(lease.key[0])
        at = min(renewed, lease.seen) if renewed is not None else lease.seen
        last = f"renewed {lease.key[0]}" if lease.key[0] else "never renewed"
        evidence.append((at, f"Lease unchanged for over {settings.lease_grace_s:g}s ({last})"))
    if not evidence:
        return None
    at, _ = min(evidence)
    return "; ".join(why for _, why in sorted(evidence)), at


def node_faults(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    monitor: TrainingJobMonitor,
    sightings: Mapping[str, NodeSighting],
    *,
    since: float,
    now: float,
    settings: NodeDownSettings = NodeDownSettings(),
) -> list[Signal]:
    """P0 GPUNodeDown signals, one per down node that hosts one of the monitor's pods, oldest first.
    `since` is the operator's monotonic clock (the sightings' clock), `now` its wall clock.

    Down is node state only, as the operator has watched it (see `sight`): a node Lease (kube-node-lease,
    named after the node) it has seen unchanged for `lease_grace_s`, or a Ready condition it has seen not
    True for `not_ready_min_s`. A sidecar that does not answer is not a node down
    (TrainguardExporterDown says so). A node without a Ready condition or without a Lease gives no
    evidence either way. The job's pods on a node are its live ones, those being deleted included: the
    taint manager evicts the pods of an unreachable node, and they stay Terminating there until it comes
    back, so leaving them out would lose the fault just when it matters. A pod that Succeeded or Failed
    no longer runs on its node."""
    hosts = {
        str((p.get("spec") or {}).get("nodeName") or "")
        for p in monitor_pods(pods, monitor)
        if _status(p).get("phase") not in ("Succeeded", "Failed")
    }
    hosts.discard("")
    out = []
    for node in nodes:
        name = str(_meta(node).get("name") or "")
        if name not in hosts or name not in sightings:
            continue
        down = _node_down(node, sightings[name], since, settings)
        if down is None:
            continue
        why, at = down
        labels = {"alertname": NODE_DOWN, **_job_labels(monitor, node=name)}
        annotations = {
            "summary": "A GPU node of the job is down",
            "description": f"node {name}: {why}",
        }
        out.append(_signal(labels, at, now, annotations))
    return sorted(out, key=lambda s: (s.starts_at, s.node))


def continuous(
    previous: Hearing | None, current: Hearing, gap_s: float, *, quiet_s: float = HEARING_S
) -> bool:
    """Whether the caches heard the API without a break from the previous look to this one, `gap_s`
    apart: both listed, no list, error or dropped watch between, the looks at most `quiet_s` apart, and
    the Lease cache (whose Leases some kubelet renews every 10 s) heard within `quiet_s`. Otherwise the
    sightings start again: a state the caches could not hear change does not count as unchanged."""
    return (
        previous is not None
        and gap_s <= quiet_s
        and hearing(current, quiet_s=quiet_s)
        and (previous.breaks == current.breaks)
    )


def hearing(current: Hearing, *, quiet_s: float = HEARING_S) -> bool:
    """Whether the caches hear the API now: listed, and the Lease cache heard within `quiet_s` (unless it
    holds no Lease, when there is nothing to hear)."""
    return current.synced and (current.leases == 0 or current.leases_heard_s <= quiet_s)
