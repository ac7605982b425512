"""The fake GPU nodes every e2e test shares (the local control plane's three, or those registered on a
cluster named by TRAINGUARD_E2E_KUBECONFIG), and returning them as a test found them."""

from __future__ import annotations

from collections.abc import Iterable

from kubernetes import client

from trainguard.catalog.kubernetes import CORDON_REASON, CORDONED_AT, CORDONED_BY, FAULTY_TAINT, SPARE_LABEL
from trainguard.remediation.uncordon import UNCORDON_REASON, UNCORDONED_AT, UNCORDONED_BY

NODES = ("gpu-node-0", "gpu-node-1", "gpu-node-2")
OTHER_TAINT = {"key": "example.com/maintenance", "value": "planned", "effect": "PreferNoSchedule"}
"""A taint that is not trainguard's, which its cordons and uncordons must keep."""
ANNOTATIONS = (CORDONED_AT, CORDONED_BY, CORDON_REASON, UNCORDONED_AT, UNCORDONED_BY, UNCORDON_REASON)
"""What trainguard's cordon and `trainguard uncordon` write on a node."""


def restore(core: client.CoreV1Api, names: Iterable[str] = NODES) -> None:
    """Uncordon, and take off trainguard's taint, OTHER_TAINT, the spare label and the cordon and
    uncordon annotations: what the tests put on the shared nodes."""
    for name in names:
        node = core.read_node(name)
        keep = [
            t.to_dict() for t in node.spec.taints or [] if t.key not in (FAULTY_TAINT, OTHER_TAINT["key"])
        ]
        keep = [{k: v for k, v in t.items() if v is not None} for t in keep]
        core.patch_node(
            name,
            {
                "metadata": {"annotations": dict.fromkeys(ANNOTATIONS), "labels": {SPARE_LABEL: None}},
                "spec": {"unschedulable": None, "taints": keep or None},
            },
            _content_type="application/merge-patch+json",
        )
