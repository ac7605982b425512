"""Workload owners as their controllers write them (JobSet v0.11.1, Trainer v2.2.0, training-operator
v1.9.3, Kueue v0.17.0, batch/v1): the objects and the labels on their pods and child Jobs, for the
tests of kube/workloads.py and of what reads it."""

from __future__ import annotations

from typing import Any

NS = "ml"
Obj = dict[str, Any]


def meta(name: str, uid: str, labels: dict[str, str] | None = None, owner: str = "", **more: Any) -> Obj:
    out: Obj = {"name": name, "namespace": NS, "uid": uid, "labels": labels or {},
                "creationTimestamp": "2023-11-14T22:00:00Z", **more}  # fmt: skip
    if owner:
        out["ownerReferences"] = [{"uid": owner, "controller": True, "kind": "x", "name": "x"}]
    return out


def job(
    name: str = "llama", uid: str = "job-uid", *, backoff: int | None = None, failed: int = 0, **spec: Any
) -> Obj:
    body: Obj = {"parallelism": 2, "completions": 2, **spec}
    if backoff is not None:
        body["backoffLimit"] = backoff
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(name, uid), "spec": body,
            "status": {"failed": failed} if failed else {}}  # fmt: skip


def jobset(
    name: str = "llama",
    uid: str = "js-uid",
    *,
    max_restarts: int | None = 2,
    counted: int = 0,
    restarts: int = 0,
    owner: str = "",
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> Obj:
    body: Obj = {"replicatedJobs": [{"name": "node", "replicas": 2}], **spec}
    if max_restarts is not None:
        body["failurePolicy"] = {"maxRestarts": max_restarts}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": meta(name, uid, labels, owner), "spec": body,
            "status": {"restarts": restarts, "restartsCountTowardsMax": counted}}  # fmt: skip


def trainjob(
    name: str = "llama", uid: str = "tj-uid", labels: dict[str, str] | None = None, **spec: Any
) -> Obj:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": meta(name, uid, labels), "spec": {"runtimeRef": {"name": "torch-distributed"}, **spec}}  # fmt: skip


def pytorchjob(name: str = "llama", uid: str = "pt-uid", backoff: int | None = None) -> Obj:
    run: Obj = {} if backoff is None else {"backoffLimit": backoff}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta(name, uid),
            "spec": {"runPolicy": run, "pytorchReplicaSpecs": {}}}  # fmt: skip


def child_job(
    jobset_name: str = "llama",
    index: int = 0,
    *,
    rjob: str = "node",
    attempt: int = 0,
    jobset_uid: str = "js-uid",
    parallelism: int = 1,
    backoff: int = 0,
    failed: int = 0,
    ignore_disruption: bool = False,
) -> Obj:
    """A JobSet's child Job `<jobset>-<rjob>-<index>`, of restart attempt `attempt`."""
    name = f"{jobset_name}-{rjob}-{index}"
    labels = {"jobset.sigs.k8s.io/jobset-name": jobset_name, "jobset.sigs.k8s.io/restart-attempt": str(attempt),
              "jobset.sigs.k8s.io/replicatedjob-name": rjob, "jobset.sigs.k8s.io/job-index": str(index)}  # fmt: skip
    spec: Obj = {"parallelism": parallelism, "completions": parallelism, "backoffLimit": backoff}
    if ignore_disruption:
        spec["podFailurePolicy"] = {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}  # fmt: skip
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": meta(name, f"{name}-a{attempt}-uid", labels, jobset_uid), "spec": spec,
            "status": {"failed": failed} if failed else {}}  # fmt: skip


def pod(
    name: str,
    node: str = "gpu-a",
    *,
    labels: dict[str, str] | None = None,
    owner: str = "",
    phase: str = "Running",
    deleting: bool = False,
    restarts: int = 0,
    **annotations: str,
) -> Obj:
    more: Obj = {"annotations": annotations} if annotations else {}
    if deleting:
        more["deletionTimestamp"] = "2023-11-14T22:10:00Z"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": meta(name, f"{name}-uid", {"app": "llama", **(labels or {})}, owner, **more),
            "spec": {"nodeName": node},
            "status": {"phase": phase, "containerStatuses": [{"name": "trainer", "restartCount": restarts}]}}  # fmt: skip


def job_pod(name: str, node: str = "gpu-a", job_uid: str = "job-uid", **kw: Any) -> Obj:
    labels = {"batch.kubernetes.io/controller-uid": job_uid, **kw.pop("labels", {})}
    return pod(name, node, labels=labels, owner=job_uid, **kw)


def jobset_pod(child: Obj, index: int = 0, node: str = "gpu-a", suffix: str = "", **kw: Any) -> Obj:
    """Pod `index` of the JobSet child Job `child` (named `<job>-<index><suffix>`), labelled as JobSet
    labels it."""
    labels = {k: v for k, v in child["metadata"]["labels"].items()}
    labels["batch.kubernetes.io/controller-uid"] = child["metadata"]["uid"]
    labels.update(kw.pop("labels", {}))
    name = f"{child['metadata']['name']}-{index}{suffix}"
    return pod(name, node, labels=labels, owner=child["metadata"]["uid"], **kw)


def kueue_workload(owner_uid: str, name: str = "jobset-llama-1a2b3", **conditions: str) -> Obj:
    """A Kueue Workload of the owner `owner_uid`, with conditions type -> status or status:reason."""
    conds = []
    for type_, value in conditions.items():
        status, _, reason = value.partition(":")
        conds.append({"type": type_, "status": status, "reason": reason or type_})
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": meta(name, f"{name}-uid", {"kueue.x-k8s.io/job-uid": owner_uid}),
            "spec": {"queueName": "team-a"}, "status": {"conditions": conds}}  # fmt: skip
