"""Planned maintenance, pure: a node that a person cordoned (or `kubectl drain` cordoned) or annotated
with a maintenance time, while a monitored job runs on it, and whether an eviction of one of the job's
pods must wait for the job's checkpoint (docs/remediation.md, "Planned maintenance").

A node is under maintenance when it is unschedulable without trainguard's own cordon annotation
(catalog/kubernetes.py CORDONED_BY: trainguard's cordons are a fault's, and their record moves the job),
or when it carries `trainguard.io/maintenance-at: <RFC 3339>` and that time is at most the lead away
(`lead_s`, twice the monitor's emergencyCheckpointTimeout: time to checkpoint, then to move). A value
that is not RFC 3339 is a `Problem` naming the annotation and the format, never a guess.

The eviction gate (`eviction_verdict`) holds the eviction API (HTTP 429, which `kubectl drain` and
every eviction client retry, as for a PodDisruptionBudget) for a pod of a monitored job on a node under
maintenance until the job's maintenance record has finished its RequestCheckpoint step, for at most the
checkpoint timeout plus `HOLD_MARGIN_S`: the drain is delayed, never blocked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainguard.api import duration_seconds
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.alerts import NODE_MAINTENANCE
from trainguard.catalog.kubernetes import CORDONED_BY, MAINTENANCE_AT
from trainguard.catalog.severity import grade_labels, grade_of
from trainguard.remediation.model import Phase, Signal, Source, StepKind
from trainguard.remediation.signals import signal_fingerprint
from trainguard.times import parse_rfc3339, rfc3339

MAINTENANCE = "maintenance"
"""The response class of NodeMaintenancePlanned (spec.remediation.actions.maintenance)."""
SEVERITY = "P2"
"""A planned move is no fault: it notifies by e-mail and ticket (the person who drains knows), and a P2
is never escalated into a page."""
BY_CORDON = "cordon"
BY_ANNOTATION = "annotation"
HOLD_MARGIN_S = 60.0
"""How much longer than the checkpoint timeout the gate holds an eviction: the time to see the cordon
(a detection pass, every 3 s), plan, and reach the sidecars."""
FORMAT = "RFC 3339, e.g. 2026-12-03T22:00:00Z"
FINISHED = (Phase.SUCCEEDED, Phase.FAILED, Phase.SKIPPED)


@dataclass(frozen=True)
class Problem:
    """A node annotation trainguard cannot read: said once per value, with the fix."""

    node: str
    value: str

    @property
    def message(self) -> str:
        return (
            f"node {self.node}: annotation {MAINTENANCE_AT}={self.value!r} is not a time in {FORMAT};"
            " no maintenance is planned from it until it is fixed"
        )


@dataclass(frozen=True)
class Maintenance:
    """Why a node is under maintenance now: `by` cordon or annotation, and the annotated time if any."""

    by: str
    at: float | None = None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def annotated_at(node: Mapping[str, Any]) -> float | Problem | None:
    """The node's planned maintenance time (unix seconds), a Problem when the value is not RFC 3339, or
    None without the annotation."""
    value = (_meta(node).get("annotations") or {}).get(MAINTENANCE_AT)
    if value is None:
        return None
    try:
        return parse_rfc3339(str(value).strip())
    except (ValueError, OverflowError):
        return Problem(str(_meta(node).get("name") or ""), str(value))


def person_cordoned(node: Mapping[str, Any]) -> bool:
    """Unschedulable, and not by trainguard (whose cordons carry CORDONED_BY)."""
    annotations = _meta(node).get("annotations") or {}
    return bool((node.get("spec") or {}).get("unschedulable")) and CORDONED_BY not in annotations


def under_maintenance(node: Mapping[str, Any], now: float, lead_s: float) -> Maintenance | None:
    """Why `node` is under maintenance at `now`, or None: cordoned by a person, or annotated with a time
    at most `lead_s` away (or past)."""
    if person_cordoned(node):
        at = annotated_at(node)
        return Maintenance(BY_CORDON, at if isinstance(at, float) else None)
    at = annotated_at(node)
    if isinstance(at, float) and now >= at - lead_s:
        return Maintenance(BY_ANNOTATION, at)
    return None


def problems(nodes: Iterable[Mapping[str, Any]]) -> list[Problem]:
    """The nodes whose maintenance annotation cannot be read."""
    return [p for n in nodes if isinstance(p := annotated_at(n), Problem)]


def lead_s(monitor: TrainingJobMonitor) -> float:
    """How long before an annotated maintenance time the job starts to move: twice the emergency
    checkpoint timeout (the checkpoint, then the move)."""
    return 2 * duration_seconds(monitor.spec.remediation.emergency_checkpoint_timeout)


def _hosts(pods: Iterable[Mapping[str, Any]], monitor: TrainingJobMonitor) -> set[str]:
    """Nodes of the monitor's live pods (neither being deleted nor finished): a pod already on its way
    out is being moved."""
    out = set()
    for p in pods:
        meta = _meta(p)
        if meta.get("namespace") != monitor.namespace or not monitor.spec.selector.matches(
            meta.get("labels") or {}
        ):
            continue
        if meta.get("deletionTimestamp") or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        node = str((p.get("spec") or {}).get("nodeName") or "")
        if node:
            out.add(node)
    return out


def sighted(
    previous: Mapping[str, float], nodes: Iterable[Mapping[str, Any]], now: float
) -> dict[str, float]:
    """When the operator first saw each node unschedulable by a person (wall clock): a cordon has no time
    of its own, and the signal's time must be the same on every pass (its record id)."""
    out = {}
    for node in nodes:
        name = str(_meta(node).get("name") or "")
        if name and person_cordoned(node):
            out[name] = previous.get(name, now)
    return out


def signals(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    monitor: TrainingJobMonitor,
    now: float,
    first_seen: Mapping[str, float],
) -> list[Signal]:
    """NodeMaintenancePlanned signals, one per node under maintenance that hosts a live pod of the
    monitor's job, oldest first. Dated by the annotated time less the lead (when it became due), or the
    operator's first sighting of the cordon (`first_seen`, `sighted`), so every pass gives the same one."""
    hosts = _hosts(pods, monitor)
    lead = lead_s(monitor)
    out = []
    for node in nodes:
        name = str(_meta(node).get("name") or "")
        if name not in hosts:
            continue
        found = under_maintenance(node, now, lead)
        if found is None:
            continue
        if found.by == BY_ANNOTATION and found.at is not None:
            starts = found.at - lead
        else:
            starts = first_seen.get(name, now)
        labels = {
            "alertname": NODE_MAINTENANCE,
            **grade_labels(SEVERITY),
            "namespace": monitor.namespace,
            "training_job": monitor.name,
            "node": name,
            "by": found.by,
        }
        when = f" for maintenance at {rfc3339(found.at)}" if found.at is not None else ""
        how = "cordoned by a person (not by trainguard)" if found.by == BY_CORDON else "annotated"
        annotations = {
            "summary": "A node of the job is going into planned maintenance",
            "description": f"node {name} is {how}{when}: the job checkpoints and moves off it",
        }
        out.append(
            Signal(
                alertname=NODE_MAINTENANCE,
                severity=grade_of(labels),
                labels=labels,
                fingerprint=signal_fingerprint(labels),
                source=Source.OPERATOR,
                starts_at=min(starts, now),
                annotations=annotations,
            )
        )
    return sorted(out, key=lambda s: (s.starts_at, s.node))


# ---- the eviction gate ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    message: str


ALLOW = Verdict(True, "")


def _checkpointed(record: Mapping[str, Any]) -> bool:
    """The record is done with its checkpoint: finished, or its RequestCheckpoint step finished."""
    if record.get("phase") in FINISHED:
        return True
    steps = [s for s in record.get("steps") or [] if s.get("kind") == StepKind.REQUEST_CHECKPOINT]
    return bool(steps) and all(s.get("phase") in FINISHED for s in steps)


def _created(record: Mapping[str, Any]) -> float | None:
    try:
        return parse_rfc3339(str(record.get("created") or ""))
    except (ValueError, OverflowError):
        return None


def eviction_verdict(
    node: Mapping[str, Any] | None,
    monitor: TrainingJobMonitor,
    records: Iterable[Mapping[str, Any]],
    now: float,
    *,
    held_since: float | None,
    pod_created: float | None = None,
) -> Verdict:
    """Whether an eviction of a pod of `monitor`'s job on `node` goes through now. Held (not allowed)
    only while all of these hold: the node is under maintenance, the monitor acts on it (remediation on,
    the maintenance action CheckpointAndMove, not a dry run), the job's newest maintenance record of
    that node (one created after the pod: an older one moved an earlier pod, weeks ago) has not finished
    its checkpoint, no node fault record handles the node (nothing is saved
    on a dead node), and the hold began (`held_since`: the record's creation or the gate's first hold,
    whichever came first) less than the checkpoint timeout plus HOLD_MARGIN_S ago."""
    if node is None:
        return ALLOW
    rem = monitor.spec.remediation
    if not rem.enabled or rem.dry_run or rem.actions.maintenance != "CheckpointAndMove":
        return ALLOW
    name = str(_meta(node).get("name") or "")
    if under_maintenance(node, now, lead_s(monitor)) is None:
        return ALLOW
    mine = [r for r in records if r.get("node") == name and not r.get("dryRun")]
    if any(r.get("class") == "nodeFault" for r in mine if r.get("phase") not in FINISHED):
        return ALLOW
    ours = [(r, _created(r)) for r in mine if r.get("class") == MAINTENANCE]
    ours = [(r, t) for r, t in ours if pod_created is None or t is None or t >= pod_created]
    newest, created = ours[-1] if ours else (None, None)
    if newest is not None and _checkpointed(newest):
        return ALLOW
    starts = [t for t in (created, held_since) if t is not None]
    since = min(starts) if starts else now
    bound = duration_seconds(rem.emergency_checkpoint_timeout) + HOLD_MARGIN_S
    if now - since >= bound:
        return ALLOW
    what = f"record {newest.get('id')}" if newest is not None else "its maintenance record (being planned)"
    return Verdict(
        False,
        f"trainguard: {monitor.namespace}/{monitor.name} is checkpointing before it leaves node {name}"
        f" ({what}); retry: the eviction is held at most {bound - (now - since):.0f}s more",
    )
