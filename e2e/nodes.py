"""The fake GPU nodes every e2e test shares (the local control plane's three, or those registered on a
cluster named by TRAINGUARD_E2E_KUBECONFIG), returning them as a test found them, and stopping one's
kubelet for a while (a node death)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from kubernetes import client

from e2e.controlplane.fakekubelet import CONTROL_DIR, STOPPED, STOPPED_ACK
from tests.processes import wait_for
from trainguard.catalog.kubernetes import (
    CORDON_REASON,
    CORDONED_AT,
    CORDONED_BY,
    FAULT_HISTORY,
    FAULTY_TAINT,
    LEMON_LABEL,
    LEMON_REASON,
    SPARE_LABEL,
)
from trainguard.remediation.uncordon import UNCORDON_REASON, UNCORDONED_AT, UNCORDONED_BY

NODES = ("gpu-node-0", "gpu-node-1", "gpu-node-2")
OTHER_TAINT = {"key": "example.com/maintenance", "value": "planned", "effect": "PreferNoSchedule"}
"""A taint that is not trainguard's, which its cordons and uncordons must keep."""
ANNOTATIONS = (CORDONED_AT, CORDONED_BY, CORDON_REASON, UNCORDONED_AT, UNCORDONED_BY, UNCORDON_REASON,
               FAULT_HISTORY, LEMON_REASON)  # fmt: skip
"""What trainguard's cordon, its lemon labels and `trainguard uncordon` write on a node."""


def restore(core: client.CoreV1Api, names: Iterable[str] = NODES) -> None:
    """Uncordon, and take off trainguard's taints, OTHER_TAINT, the spare and lemon labels, the fault
    history and the cordon and uncordon annotations: what the tests put on the shared nodes."""
    for name in names:
        node = core.read_node(name)
        keep = [
            t.to_dict()
            for t in node.spec.taints or []
            if t.key not in (FAULTY_TAINT, LEMON_LABEL, OTHER_TAINT["key"])
        ]
        keep = [{k: v for k, v in t.items() if v is not None} for t in keep]
        core.patch_node(
            name,
            {
                "metadata": {
                    "annotations": dict.fromkeys(ANNOTATIONS),
                    "labels": {SPARE_LABEL: None, LEMON_LABEL: None},
                },
                "spec": {"unschedulable": None, "taints": keep or None},
            },
            _content_type="application/merge-patch+json",
        )


LIFECYCLE_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
"""What the node lifecycle controller puts on a node whose kubelet went quiet, and takes off once it is
Ready again."""


def _names(path: Path) -> set[str]:
    try:
        return {line.strip() for line in path.read_text().splitlines() if line.strip()}
    except FileNotFoundError:
        return set()


def _write_names(path: Path, names: set[str]) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text("".join(f"{n}\n" for n in sorted(names)))
    tmp.replace(path)  # the kubelet never reads half a file


def _back(core: client.CoreV1Api, name: str) -> bool:
    node = core.read_node(name)
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
    return ready and not any(t.key in LIFECYCLE_TAINTS for t in node.spec.taints or [])


@contextmanager
def kubelet_stopped(core: client.CoreV1Api, name: str, timeout: float = 60) -> Iterator[float]:
    """Stop the fake kubelet of node `name` (e2e/controlplane/fakekubelet.py: no Lease renewal, no Ready
    status, its pods left as they are) and yield the time (Unix seconds, the Lease's renewTime: the fake
    kubelet runs on this machine's clock) of its last renewal. On exit, whatever the test did, the
    kubelet is started again and the node is waited for: Ready, the node lifecycle controller's taints
    gone, then `restore`d (uncordoned, trainguard's taint taken off)."""
    node = core.read_node(name)
    folder = (node.metadata.annotations or {}).get(CONTROL_DIR)
    if not folder:
        raise RuntimeError(
            f"node {name} has no {CONTROL_DIR} annotation: its kubelet is not the fake one, or was started "
            "without --control-dir"
        )
    stopped, ack = Path(folder) / STOPPED, Path(folder) / STOPPED_ACK
    _write_names(stopped, _names(stopped) | {name})
    try:
        wait_for(f"the kubelet of {name} stopped", lambda: name in _names(ack), timeout=timeout)
        lease = client.CoordinationV1Api(core.api_client).read_namespaced_lease(name, "kube-node-lease")
        yield lease.spec.renew_time.timestamp()
    finally:
        _write_names(stopped, _names(stopped) - {name})
        wait_for(f"the kubelet of {name} back", lambda: name not in _names(ack), timeout=timeout)
        wait_for(f"{name} Ready, without the node lifecycle controller's taints", lambda: _back(core, name),
                 timeout=timeout)  # fmt: skip
        restore(core, [name])
