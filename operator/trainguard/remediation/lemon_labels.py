"""The leader's pass that keeps every node's lemon label, reason and spare taint current
(remediation/lemon.py decides): a fault ages out of the window, the spare label is put on a lemon, or
the platform changes its threshold, and the node follows within a pass. Reads the node watch cache;
writes only the nodes that change, each conditional on the version the cache holds (a 409 is left to the
next pass, by when the cache has the newer node)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainguard.catalog.kubernetes import LEMON_LABEL, LEMON_REASON
from trainguard.kube.errors import ApiError, is_conflict, is_not_found
from trainguard.remediation.lemon import LemonPolicy, node_patch

log = logging.getLogger("trainguard.remediation")


class NodeReads(Protocol):
    def nodes(self) -> list[dict[str, Any]]: ...


class NodePatches(Protocol):
    def patch_node(self, name: str, patch: dict[str, Any]) -> None: ...


@dataclass
class LemonLabels:
    reads: NodeReads
    kube: NodePatches
    policy: LemonPolicy
    leader: Callable[[], bool]
    clock: Callable[[], float] = field(default=time.time)

    def run(self) -> int:
        """Patch every node whose label, reason or taint is behind its history; how many were patched."""
        if not self.leader():
            return 0
        now, done = self.clock(), 0
        for node in self.reads.nodes():
            patch = node_patch(node, now, self.policy)
            if patch is None:
                continue
            name = str(node["metadata"]["name"])
            try:
                self.kube.patch_node(name, patch)
            except ApiError as exc:
                if is_conflict(exc) or is_not_found(exc):
                    continue  # changed or gone since the cache saw it: the next pass sees it again
                raise
            labels = (patch.get("metadata") or {}).get("labels") or {}
            if LEMON_LABEL in labels:
                reason = ((patch.get("metadata") or {}).get("annotations") or {}).get(LEMON_REASON)
                log.warning("node %s %s", name, f"is a lemon: {reason}" if labels[LEMON_LABEL] else
                            "is no longer a lemon: its faults aged out of the window")  # fmt: skip
            done += 1
        return done
