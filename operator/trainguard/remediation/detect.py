"""The faults the operator sees for itself, from the Kubernetes objects, because no exporter can report
them: the exporter died with the training container, its pod or its node.

Pure: the caller lists the objects (plain API dicts, camelCase, as `sanitize_for_serialization` gives
them) and passes a clock reading. Every signal's time comes from the objects, never from the clock, so
the same fault read on the next pass gives the same signal (same fingerprint, same time): the planner
acts on it once and Alertmanager merges the re-posts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.alerts import TRAINING_INTERRUPTED
from trainguard.remediation.model import Signal, Source
from trainguard.remediation.signals import signal_fingerprint
from trainguard.render.sidecar import EXPORTER
from trainguard.times import parse_rfc3339, rfc3339

NODE_DOWN = "GPUNodeDown"
SEVERITY = "P0"
LEASE_GRACE_S = 40.0
"""How long past its expiry a node's Lease may go unrenewed before the node counts as down: the
kubelet renews every 10 s of a 40 s lease, and the node lifecycle controller waits about as long
(node-monitor-grace-period) before it marks the node Unknown."""
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
        "severity": SEVERITY,
        "namespace": monitor.namespace,
        "training_job": monitor.name,
        **{k: v for k, v in extra.items() if v},  # an empty label is an absent one (Prometheus, Alertmanager)
    }
    return labels


def _signal(labels: dict[str, str], starts_at: float, now: float, annotations: dict[str, str]) -> Signal:
    return Signal(
        alertname=labels["alertname"],
        severity=labels["severity"],
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


def interruptions(
    pods: list[dict[str, Any]], jobs: list[dict[str, Any]], monitor: TrainingJobMonitor, now: float
) -> list[Signal]:
    """P0 TrainingInterrupted signals for the monitor's job, oldest first: a training container
    terminated OOMKilled or with a non-zero exit (now or, restarted in place, last time), a pod Failed
    or Evicted, or the monitor's Job (spec.workloadRef kind Job) with a Failed condition.

    Not an interruption: a pod that Succeeded; a container that exited 0; the trainguard-exporter
    sidecar (its death is TrainguardExporterDown's business, training goes on); and any pod being
    deleted (deletionTimestamp set). A deletion is deliberate - trainguard's own gang restart, whose
    containers exit 137/143 on the way out, a user, the Job controller winding down a failed Job (its
    Failed condition is reported), or the eviction of pods from a dead node (GPUNodeDown is reported).
    Counting it would restart the gang again after every restart."""
    out: list[Signal] = []
    for pod in monitor_pods(pods, monitor):
        if _meta(pod).get("deletionTimestamp"):
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
    out.extend(_job_failures(jobs, monitor, now))
    return sorted(out, key=lambda s: (s.starts_at, s.labels.get("pod", "")))


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


def _node_down_since(
    node: dict[str, Any], lease: dict[str, Any] | None, now: float, grace: float
) -> tuple[str, float] | None:
    """(why, since) when the node is down: its Ready condition is False or Unknown, or its Lease
    expired more than `grace` seconds ago. With both, the earlier time, so that the signal keeps its
    time as the node lifecycle controller catches up with the lease (Ready turns Unknown later)."""
    evidence: list[tuple[float, str]] = []
    ready = _condition(node, "Ready")
    if ready is not None and ready.get("status") != "True":
        at = _time(ready.get("lastTransitionTime"))
        if at is not None:
            status = (
                "NotReady" if ready.get("status") == "False" else f"Ready {ready.get('status') or 'unset'}"
            )
            why = f"{status} ({ready['reason']})" if ready.get("reason") else status
            evidence.append((at, why))
    if lease is not None:
        spec = lease.get("spec") or {}
        renewed = _time(spec.get("renewTime"))
        duration = spec.get("leaseDurationSeconds")
        if renewed is not None and isinstance(duration, int | float) and not isinstance(duration, bool):
            expiry = renewed + float(duration)
            if now - expiry > grace:
                evidence.append((expiry, f"Lease expired at {rfc3339(expiry)}"))
    if not evidence:
        return None
    at, _ = min(evidence)
    return "; ".join(why for _, why in sorted(evidence)), at


def node_faults(
    nodes: list[dict[str, Any]],
    leases: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    monitor: TrainingJobMonitor,
    now: float,
    *,
    lease_grace_s: float = LEASE_GRACE_S,
) -> list[Signal]:
    """P0 GPUNodeDown signals, one per down node that hosts one of the monitor's pods, oldest first.

    Down is node state only: a Ready condition that is not True, or a node Lease (kube-node-lease,
    named after the node) that expired more than `lease_grace_s` ago. A sidecar that does not answer
    is not a node down (TrainguardExporterDown says so). A node without a Ready condition or without a
    Lease gives no evidence either way. The job's pods on a node are its live ones, those being deleted
    included: the taint manager evicts the pods of an unreachable node, and they stay Terminating there
    until it comes back, so leaving them out would lose the fault just when it matters. A pod that
    Succeeded or Failed no longer runs on its node."""
    hosts = {
        str((p.get("spec") or {}).get("nodeName") or "")
        for p in monitor_pods(pods, monitor)
        if _status(p).get("phase") not in ("Succeeded", "Failed")
    }
    hosts.discard("")
    by_name = {
        str(_meta(lease).get("name")): lease
        for lease in leases
        if _meta(lease).get("namespace") in (None, "kube-node-lease")
    }
    out = []
    for node in nodes:
        name = str(_meta(node).get("name") or "")
        if name not in hosts:
            continue
        down = _node_down_since(node, by_name.get(name), now, lease_grace_s)
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
