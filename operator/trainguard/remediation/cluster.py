"""The remediation edge: what a plan is decided on and carried out with, over the Kubernetes layer
(reads from the watch caches, writes through `kube.Kube`) and the sidecars' control endpoint.

Every write is idempotent, so a step redone after an operator restart changes nothing the first run
already changed. `Cluster` implements remediation/ops.ClusterOps, the protocol the executor and the
planner depend on; tests use a fake that behaves the same.

RBAC the operator needs for this module: nodes get, list, watch, patch; pods list, watch, delete;
pods/eviction create and pods/status patch (a pod replaced through its owner); jobs.batch delete (a
JobSet's child Job, checked by ownerReference first); jobs.batch, jobsets.jobset.x-k8s.io,
trainjobs.trainer.kubeflow.org, pytorchjobs.kubeflow.org patch (the resume-from annotation) and list,
watch (with workloads.kueue.x-k8s.io: the owner's caches).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from trainguard.api.common import LabelSelector
from trainguard.api.monitor import WorkloadRef
from trainguard.catalog.kubernetes import CORDON_REASON, CORDONED_AT, CORDONED_BY, FAULTY_TAINT, SPARE_LABEL
from trainguard.kube.errors import ApiError, is_conflict, on_conflict
from trainguard.kube.objects import gpus, is_ready, label_value, taints_with
from trainguard.kube.workloads import DISRUPTION_TARGET, Workload, controlled_by
from trainguard.remediation import lemon
from trainguard.remediation.lemon import LemonPolicy
from trainguard.remediation.ops import Refused, Sidecar, callable_sidecars
from trainguard.remediation.sidecars import SidecarControl


class ClusterReads(Protocol):
    """The watch caches' pods, nodes, Jobs and workload owners (kube.ClusterCache)."""

    def pods(self, namespace: str, selector: LabelSelector) -> list[dict[str, Any]]: ...

    def nodes(self) -> list[dict[str, Any]]: ...

    def job(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def workload(self, namespace: str, ref: WorkloadRef, selector: LabelSelector) -> Workload: ...


class NodeWrites(Protocol):
    """kube.Kube's node, pod and workload writes."""

    def read_node(self, name: str) -> dict[str, Any]: ...

    def patch_node(self, name: str, patch: dict[str, Any]) -> None: ...

    def annotate_workload(
        self, namespace: str, api_version: str, kind: str, name: str, annotations: dict[str, str | None]
    ) -> None: ...

    def delete_pod(
        self, namespace: str, name: str, *, uid: str | None = None, grace_period_s: int | None = None
    ) -> bool: ...

    def evict_pod(self, namespace: str, name: str, *, uid: str, grace_period_s: int) -> bool: ...

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None: ...

    def delete_job(self, namespace: str, name: str, *, uid: str) -> bool: ...


NODE_DOWN_REASON = "TrainguardNodeDown"
"""The reason of the DisruptionTarget condition trainguard sets on a pod of a node it judged down."""


def failed_status(message: str, now: str) -> dict[str, Any]:
    """The status patch that marks a dead node's pod Failed with DisruptionTarget=True, as PodGC and
    JobSet's pod controller do, so that a Job's podFailurePolicy can Ignore it."""
    condition = {"type": DISRUPTION_TARGET, "status": "True", "reason": NODE_DOWN_REASON,
                 "message": message[:1024], "lastTransitionTime": now}  # fmt: skip
    return {"status": {"phase": "Failed", "conditions": [condition]}}


# ---- pure readings of the node list ----


def cordon_history(nodes: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """(node, unix seconds) of every cordon trainguard's annotations still show, oldest first."""
    out: list[tuple[str, float]] = []
    for n in nodes:
        annotations = (n.get("metadata") or {}).get("annotations") or {}
        try:
            out.append((str(n["metadata"]["name"]), float(str(annotations[CORDONED_AT]))))
        except (KeyError, ValueError):
            continue
    return sorted(out, key=lambda item: item[1])


def held_cordons(nodes: list[dict[str, Any]]) -> list[str]:
    """Nodes trainguard holds cordoned now: its annotation on a node still unschedulable (a node someone
    uncordoned by hand is no longer held, whatever its annotations say)."""
    return sorted(
        str(n["metadata"]["name"])
        for n in nodes
        if CORDONED_BY in ((n.get("metadata") or {}).get("annotations") or {})
        and (n.get("spec") or {}).get("unschedulable")
    )


def pools(nodes: list[dict[str, Any]], label: str) -> list[tuple[str, str, bool]]:
    """(node, pool, ready) of every GPU node: its pool is the value of `label` ("" without it, or when no
    label is named); ready is its Ready condition True (False and Unknown look down)."""
    return sorted(
        (
            str(n["metadata"]["name"]),
            ((n.get("metadata") or {}).get("labels") or {}).get(label, "") if label else "",
            is_ready(n),
        )
        for n in nodes
        if gpus(n) > 0
    )


def gpu_node_count(nodes: list[dict[str, Any]]) -> int:
    return sum(1 for n in nodes if gpus(n) > 0)


def spares(nodes: list[dict[str, Any]]) -> list[str]:
    """Spare nodes a pod could be placed on now: labelled, Ready, not cordoned and not a lemon."""
    return sorted(
        str(n["metadata"]["name"])
        for n in nodes
        if ((n.get("metadata") or {}).get("labels") or {}).get(SPARE_LABEL) == "true"
        and not (n.get("spec") or {}).get("unschedulable")
        and is_ready(n)
        and not lemon.is_lemon(n)
    )


def job_nodes(pods: list[dict[str, Any]]) -> set[str]:
    """Nodes hosting a live pod of a job: bound, and not Succeeded or Failed. A terminating pod counts: a
    dead node's pods stay terminating until the node is gone, and that node is the one at fault."""
    return {
        str((p.get("spec") or {}).get("nodeName"))
        for p in pods
        if (p.get("spec") or {}).get("nodeName")
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    }


def unready_nodes(nodes: list[dict[str, Any]]) -> set[str]:
    return {str(n["metadata"]["name"]) for n in nodes if not is_ready(n)}


class Cluster:
    """ClusterOps over the watch caches, the Kubernetes writes and the sidecars' control endpoint."""

    def __init__(
        self,
        kube: NodeWrites,
        reads: ClusterReads,
        control: SidecarControl | None = None,
        clock: Callable[[], float] = time.time,
        lemons: LemonPolicy | None = None,
    ) -> None:
        self.kube = kube
        self.lemons = lemons or LemonPolicy()
        """The platform's lemon threshold: a cordon that reaches it labels the node at once."""
        self.reads = reads
        self.control_client = control or SidecarControl()
        self.clock = clock

    # ---- nodes ----

    def cordon(self, node: str, reason: str, record_id: str) -> str:
        """Unschedulable, annotated with when, by which record and why. Idempotent: a node this record
        (or another trainguard record) already cordoned keeps its first annotations, so a redo does not
        move cordoned-at and the storm guard counts it once. A node someone else cordoned is left as
        it is: that cordon is theirs, and `trainguard uncordon` must not undo it. The fault joins the
        node's history (remediation/lemon.py) in the same write, once per record. Read and written with
        the resourceVersion read (a fresh GET, not the cache: the write is conditional on it)."""

        def attempt() -> str:
            live = self.kube.read_node(node)
            meta = live.get("metadata") or {}
            annotations = meta.get("annotations") or {}
            cordoned = bool((live.get("spec") or {}).get("unschedulable"))
            if cordoned and CORDONED_BY in annotations:
                return f"already cordoned by {annotations[CORDONED_BY]}"
            now = self.clock()
            faults = lemon.cordon_fields(live, lemon.Fault(now, reason, record_id), now, self.lemons)
            if cordoned:
                if faults:  # the fault is the node's all the same: its history keeps it
                    version = {"resourceVersion": meta.get("resourceVersion")}
                    self.kube.patch_node(node, {"metadata": {**version, **faults}})
                return "already cordoned, not by trainguard: left as is"
            annotations_patch = {
                CORDONED_AT: str(int(now)),
                CORDONED_BY: record_id,
                CORDON_REASON: reason[:1024],
            }
            metadata: dict[str, Any] = {
                "resourceVersion": meta.get("resourceVersion"),
                "annotations": {**annotations_patch, **faults.get("annotations", {})},
            }
            if "labels" in faults:
                metadata["labels"] = faults["labels"]
            self.kube.patch_node(node, {"metadata": metadata, "spec": {"unschedulable": True}})
            return "cordoned" + (" (a lemon now: it is listed for repair)" if "labels" in faults else "")

        return on_conflict(attempt)

    def taint(self, node: str, reason: str) -> str:
        """A merge patch replaces the whole taint list, so read, add ours, and write with the
        resourceVersion read: a taint another writer added meanwhile is a 409 and a fresh read, not a
        lost taint."""

        def attempt() -> str:
            live = self.kube.read_node(node)
            taints = (live.get("spec") or {}).get("taints") or []
            merged = taints_with(taints, FAULTY_TAINT, label_value(reason), "NoSchedule")
            if merged is None:
                return f"already tainted {FAULTY_TAINT}:NoSchedule"
            version = (live.get("metadata") or {}).get("resourceVersion")
            self.kube.patch_node(node, {"metadata": {"resourceVersion": version}, "spec": {"taints": merged}})
            return f"tainted {FAULTY_TAINT}={label_value(reason)}:NoSchedule"

        return on_conflict(attempt)

    def cordon_history(self) -> list[tuple[str, float]]:
        return cordon_history(self.reads.nodes())

    def gpu_node_count(self) -> int:
        return gpu_node_count(self.reads.nodes())

    def held_cordons(self) -> list[str]:
        return held_cordons(self.reads.nodes())

    def pools(self, label: str) -> list[tuple[str, str, bool]]:
        return pools(self.reads.nodes(), label)

    def spares(self) -> list[str]:
        return spares(self.reads.nodes())

    def unready_nodes(self) -> set[str]:
        return unready_nodes(self.reads.nodes())

    def job_nodes(self, namespace: str, selector: LabelSelector) -> set[str]:
        return job_nodes(self.reads.pods(namespace, selector))

    # ---- pods and workloads ----

    def gang_pods(self, namespace: str, selector: LabelSelector) -> list[dict[str, Any]]:
        return self.reads.pods(namespace, selector)

    def delete_pods(self, namespace: str, names: list[str]) -> list[str]:
        """Delete with the pods' own grace period (the kubelet stops the old ranks before the Job
        controller's replacements start on a live node); a pod already gone is not an error."""
        return [name for name in names if self.kube.delete_pod(namespace, name)]

    def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        try:
            return self.kube.delete_pod(namespace, name, uid=uid)
        except ApiError as exc:
            if is_conflict(exc):  # another pod has the name now: ours is gone
                return False
            raise

    def annotate_workload(
        self, namespace: str, api_version: str, kind: str, name: str, annotations: dict[str, str | None]
    ) -> None:
        self.kube.annotate_workload(namespace, api_version, kind, name, annotations)

    # ---- through the workload's owner ----

    def workload(self, namespace: str, ref: WorkloadRef, selector: LabelSelector) -> Workload:
        return self.reads.workload(namespace, ref, selector)

    def fail_pod(self, namespace: str, name: str, uid: str, message: str) -> bool:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        patch = failed_status(message, now)
        patch["metadata"] = {"uid": uid}  # a precondition: a pod recreated under the name is a 409
        try:
            self.kube.patch_pod_status(namespace, name, patch)
        except ApiError as exc:
            # gone, or another incarnation of the name (a uid that differs is a 409 or an invalid, 422,
            # update), or already terminal: not this pod to fail any more
            if exc.status in (404, 409, 422):
                return False
            raise
        return True

    def force_delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        try:
            return self.kube.delete_pod(namespace, name, uid=uid, grace_period_s=0)
        except ApiError as exc:
            if is_conflict(exc):  # another pod has the name now: ours is gone
                return False
            raise

    def evict_pod(self, namespace: str, name: str, uid: str, grace_s: int) -> bool:
        # the uid is checked on a fresh read first: the apiserver retries an eviction whose uid
        # precondition fails as a conflict for about 10 s before it answers 409
        live = self.kube.read_pod(namespace, name)
        if live is None or str((live.get("metadata") or {}).get("uid") or "") != uid:
            return False
        try:
            return self.kube.evict_pod(namespace, name, uid=uid, grace_period_s=grace_s)
        except ApiError as exc:
            if is_conflict(exc):
                return False
            if exc.status == 429:
                raise Refused(
                    f"the eviction of pod {namespace}/{name} was refused (429): a PodDisruptionBudget "
                    "does not allow it now"
                ) from exc
            raise

    def delete_child_job(self, namespace: str, name: str, uid: str, owner_uid: str) -> bool:
        job = self.reads.job(namespace, name)
        if job is None or str((job.get("metadata") or {}).get("uid") or "") != uid:
            return False
        if not controlled_by(job, owner_uid):
            raise Refused(f"Job {namespace}/{name} is not controlled by the JobSet: it is not deleted")
        try:
            return self.kube.delete_job(namespace, name, uid=uid)
        except ApiError as exc:
            if is_conflict(exc):
                return False
            raise

    # ---- sidecars ----

    def sidecars(self, namespace: str, selector: LabelSelector, port: int) -> list[Sidecar]:
        return callable_sidecars(self.gang_pods(namespace, selector), port)

    def control(self, base_url: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.control_client.control(base_url, token, body)

    def read_control(self, base_url: str, token: str) -> dict[str, Any]:
        return self.control_client.read_control(base_url, token)

    def read_hardware(self, base_url: str, token: str) -> dict[str, Any]:
        return self.control_client.read_hardware(base_url, token)
