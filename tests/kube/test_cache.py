"""The watch caches' reads that guard a decision: a Lease cache gone quiet while it holds Leases says so
(every kubelet renews its Lease every 10 s), instead of handing out Leases that all look expired; the
monitor cache says which monitor object a name is now (the receiver's token check), or that it cannot."""

from __future__ import annotations

import time

import pytest

from tests.kube.owners import child_job, job, job_pod, jobset, jobset_pod, kueue_workload, pod
from trainguard.api.common import LabelSelector
from trainguard.api.monitor import WorkloadRef
from trainguard.kube import FIELD_MANAGER, HASH_ANNOTATION, ApiError, ClusterCache, NotSynced, Stale
from trainguard.kube.cache import (
    JOBSETS,
    KUEUE_WORKLOADS,
    LEASES_QUIET_S,
    MONITORS_QUIET_S,
    UNSERVED_RECHECK_S,
    applied_meta,
)
from trainguard.kube.watch import Resource

LLAMA = LabelSelector.model_validate({"matchLabels": {"app": "llama"}})


def filled(cache: ClusterCache, name: str, objects: list[dict]) -> None:  # type: ignore[type-arg]
    informer = cache.informers[name]
    for obj in objects:
        meta = obj["metadata"]
        informer._objects[(meta.get("namespace", ""), meta["name"])] = obj
        informer._by_namespace.setdefault(meta.get("namespace", ""), {})[meta["name"]] = obj
        informer._changes[meta.get("namespace", "")] = informer._changes.get(meta.get("namespace", ""), 0) + 1
    informer._synced.set()


def test_a_quiet_lease_cache_is_stale_and_an_empty_one_is_not() -> None:
    cache = ClusterCache(api=None)  # type: ignore[arg-type]  # not started: filled by hand
    filled(cache, "leases", [])
    assert cache.node_leases() == []
    lease = {"metadata": {"name": "gpu-0", "namespace": "kube-node-lease"}, "spec": {"renewTime": "x"}}
    filled(cache, "leases", [lease])
    assert cache.node_leases() == [lease], "just heard from"
    cache.leases_informer._heard = time.monotonic() - LEASES_QUIET_S - 1
    with pytest.raises(Stale, match="node Lease cache has heard nothing"):
        cache.node_leases()


def test_pods_are_read_by_namespace_and_selector() -> None:
    cache = ClusterCache(api=None)  # type: ignore[arg-type]
    filled(cache, "pods", [
        {"metadata": {"name": "a", "namespace": "ml", "labels": {"app": "llama"}}},
        {"metadata": {"name": "b", "namespace": "ml", "labels": {"app": "other"}}},
        {"metadata": {"name": "c", "namespace": "research", "labels": {"app": "llama"}}},
    ])  # fmt: skip
    llama = LabelSelector.model_validate({"matchLabels": {"app": "llama"}})
    assert [p["metadata"]["name"] for p in cache.pods("ml", llama)] == ["a"]
    assert cache.pods("ml", LabelSelector()) == [], "an empty selector matches nothing"


def pod_event(kind: str, name: str, namespace: str = "ml", app: str = "llama") -> dict:  # type: ignore[type-arg]
    return {"type": kind, "object": {"metadata": {"name": name, "namespace": namespace, "labels": {"app": app},
                                                  "resourceVersion": "7"}}}  # fmt: skip


def names(pods: list[dict]) -> list[str]:  # type: ignore[type-arg]
    return [p["metadata"]["name"] for p in pods]


def test_pods_are_matched_again_only_after_their_namespace_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The P0 detection asks for every monitor's pods each second: the answer is kept until an event or a
    list changes the namespace's pods, and then it is current."""
    cache = ClusterCache(api=None)  # type: ignore[arg-type]
    filled(cache, "pods", [{"metadata": {"name": "a", "namespace": "ml", "labels": {"app": "llama"}}}])
    matched: list[str] = []
    real = LabelSelector.matches
    monkeypatch.setattr(
        LabelSelector, "matches", lambda self, labels: matched.append("x") or real(self, labels)
    )
    informer = cache.pods_informer
    assert names(cache.pods("ml", LLAMA)) == ["a"]
    assert names(cache.pods("ml", LabelSelector.model_validate({"matchLabels": {"app": "llama"}}))) == ["a"]
    assert len(matched) == 1, "an equal selector, the same namespace, nothing changed: kept"
    cache.pods("ml", LLAMA).clear()  # a caller's list is its own
    informer._apply(pod_event("ADDED", "z", namespace="research"))
    assert names(cache.pods("ml", LLAMA)) == ["a"]
    assert len(matched) == 1, "another namespace's change keeps this one's answer"
    informer._apply(pod_event("ADDED", "b"))
    assert names(cache.pods("ml", LLAMA)) == ["a", "b"]
    informer._apply(pod_event("MODIFIED", "a", app="other"))
    assert names(cache.pods("ml", LLAMA)) == ["b"]
    informer._apply(pod_event("DELETED", "b"))
    assert names(cache.pods("ml", LLAMA)) == []
    assert names(cache.pods("ml", LabelSelector.model_validate({"matchLabels": {"app": "other"}}))) == ["a"]


def test_a_relist_makes_every_kept_pod_answer_stale() -> None:
    cache = ClusterCache(api=None)  # type: ignore[arg-type]
    filled(cache, "pods", [{"metadata": {"name": "a", "namespace": "ml", "labels": {"app": "llama"}}}])
    before = cache.pods_informer.version("ml")
    assert names(cache.pods("ml", LLAMA)) == ["a"]
    informer = cache.pods_informer
    informer.replace([])  # as a list anew finding none
    assert informer.version("ml") != before
    assert cache.pods("ml", LLAMA) == []


def test_the_monitor_uid_is_the_cached_monitors_or_none_and_a_cache_that_cannot_say_raises() -> None:
    cache = ClusterCache(api=None, read_timeout_s=0.01)  # type: ignore[arg-type]
    with pytest.raises(NotSynced):
        cache.monitor_uid("ml", "llama")
    filled(cache, "monitors", [{"metadata": {"name": "llama", "namespace": "ml", "uid": "u-1"}}])
    assert cache.monitor_uid("ml", "llama") == "u-1"
    assert cache.monitor_uid("ml", "other") is None
    assert cache.monitor_uid("research", "llama") is None
    cache.monitors_informer._heard = time.monotonic() - MONITORS_QUIET_S - 1
    with pytest.raises(Stale, match="monitor cache has heard nothing"):
        cache.monitor_uid("ml", "llama")


def test_a_workload_kind_the_cluster_does_not_serve_is_resolved_as_such_and_asked_again_later() -> None:
    asked: list[str] = []
    now = [0.0]

    def served(resource: Resource) -> bool:
        asked.append(str(resource))
        return False

    cache = ClusterCache(api=None, served=served, clock=lambda: now[0])  # type: ignore[arg-type]
    filled(cache, "pods", [])
    ref = WorkloadRef(kind="JobSet", name="llama")
    got = cache.workload("ml", ref, LLAMA)
    assert got.problem.startswith("spec.workloadRef: JobSet (jobset.x-k8s.io/v1alpha2) is not served")
    cache.workload("ml", ref, LLAMA)
    assert asked == ["jobsets.jobset.x-k8s.io"], "not asked again at once"
    now[0] = UNSERVED_RECHECK_S + 1
    cache.workload("ml", ref, LLAMA)
    assert len(asked) == 2, "a CRD installed after the monitor is found"


def test_a_served_owner_kind_gets_a_cache_of_its_own_and_kueue_is_read_only_for_a_queued_owner() -> None:
    served: list[str] = []
    cache = ClusterCache(api=None, served=lambda r: served.append(str(r)) is None)  # type: ignore[arg-type]
    owner = jobset(labels={"kueue.x-k8s.io/queue-name": "team-a"})
    child = child_job()
    filled(cache, "pods", [jobset_pod(child, 0, "gpu-a"), pod("other", labels={"app": "other"})])
    filled(cache, "jobs", [child])
    ref = WorkloadRef(kind="JobSet", name="llama")
    for kind in (JOBSETS, KUEUE_WORKLOADS[0]):  # made as a first read would (not started: this cache is not)
        assert cache._cache_of(kind) is not None
    filled(cache, "jobsets.jobset.x-k8s.io", [owner])
    filled(cache, "workloads.kueue.x-k8s.io", [kueue_workload("js-uid", Admitted="True"),
                                                kueue_workload("another-uid", name="other", Admitted="False")])  # fmt: skip
    got = cache.workload("ml", ref, LLAMA)
    assert (got.problem, [p["metadata"]["name"] for p in got.pods]) == ("", ["llama-node-0-0"])
    assert got.admission is not None and got.admission.name == "jobset-llama-1a2b3" and got.admission.admitted
    assert "jobsets.jobset.x-k8s.io" in cache.informers, "its counts are exported with the others"
    assert served == ["jobsets.jobset.x-k8s.io", "workloads.kueue.x-k8s.io"]
    unqueued = jobset()
    filled(cache, "jobsets.jobset.x-k8s.io", [unqueued])
    assert cache.workload("ml", ref, LLAMA).admission is None


def test_a_job_owner_is_read_from_the_jobs_cache_and_a_missing_one_is_not_found() -> None:
    cache = ClusterCache(api=None, served=lambda r: False)  # type: ignore[arg-type]
    filled(cache, "pods", [job_pod("llama-0"), job_pod("llama-1", "gpu-b")])
    filled(cache, "jobs", [job()])
    got = cache.workload("ml", WorkloadRef(kind="Job", name="llama"), LLAMA)
    assert (got.problem, got.budget_left) == ("", 3)
    missing = cache.workload("ml", WorkloadRef(kind="Job", name="gone"), LLAMA)
    assert (
        missing.problem == "spec.workloadRef: Job ml/gone not found: create it, or fix spec.workloadRef.name"
    )


def test_an_owned_objects_cache_keeps_its_version_hash_and_the_other_field_managers() -> None:
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "trainguard-llama", "namespace": "ml", "resourceVersion": "7",
            "annotations": {HASH_ANNOTATION: "abc", "other": "x"},
            "managedFields": [
                {"manager": FIELD_MANAGER, "operation": "Apply"},
                {"manager": "prometheus-operator", "operation": "Update", "subresource": "status"},
                {"manager": "kubectl-edit", "operation": "Update"},
            ],
        },
        "spec": {"groups": [{"name": "g", "rules": []}]},
    }  # fmt: skip
    kept = applied_meta(rule)
    assert kept == {
        "metadata": {"name": "trainguard-llama", "namespace": "ml", "resourceVersion": "7",
                     "annotations": {HASH_ANNOTATION: "abc"}},
        "otherManagers": ["kubectl-edit"],
    }, "a status writer is not a hand edit; the rules themselves are not kept"  # fmt: skip


def test_an_owned_kind_is_read_from_its_cache_once_listed_and_not_before() -> None:
    cache = ClusterCache(api=None, served=lambda resource: True)  # type: ignore[arg-type]
    rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "trainguard-llama", "namespace": "ml"}}  # fmt: skip
    with pytest.raises(NotSynced):
        cache.applied(rule)  # made on this read, not listed yet: the apply reads by name
    informer = cache.informers["prometheusrules.monitoring.coreos.com"]
    assert informer.metadata_only and informer.label_selector == "app.kubernetes.io/managed-by=trainguard"
    informer._apply(
        {"type": "ADDED", "object": {**rule, "metadata": {**rule["metadata"], "resourceVersion": "3"}}}
    )
    informer._synced.set()
    assert cache.applied(rule) == {"metadata": {"name": "trainguard-llama", "namespace": "ml",
                                                "resourceVersion": "3", "annotations": {}}, "otherManagers": []}  # fmt: skip
    with pytest.raises(NotSynced):
        cache.applied({**rule, "kind": "Secret", "apiVersion": "v1"})  # never cached: write-only


def test_a_failed_discovery_of_an_owned_kind_is_no_failure_of_the_apply() -> None:
    def fails(resource: Resource) -> bool:
        raise ApiError(status=503, reason="Service Unavailable")

    cache = ClusterCache(api=None, served=fails)  # type: ignore[arg-type]
    with pytest.raises(NotSynced):
        cache.applied(
            {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor", "metadata": {"name": "x"}}
        )
