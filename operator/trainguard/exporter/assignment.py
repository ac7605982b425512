"""Which GPUs of the node are this pod's: a sidecar on a node shared by two jobs must export only
its own, or each job is paged for the other's GPUs. Pure: devices and hints in, an answer out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainguard.exporter.readings import GPUDevice

UNKNOWN_VISIBLE = frozenset({"", "all", "none", "void"})
"""NVIDIA_VISIBLE_DEVICES values that name no particular GPU."""


@dataclass(frozen=True)
class Assignment:
    indices: frozenset[int] | None
    """NVML indices of this pod's GPUs; None while they are not known (export no GPU series)."""
    source: str
    """flag, sdk, whole-node, all (a backend that needs no filter) or unknown."""
    reason: str = ""
    """Why the set is unknown, or what in the hint matched no GPU."""


def parse_ids(text: str | None) -> list[str] | None:
    """A comma list of UUIDs or indices; None for an absent or non-specific value."""
    if text is None or text.strip().lower() in UNKNOWN_VISIBLE:
        return None
    ids = [x.strip() for x in text.split(",") if x.strip()]
    return ids or None


def match(ids: Sequence[str], devices: Sequence[GPUDevice]) -> tuple[frozenset[int], list[str]]:
    """NVML indices of `ids` (an index, or a UUID compared case-insensitively) and the ids matching none."""
    by_uuid = {d.uuid.lower(): d.index for d in devices if d.uuid}
    indices = {d.index for d in devices}
    found: set[int] = set()
    unmatched: list[str] = []
    for x in ids:
        if x.isdigit() and int(x) in indices:
            found.add(int(x))
        elif x.lower() in by_uuid:
            found.add(by_uuid[x.lower()])
        else:
            unmatched.append(x)
    return frozenset(found), unmatched


def resolve(
    devices: Sequence[GPUDevice],
    *,
    flag: str | None = None,
    visible: str | None = None,
    gpus_per_pod: int | None = None,
) -> Assignment:
    """The flag wins, then the training container's NVIDIA_VISIBLE_DEVICES (from the SDK's hello),
    then a pod that asked for as many GPUs as the node has owns them all."""
    if not devices:
        return Assignment(None, "unknown", "no GPU enumerated")
    for source, text in (("flag", flag), ("sdk", visible)):
        ids = parse_ids(text)
        if ids is None:
            continue
        found, unmatched = match(ids, devices)
        note = f"no GPU of this node matches {', '.join(unmatched)}" if unmatched else ""
        if found:
            return Assignment(found, source, note)
        return Assignment(None, "unknown", f"{source}: {note}")
    if gpus_per_pod is not None and gpus_per_pod == len(devices):
        return Assignment(frozenset(d.index for d in devices), "whole-node")
    hint = (
        f"--gpus-per-pod {gpus_per_pod} is not the node's {len(devices)} GPUs"
        if gpus_per_pod is not None
        else "no --gpu-ids and no --gpus-per-pod"
    )
    return Assignment(None, "unknown", f"{hint}, and the SDK has not reported NVIDIA_VISIBLE_DEVICES")
