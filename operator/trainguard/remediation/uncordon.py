"""`trainguard uncordon`: return a node trainguard cordoned to service, recording who did it and when.

Only trainguard's own cordons are undone: the node must carry the annotations `Cluster.cordon` writes
(trainguard.io/cordoned-by and the rest). A node a person cordoned is theirs, and is refused with why,
the same rule the operator follows when it finds a node already cordoned. A node the leader labelled a
lemon (remediation/lemon.py) is refused too, naming its faults, unless forced. `decide` is the pure part
(node in, merge patch out); `uncordon` reads, patches with the read resourceVersion (a taint another
writer added meanwhile is a 409 and a fresh read, never a lost taint) and posts a core/v1 Event.

RBAC the caller needs: nodes get and patch; events create in the `default` namespace (cluster-scoped
objects' Events live there).
"""

from __future__ import annotations

import datetime as dt
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from trainguard.catalog.kubernetes import (
    CORDON_REASON,
    CORDONED_AT,
    CORDONED_BY,
    FAULT_HISTORY,
    FAULTY_TAINT,
    LEMON_LABEL,
    LEMON_REASON,
)
from trainguard.kube.errors import ApiError, is_not_found, on_conflict
from trainguard.remediation import lemon

UNCORDONED_BY = "trainguard.io/uncordoned-by"
UNCORDONED_AT = "trainguard.io/uncordoned-at"
"""Unix seconds, like trainguard.io/cordoned-at."""
UNCORDON_REASON = "trainguard.io/uncordon-reason"
EVENT_REASON = "Uncordoned"
EVENT_NAMESPACE = "default"
COMPONENT = "trainguard"


class Refused(Exception):
    """The node is not trainguard's to return to service; the message says why and what to do."""


@dataclass(frozen=True)
class Decision:
    patch: dict[str, Any] | None
    """The merge patch to send, or None when the node is already back in service."""
    message: str


def _when(seconds: str | None) -> str:
    try:
        return dt.datetime.fromtimestamp(float(seconds or ""), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):
        return str(seconds or "an unknown time")


def decide(node: dict[str, Any], by: str, now: float, reason: str = "", *, force: bool = False) -> Decision:
    """What to patch on `node` (the API's JSON) to return it to service; Refused when trainguard did not
    cordon it, or when the leader labelled it a lemon and the caller did not `force` it. Returning it
    drops the cordon annotations with the cordon, so a later cordon by a person is not mistaken for
    trainguard's, and the storm guard no longer counts it; the fault stays in the node's history."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name", "?"))
    annotations: dict[str, str] = meta.get("annotations") or {}
    spec = node.get("spec") or {}
    cordoned = bool(spec.get("unschedulable"))
    taints: list[dict[str, Any]] = spec.get("taints") or []
    faulty = [t for t in taints if t.get("key") == FAULTY_TAINT]

    if CORDONED_BY not in annotations:
        if not cordoned and not faulty and UNCORDONED_BY in annotations:
            return Decision(
                None,
                f"node {name} is already back in service (returned by {annotations[UNCORDONED_BY]} "
                f"at {_when(annotations.get(UNCORDONED_AT))})",
            )
        if cordoned:
            raise Refused(
                f"node {name} was cordoned by someone other than trainguard (it has no {CORDONED_BY} "
                f"annotation): left as it is; if it is yours to return, run `kubectl uncordon {name}`"
                + (f" and `kubectl taint nodes {name} {FAULTY_TAINT}-`" if faulty else "")
            )
        if faulty:
            raise Refused(
                f"node {name} is not cordoned by trainguard but carries the {FAULTY_TAINT} taint; "
                f"remove it with `kubectl taint nodes {name} {FAULTY_TAINT}-` once the node is repaired"
            )
        raise Refused(f"node {name} is not cordoned by trainguard: nothing to return")

    record = annotations[CORDONED_BY]
    history = lemon.history_of(node)
    if lemon.is_lemon(node) and not force:
        raise Refused(
            f"node {name} is a lemon ({annotations.get(LEMON_REASON) or 'labelled ' + LEMON_LABEL + '=true'}): "
            f"its faults: {lemon.describe(history)}. It is listed for repair (`trainguard nodes --lemons`); "
            f"repair it, or return it anyway with `trainguard uncordon {name} --force`"
        )
    was = f"cordoned by trainguard ({record}) at {_when(annotations.get(CORDONED_AT))}"
    if annotations.get(CORDON_REASON):
        was += f" for {annotations[CORDON_REASON]}"
    new_annotations: dict[str, str | None] = {
        CORDONED_AT: None,
        CORDONED_BY: None,
        CORDON_REASON: None,
        UNCORDONED_BY: by,
        UNCORDONED_AT: str(int(now)),
        UNCORDON_REASON: reason[:1024] if reason else None,
    }
    if history != lemon.recorded(node):  # a cordon made before the history: its fault is kept
        new_annotations[FAULT_HISTORY] = lemon.encode(history)
    patch: dict[str, Any] = {
        "metadata": {"resourceVersion": meta.get("resourceVersion"), "annotations": new_annotations},
        "spec": {"unschedulable": None},
    }
    actions = ["made schedulable" if cordoned else "was already schedulable"]
    if faulty:
        kept = [t for t in taints if t.get("key") != FAULTY_TAINT]
        patch["spec"]["taints"] = kept or None
        actions.append(f"removed the {FAULTY_TAINT} taint")
    message = f"node {name} returned to service by {by}: {', '.join(actions)}; it was {was}"
    if lemon.is_lemon(node):
        message += (
            f"; forced: it is a lemon ({annotations.get(LEMON_REASON) or LEMON_LABEL}), and stays labelled, out"
            " of the spare pool and listed for repair until its faults age out"
        )
    if reason:
        message += f"; reason: {reason}"
    return Decision(patch, message)


def event(node: dict[str, Any], message: str, by: str, now: float) -> dict[str, Any]:
    """A core/v1 Event about the node, in `default` where cluster-scoped objects' Events go."""
    meta = node.get("metadata") or {}
    stamp = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta.get('name', 'node')}.{secrets.token_hex(8)}", "namespace": EVENT_NAMESPACE},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": meta.get("name"), "uid": meta.get("uid")},
        "reason": EVENT_REASON,
        "message": message[:1024],
        "type": "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": by[:128],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }  # fmt: skip


@dataclass(frozen=True)
class Result:
    message: str
    changed: bool
    event_error: str | None = None
    """Why the Event could not be posted (the annotations, the main record, were written)."""


class NodeAPI(Protocol):
    """kube.Kube's node and Event calls."""

    def read_node(self, name: str) -> dict[str, Any]: ...

    def patch_node(self, name: str, patch: dict[str, Any]) -> None: ...

    def create_event(self, namespace: str, event: dict[str, Any], timeout: float | None = None) -> None: ...


def uncordon(
    kube: NodeAPI,
    node: str,
    by: str,
    *,
    reason: str = "",
    force: bool = False,
    clock: Callable[[], float] = time.time,
) -> Result:
    """Return `node` to service if trainguard cordoned it; raises Refused otherwise (or when it does not
    exist, or is a lemon and not `force`d). Idempotent: a node already returned reports so and changes
    nothing."""

    def attempt() -> tuple[Decision, dict[str, Any], float]:
        try:
            live = kube.read_node(node)
        except ApiError as exc:
            if is_not_found(exc):
                raise Refused(f"node {node} does not exist") from None
            raise
        now = clock()
        decision = decide(live, by, now, reason, force=force)
        if decision.patch is not None:
            kube.patch_node(node, decision.patch)  # conditional on the version read: a 409 reads again
        return decision, live, now

    decision, live, now = on_conflict(attempt)
    if decision.patch is None:
        return Result(decision.message, changed=False)
    try:
        kube.create_event(EVENT_NAMESPACE, event(live, decision.message, by, now))
    except ApiError as exc:
        return Result(decision.message, changed=True, event_error=f"HTTP {exc.status} {exc.reason}")
    return Result(decision.message, changed=True)
