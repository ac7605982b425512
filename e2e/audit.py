"""What the operator did to pods and nodes, as the apiserver recorded it: the local control plane audits
the operator ServiceAccount's pod deletions and node writes (e2e/controlplane/local.py's AUDIT_POLICY),
so a test counts each effect of a remediation where it happened, not from what the operator says."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

OPERATOR_USER = "system:serviceaccount:trainguard-system:trainguard-operator"


class Audit:
    """The audit log from a mark on (`since`: the events written before it are not counted)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.since = len(self._lines())

    def _lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def operator_events(self, verb: str, resource: str) -> list[dict[str, Any]]:
        out = []
        for line in self._lines()[self.since :]:
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if (
                event.get("verb") == verb
                and ref.get("resource") == resource
                and not ref.get("subresource")
                and (event.get("user") or {}).get("username") == OPERATOR_USER
            ):
                out.append(event)
        return out

    def pod_deletions(self, namespace: str) -> Counter[str]:
        """How many times the operator asked to delete each pod of `namespace` (whatever the answer)."""
        return Counter(
            e["objectRef"]["name"]
            for e in self.operator_events("delete", "pods")
            if e["objectRef"].get("namespace") == namespace
        )

    def cordons(self, node: str) -> int:
        """The operator's writes that made `node` unschedulable and were applied."""
        return sum(
            1
            for e in self.operator_events("patch", "nodes")
            if e["objectRef"].get("name") == node
            and ((e.get("requestObject") or {}).get("spec") or {}).get("unschedulable") is True
            and (e.get("responseStatus") or {}).get("code") == 200
        )
