"""kube/objects.py: the pure readings the rooms' cores use, held to the kubernetes client's own where it
has one (its quantity parser), and the slimming a watch cache applies keeping what the operator reads."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from kubernetes.utils import parse_quantity

from trainguard.kube.objects import gpus, new_pods_placement, quantity, slim_node, slim_pod
from trainguard.render.sidecar import carries_exporter


@pytest.mark.parametrize(
    "text", ["8", "0", "500m", "1Gi", "1e3", "2k", "1.5", ".5", "3Mi", "-1", "100n", "4E"]
)
def test_quantities_read_as_the_kubernetes_client_reads_them(text: str) -> None:
    assert quantity(text) == Decimal(parse_quantity(text))


@pytest.mark.parametrize("text", ["", "x", "1Z", "1.2.3", "Gi"])
def test_what_is_not_a_quantity_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        quantity(text)


def test_a_node_with_an_unreadable_gpu_count_has_none() -> None:
    assert gpus({"status": {"capacity": {"nvidia.com/gpu": "8"}}}) == 8.0
    assert gpus({"status": {"capacity": {"nvidia.com/gpu": "lots"}}}) == 0.0
    assert gpus({}) == 0.0


def test_a_slimmed_pod_keeps_what_the_operator_reads_and_drops_the_bulk() -> None:
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "llama-0", "namespace": "ml", "labels": {"app": "llama"}, "uid": "u",
                     "creationTimestamp": "2026-01-01T00:00:00Z", "ownerReferences": [{"kind": "Job"}],
                     "managedFields": [{"manager": "kube-controller-manager"}],
                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "keep": "me"}},
        "spec": {"nodeName": "gpu-0", "serviceAccountName": "trainer", "volumes": [{"name": "data"}],
                 "initContainers": [{"name": "trainguard-exporter", "restartPolicy": "Always",
                                     "ports": [{"containerPort": 9400}], "env": [{"name": "TOKEN"}]}],
                 "containers": [{"name": "trainer", "image": "llama:1", "env": [{"name": "X"}], "resources": {}}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1",
                   "containerStatuses": [{"name": "trainer", "state": {"running": {}}}]},
    }  # fmt: skip
    kept = slim_pod(pod)
    assert kept["metadata"] == {k: v for k, v in pod["metadata"].items() if k != "managedFields"} | {
        "annotations": {"keep": "me"}
    }
    assert kept["spec"] == {"nodeName": "gpu-0", "serviceAccountName": "trainer",
                            "initContainers": [{"name": "trainguard-exporter", "restartPolicy": "Always",
                                                "ports": [{"containerPort": 9400}]}],
                            "containers": [{"name": "trainer", "image": "llama:1"}]}  # fmt: skip
    assert kept["status"] == pod["status"]
    assert carries_exporter(kept)


def test_a_slimmed_pods_status_drops_images_and_ids_and_its_strings_are_shared() -> None:
    """16,000 cached pods: what the operator never reads of a status goes, and every pod's keys and
    short values ("Running", its namespace, "True") are one string each, not a copy a pod."""

    def decoded(i: int) -> dict[str, Any]:  # as a watch decodes each event: new strings every time
        return json.loads(json.dumps({"metadata": {"name": f"llama-{i}", "namespace": "ml"}, "status": {
            "phase": "Running", "podIP": "10.0.0.1", "hostIP": "10.0.0.9", "qosClass": "Burstable",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "containerStatuses": [{"name": "trainer", "ready": True, "restartCount": 1, "image": "llama:1",
                                   "imageID": "sha256:" + "0" * 64, "containerID": "containerd://" + "f" * 64,
                                   "state": {"running": {}}, "lastState": {"terminated": {"exitCode": 1}},
                                   "volumeMounts": [{"name": "token"}]}]}}))  # fmt: skip

    one, two = slim_pod(decoded(1)), slim_pod(decoded(2))
    assert one["status"] == {
        "phase": "Running", "podIP": "10.0.0.1",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "containerStatuses": [{"name": "trainer", "ready": True, "restartCount": 1, "state": {"running": {}},
                               "lastState": {"terminated": {"exitCode": 1}}}],
    }  # fmt: skip
    assert one["status"]["phase"] is two["status"]["phase"]
    assert one["metadata"]["namespace"] is two["metadata"]["namespace"]
    ones, twos = list(one["status"]["containerStatuses"][0]), list(two["status"]["containerStatuses"][0])
    assert ones == twos and all(a is b for a, b in zip(ones, twos, strict=True)), "the keys are shared"


def test_a_slimmed_node_keeps_its_conditions_capacity_and_spec() -> None:
    node = {"metadata": {"name": "gpu-0", "annotations": {"trainguard.io/cordoned-at": "1"}},
            "spec": {"unschedulable": True, "taints": [{"key": "k"}]},
            "status": {"conditions": [{"type": "Ready"}], "capacity": {"nvidia.com/gpu": "8"},
                       "allocatable": {}, "images": [{"names": ["a"] * 50}], "daemonEndpoints": {}}}  # fmt: skip
    kept = slim_node(node)
    assert kept["spec"] == node["spec"] and kept["metadata"] == node["metadata"]
    assert set(kept["status"]) == {"conditions", "capacity", "allocatable"}


def test_placement_leaves_out_a_new_pod_that_failed_before_it_was_scheduled() -> None:
    """Kueue's TAS node controller fails a replacement its ungater sent to the faulty node (condition
    TerminatedByKueue, never scheduled); the Job's next pod is the one placement waits for."""
    after = 1_700_000_000.5  # 2023-11-14T22:13:20.5Z

    def pod(name: str, node: str = "", phase: str = "Pending") -> dict[str, Any]:
        return {"metadata": {"name": name, "creationTimestamp": "2023-11-14T22:13:21Z"},
                "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}  # fmt: skip

    failed = pod("job-0-late", phase="Failed")
    assert new_pods_placement([failed], after) is None, "no pod to place yet"
    assert new_pods_placement([failed, pod("job-0-next")], after) is None, "the next one still unscheduled"
    assert new_pods_placement([failed, pod("job-0-next", "gpu-c", "Running")], after) == {
        "job-0-next": "gpu-c"
    }
    done = pod("job-1-done", "gpu-b", "Succeeded")
    assert new_pods_placement([done, pod("job-0-next", "gpu-c", "Running")], after) == {"job-0-next": "gpu-c"}
