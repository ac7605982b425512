"""Pure readings of Kubernetes objects as the API's JSON (plain dicts): when a pod was made, whether it
is going, whether a node is Ready and how many GPUs it has; the slimming a watch cache applies before
it keeps an object; and what the node caches say of their connection (Hearing). Standard library only, so the pure cores of the rooms above may use it."""

from __future__ import annotations

import datetime as dt
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"

_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$"
)
_SUFFIX = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60, "n": Decimal("1e-9"), "u": Decimal("1e-6"),
    "m": Decimal("1e-3"), "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}  # fmt: skip


def quantity(text: str) -> Decimal:
    """A resource quantity ("8", "500m", "1Gi", "1e3") as a number; ValueError when it is not one."""
    m = _QUANTITY.match(str(text).strip())
    if m is None:
        raise ValueError(f"not a quantity: {text!r}")
    number, exponent, suffix = m.groups()
    try:
        value = Decimal(number + (exponent or ""))
    except InvalidOperation:
        raise ValueError(f"not a quantity: {text!r}") from None
    return value * _SUFFIX[suffix] if suffix else value


def labels_of(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def creation_seconds(obj: dict[str, Any]) -> float:
    """metadata.creationTimestamp as unix seconds (the apiserver keeps whole seconds)."""
    raw = (obj.get("metadata") or {}).get("creationTimestamp")
    if not raw:
        return 0.0
    return dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()


def is_terminating(obj: dict[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def is_ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def gpus(node: dict[str, Any]) -> float:
    """The node's nvidia.com/gpu capacity (0 when it has none or the quantity is unreadable)."""
    capacity = (node.get("status") or {}).get("capacity") or {}
    try:
        return float(quantity(capacity.get(GPU_RESOURCE, "0")))
    except ValueError:
        return 0.0


def new_pods(pods: Sequence[dict[str, Any]], created_after: float) -> list[dict[str, Any]]:
    """The live pods created at or after `created_after` (whole seconds: the second it falls in counts
    as after), neither being deleted nor finished."""
    floor = math.floor(created_after)
    return [
        p
        for p in pods
        if not is_terminating(p)
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        and creation_seconds(p) >= floor
    ]


def new_pods_placement(pods: list[dict[str, Any]], created_after: float) -> dict[str, str] | None:
    """{pod: node} of the live pods created at or after `created_after`, or None while any of them is
    unscheduled or there are none. creationTimestamp has whole seconds, so the second `created_after`
    falls in counts as after; pods being deleted (the old gang) are left out, and so are pods that
    finished: a replacement that failed before it was ever scheduled (Kueue's TAS node controller fails
    one its ungater sent to the faulty node, condition TerminatedByKueue) is not one still to be placed,
    and its owner's next pod is."""
    fresh = new_pods(pods, created_after)
    if not fresh:
        return None
    placed = {str(p["metadata"]["name"]): str((p.get("spec") or {}).get("nodeName") or "") for p in fresh}
    return None if any(not node for node in placed.values()) else placed


def taints_with(
    taints: list[dict[str, Any]], key: str, value: str, effect: str
) -> list[dict[str, Any]] | None:
    """The node's taints with ours added, or None when a taint of that key and effect is already there
    (whatever its value: the first reason stands)."""
    if any(t.get("key") == key and t.get("effect") == effect for t in taints):
        return None
    return [*taints, {"key": key, "value": value, "effect": effect}]


def label_value(text: str) -> str:
    """A taint value from free text: at most 63 of [A-Za-z0-9_.-], starting and ending alphanumeric."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "-" for c in text)[:63]
    return cleaned.strip("-_.") or "fault"


# ---- what a watch cache keeps ----


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    """metadata without managedFields (often half of a small object) or the last-applied copy."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    annotations = meta.get("annotations")
    if annotations and "kubectl.kubernetes.io/last-applied-configuration" in annotations:
        meta["annotations"] = {
            k: v for k, v in annotations.items() if k != "kubectl.kubernetes.io/last-applied-configuration"
        }
    return meta


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": _meta(obj)}


_CONTAINER_KEYS = ("name", "image", "ports", "restartPolicy")
_POD_STATUS_KEYS = ("phase", "reason", "message", "podIP", "startTime", "conditions")
_CONTAINER_STATUS_KEYS = ("name", "ready", "started", "restartCount", "state", "lastState")
INTERNED_MAX = 64
"""Strings up to this length are interned in a cached pod or node: its keys, and the values thousands
of objects repeat (a namespace, a label, "Running", "True", a node's name)."""


def interned(value: Any) -> Any:
    """`value` rebuilt with its keys and short strings interned: json.loads makes new strings for every
    object it decodes, and a cache of 16,000 pods then holds 16,000 copies of "containerStatuses" and
    "lastTransitionTime". Shared, a cached pod takes about half the memory."""
    if isinstance(value, dict):
        return {sys.intern(k) if isinstance(k, str) else k: interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [interned(v) for v in value]
    if isinstance(value, str) and len(value) <= INTERNED_MAX:
        return sys.intern(value)
    return value


def _pod_status(status: dict[str, Any]) -> dict[str, Any]:
    """What the operator reads of a pod's status: its phase and reason, IP, start, conditions, and each
    container's readiness, restarts and states (images, ids and mounts are dropped)."""
    kept = {k: status[k] for k in _POD_STATUS_KEYS if k in status}
    for key in ("initContainerStatuses", "containerStatuses"):
        if key in status:
            kept[key] = [{k: c[k] for k in _CONTAINER_STATUS_KEYS if k in c} for c in status[key] or []]
    return kept


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """What the operator reads of a pod: its identity, owner, node, ServiceAccount, containers' names and
    ports, status (_pod_status), interned. Environment, volumes and resources, the bulk of a training
    pod's spec, are dropped."""
    spec = pod.get("spec") or {}
    kept: dict[str, Any] = {
        k: spec[k] for k in ("nodeName", "restartPolicy", "serviceAccountName") if k in spec
    }
    for key in ("initContainers", "containers"):
        if key in spec:
            kept[key] = [{k: c[k] for k in _CONTAINER_KEYS if k in c} for c in spec[key] or []]
    return interned({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(pod),
        "spec": kept,
        "status": _pod_status(pod.get("status") or {}),
    })  # fmt: skip


def slim_node(node: dict[str, Any]) -> dict[str, Any]:
    """A node without its image list (hundreds of entries on a GPU node) and daemon endpoints."""
    status = {
        k: v for k, v in (node.get("status") or {}).items() if k in ("conditions", "capacity", "allocatable")
    }
    return interned({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _meta(node),
        "spec": node.get("spec") or {},
        "status": status,
    })  # fmt: skip


@dataclass(frozen=True)
class Hearing:
    """What the node and Lease caches say about their connection to the API at one look."""

    synced: bool
    """Both have listed."""
    leases: int
    """How many Leases the Lease cache holds."""
    leases_heard_s: float
    """Seconds since the Lease cache last heard from the API."""
    breaks: int
    """Lists, errors and dropped watches of both caches so far: it grows at every interruption."""
