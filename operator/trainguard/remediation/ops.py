"""What a plan is carried out with, as the executor and the planner see it: `ClusterOps`, the protocol
the edge (remediation/cluster.py) implements and tests fake, and the address of a callable sidecar."""

from __future__ import annotations

import ipaddress
from typing import Any, NamedTuple, Protocol

from trainguard.api.common import LabelSelector
from trainguard.api.monitor import WorkloadRef
from trainguard.kube.objects import is_terminating
from trainguard.kube.workloads import Workload


class Sidecar(NamedTuple):
    pod: str
    node: str
    base_url: str
    """http://<podIP>:<port>, the sidecar's TCP server (control needs the bearer token there)."""


def _url_host(ip: str) -> str:
    try:
        return f"[{ip}]" if ipaddress.ip_address(ip).version == 6 else ip
    except ValueError:
        return ip


def callable_sidecars(pods: list[dict[str, Any]], port: int) -> list[Sidecar]:
    """The Running, not terminating pods with an IP: their sidecars can be called."""
    out = []
    for pod in pods:
        status = pod.get("status") or {}
        ip = status.get("podIP")
        if status.get("phase") != "Running" or not ip or is_terminating(pod):
            continue
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        out.append(Sidecar(str(pod["metadata"]["name"]), node, f"http://{_url_host(ip)}:{port}"))
    return sorted(out)


class Refused(Exception):
    """The API refused a step's write for a reason a person must look at (a PodDisruptionBudget, a Job
    that is not the JobSet's); the message says which."""


class ClusterOps(Protocol):
    def cordon(self, node: str, reason: str, record_id: str) -> str:
        """Mark the node unschedulable with who, when and why; returns what was done."""
        ...

    def taint(self, node: str, reason: str) -> str:
        """Add trainguard.io/faulty=<reason>:NoSchedule unless present; returns what was done."""
        ...

    def cordon_history(self) -> list[tuple[str, float]]: ...

    def gpu_node_count(self) -> int: ...

    def spares(self) -> list[str]: ...

    def held_cordons(self) -> list[str]: ...

    def pools(self, label: str) -> list[tuple[str, str, bool]]: ...

    def gang_pods(self, namespace: str, selector: LabelSelector) -> list[dict[str, Any]]: ...

    def delete_pods(self, namespace: str, names: list[str]) -> list[str]:
        """Delete pods; returns the names actually deleted (a pod already gone is fine)."""
        ...

    def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """Delete that incarnation of the pod with its own grace period; False when it is gone or
        replaced."""
        ...

    def annotate_workload(
        self, namespace: str, api_version: str, kind: str, name: str, annotations: dict[str, str | None]
    ) -> None: ...

    def sidecars(self, namespace: str, selector: LabelSelector, port: int) -> list[Sidecar]: ...

    def control(self, base_url: str, token: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def read_control(self, base_url: str, token: str) -> dict[str, Any]: ...

    def read_hardware(self, base_url: str, token: str) -> dict[str, Any]:
        """The GPU faults a sidecar saw itself (exporter: GET /v1/hardware)."""
        ...

    def job_nodes(self, namespace: str, selector: LabelSelector) -> set[str]:
        """Nodes hosting a live pod of the selector (the pod cache)."""
        ...

    def unready_nodes(self) -> set[str]: ...

    # ---- through the workload's owner ----

    def workload(self, namespace: str, ref: WorkloadRef, selector: LabelSelector) -> Workload:
        """The monitor's workload owner resolved from the caches (kube/workloads.py)."""
        ...

    def fail_pod(self, namespace: str, name: str, uid: str, message: str) -> bool:
        """Mark the pod (that uid) Failed with DisruptionTarget=True, as PodGC and JobSet's pod controller
        do before deleting: its Job's podFailurePolicy can Ignore it. False when it is gone or replaced."""
        ...

    def force_delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """Delete the pod (that uid) with grace period 0: a dead node's kubelet never confirms it. False
        when it is gone or replaced."""
        ...

    def evict_pod(self, namespace: str, name: str, uid: str, grace_s: int) -> bool:
        """policy/v1 Eviction of the pod (that uid); False when it is gone or replaced. Raises Refused
        when a PodDisruptionBudget forbids it now."""
        ...

    def delete_child_job(self, namespace: str, name: str, uid: str, owner_uid: str) -> bool:
        """Delete that incarnation of a JobSet's child Job (Background), after checking that its
        controller ownerReference is the JobSet `owner_uid`; False when it is gone. Raises Refused when
        the Job is not that JobSet's."""
        ...
