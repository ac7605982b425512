"""remediation.cluster against a real apiserver, Job controller and scheduler, reading through real
watch caches (kube.ClusterCache) as the operator does (the admin client: the operator's RBAC for these
calls is wired with the executor). The fake GPU nodes are shared with other tests, so every test returns
them as it found them. A read right after a write waits for the watch to bring it: the caches are
eventually consistent, and the code that reads them (the planner, the executor's polls) is built so."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from e2e.cluster import Cluster
from e2e.nodes import NODES, OTHER_TAINT
from tests.processes import wait_for
from trainguard.api.common import LabelSelector
from trainguard.catalog.kubernetes import (
    CORDON_REASON,
    CORDONED_AT,
    CORDONED_BY,
    FAULTY_TAINT,
    RESUME_FROM,
    SPARE_LABEL,
)
from trainguard.kube import ClusterCache, Kube
from trainguard.kube.objects import new_pods_placement
from trainguard.remediation.cluster import Cluster as Edge

pytestmark = pytest.mark.e2e


@pytest.fixture
def edge(cluster: Cluster, clean_nodes: None) -> Iterator[Edge]:
    """The edge on the shared nodes, restored before and after each test (conftest.py)."""
    cache = ClusterCache(cluster.api).start()
    try:
        yield Edge(Kube(cluster.api, timeout=10), cache)
    finally:
        cache.stop()


def _taints(cluster: Cluster, node: str) -> list[dict[str, Any]]:
    return [
        {"key": t.key, "value": t.value, "effect": t.effect}
        for t in cluster.core.read_node(node).spec.taints or []
    ]


def test_cordon_and_taint_are_idempotent_and_merge_with_existing_taints(cluster: Cluster, edge: Edge) -> None:
    node = NODES[0]
    cluster.core.patch_node(
        node, {"spec": {"taints": [OTHER_TAINT]}}, _content_type="application/merge-patch+json"
    )
    before = time.time()

    assert edge.cordon(node, "GPUCriticalXid", "rec-1") == "cordoned"
    assert edge.cordon(node, "GPUCriticalXid", "rec-1") == "already cordoned by rec-1"
    assert edge.cordon(node, "GPULost", "rec-2") == "already cordoned by rec-1", "the first cordon stands"
    assert edge.taint(node, "GPUCriticalXid") == f"tainted {FAULTY_TAINT}=GPUCriticalXid:NoSchedule"
    assert edge.taint(node, "GPULost") == f"already tainted {FAULTY_TAINT}:NoSchedule"

    live = cluster.core.read_node(node)
    assert live.spec.unschedulable is True
    annotations = live.metadata.annotations
    assert annotations[CORDONED_BY] == "rec-1" and annotations[CORDON_REASON] == "GPUCriticalXid"
    assert before - 1 <= float(annotations[CORDONED_AT]) <= time.time()
    taints = _taints(cluster, node)
    # the node lifecycle controller adds its own unschedulable taint once the node is cordoned: a merge
    # that lost it (or the other taint) would show here
    assert OTHER_TAINT in taints
    assert [t for t in taints if t["key"] == FAULTY_TAINT] == [
        {"key": FAULTY_TAINT, "value": "GPUCriticalXid", "effect": "NoSchedule"}
    ]
    wait_for(
        "the lifecycle controller's unschedulable taint kept beside ours",
        lambda: (
            {t["key"] for t in _taints(cluster, node)}
            >= {OTHER_TAINT["key"], FAULTY_TAINT, "node.kubernetes.io/unschedulable"}
        ),
        timeout=20,
    )
    history = wait_for("the cordon in the node cache", lambda: edge.cordon_history() or None, timeout=10)
    assert [n for n, _ in history] == [node]
    assert history[0][1] == float(annotations[CORDONED_AT])


def test_a_node_cordoned_by_someone_else_is_left_alone(cluster: Cluster, edge: Edge) -> None:
    node = NODES[1]
    cluster.core.patch_node(
        node, {"spec": {"unschedulable": True}}, _content_type="application/merge-patch+json"
    )
    assert edge.cordon(node, "GPULost", "rec-3") == "already cordoned, not by trainguard: left as is"
    assert CORDONED_BY not in (cluster.core.read_node(node).metadata.annotations or {})
    assert edge.cordon_history() == []


def test_counts_gpu_nodes_and_finds_schedulable_spares(cluster: Cluster, edge: Edge) -> None:
    assert edge.gpu_node_count() >= len(NODES)
    assert edge.spares() == []
    for name in NODES[1:]:
        cluster.core.patch_node(name, {"metadata": {"labels": {SPARE_LABEL: "true"}}})
    wait_for("both spares in the node cache", lambda: edge.spares() == list(NODES[1:]), timeout=10)
    edge.cordon(NODES[2], "GPULost", "rec-4")
    wait_for("a cordoned spare is no spare", lambda: edge.spares() == [NODES[1]], timeout=10)


def _gang_job(ns: str, name: str, label: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "backoffLimit": 10,
            "template": {
                "metadata": {"labels": {"gang": label}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "registry.invalid/llama:1",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                },
            },
        },
    }


def test_a_deleted_gang_is_recreated_by_its_job_and_placed_away_from_the_cordoned_node(
    cluster: Cluster, edge: Edge, ns: str
) -> None:
    label = uuid.uuid4().hex[:8]
    selector = LabelSelector.model_validate({"matchLabels": {"gang": label}})
    cluster.apply([_gang_job(ns, "gang", label)])
    first = wait_for(
        "2 gang pods Running on GPU nodes",
        lambda: (
            len(
                pods := [
                    p
                    for p in edge.gang_pods(ns, selector)
                    if (p.get("status") or {}).get("phase") == "Running"
                ]
            )
            == 2
            and pods
        ),
        timeout=90,
    )
    sidecars = edge.sidecars(ns, selector, 9400)
    assert sorted(s.pod for s in sidecars) == sorted(p["metadata"]["name"] for p in first)
    ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in first}  # the fake kubelet's, one per pod
    assert all(s.base_url == f"http://{ips[s.pod]}:9400" for s in sidecars), (sidecars, ips)
    bad = first[0]["spec"]["nodeName"]

    edge.cordon(bad, "GPUCriticalXid", "rec-5")
    edge.taint(bad, "GPUCriticalXid")
    edge.annotate_workload(
        ns, "batch/v1", "Job", "gang", {RESUME_FROM: '{"path": "/ckpt/1000", "step": 1000}'}
    )
    restart = time.time()
    names = [p["metadata"]["name"] for p in first]
    assert sorted(edge.delete_pods(ns, names)) == sorted(names)
    assert edge.delete_pods(ns, ["not-there"]) == [], "a pod already gone is fine"

    try:
        placed = wait_for(
            "the Job's replacement pods scheduled",
            lambda: (p := new_pods_placement(edge.gang_pods(ns, selector), restart)) and len(p) == 2 and p,
            timeout=90,
        )
    except AssertionError:
        held = [
            (
                p.metadata.namespace,
                p.metadata.name,
                p.spec.node_name,
                p.status.phase,
                bool(p.metadata.deletion_timestamp),
            )
            for p in cluster.core.list_pod_for_all_namespaces().items
            if p.spec.node_name or p.metadata.namespace == ns
        ]
        nodes = [(n.metadata.name, n.spec.unschedulable, [t.key for t in n.spec.taints or []])
                 for n in cluster.core.list_node().items]  # fmt: skip
        raise AssertionError(f"pods: {held}\nnodes: {nodes}") from None
    assert not set(placed) & set(names), "new pods, not the old ones"
    assert bad not in placed.values(), "the scheduler respects the cordon"
    assert len(set(placed.values())) == 2
    some = sorted(placed)[0]
    assert edge.delete_pod(ns, some, "not-its-uid") is False, (
        "another incarnation: the uid precondition holds"
    )
    assert any(p["metadata"]["name"] == some for p in edge.gang_pods(ns, selector))
    job = client.BatchV1Api(cluster.api).read_namespaced_job("gang", ns)
    assert job.metadata.annotations[RESUME_FROM] == '{"path": "/ckpt/1000", "step": 1000}'
