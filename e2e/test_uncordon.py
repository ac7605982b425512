"""`trainguard uncordon` on a real apiserver (with the node lifecycle controller adding its own taints):
a node trainguard cordoned and tainted returns to service, signed and with a Node Event; a node a person
cordoned is refused and left as it is; a lemon (its third fault in the window) is refused naming its faults
and returned only with --force. The fake GPU nodes are shared, so every test restores them."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

from e2e.cluster import Cluster
from e2e.nodes import OTHER_TAINT
from tests.processes import wait_for
from trainguard.catalog.kubernetes import CORDONED_AT, CORDONED_BY, FAULT_HISTORY, FAULTY_TAINT, LEMON_LABEL
from trainguard.kube import ClusterCache, Kube
from trainguard.remediation.cluster import Cluster as Edge
from trainguard.remediation.lemon import Fault, LemonPolicy, encode, parse_history
from trainguard.remediation.uncordon import UNCORDON_REASON, UNCORDONED_AT, UNCORDONED_BY

pytestmark = pytest.mark.e2e

NODE = "gpu-node-2"


@pytest.fixture
def node(clean_nodes: None) -> str:
    """The node of these tests, as the shared nodes are restored before and after each (conftest.py)."""
    return NODE


def _uncordon(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainguard.cli", "uncordon", *args, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _live(cluster: Cluster) -> Any:
    return cluster.core.read_node(NODE)


def _taint_keys(cluster: Cluster) -> set[str]:
    return {t.key for t in _live(cluster).spec.taints or []}


def _spec(cluster: Cluster) -> Any:
    return _live(cluster).spec


def _annotations(cluster: Cluster) -> dict[str, Any]:
    return dict(_live(cluster).metadata.annotations or {})


def test_uncordon_returns_a_node_trainguard_cordoned(cluster: Cluster, node: str) -> None:
    cluster.core.patch_node(
        node, {"spec": {"taints": [OTHER_TAINT]}}, _content_type="application/merge-patch+json"
    )
    cache = ClusterCache(cluster.api).start()
    edge = Edge(Kube(cluster.api, timeout=10), cache)
    assert edge.cordon(node, "GPUCriticalXid", "rec-e2e-1") == "cordoned"
    assert edge.taint(node, "GPUCriticalXid").startswith("tainted")
    wait_for(
        "the lifecycle controller's unschedulable taint beside ours",
        lambda: _taint_keys(cluster) >= {FAULTY_TAINT, "node.kubernetes.io/unschedulable"},
        timeout=20,
    )
    before = time.time()

    done = _uncordon(cluster, node, "--by", "alice@ops", "--reason", "GPU replaced")
    assert done.returncode == 0, done.stderr
    assert f"node {node} returned to service by alice@ops" in done.stdout
    assert "rec-e2e-1" in done.stdout

    assert not _spec(cluster).unschedulable
    annotations = _annotations(cluster)
    assert CORDONED_BY not in annotations and CORDONED_AT not in annotations
    assert annotations[UNCORDONED_BY] == "alice@ops" and annotations[UNCORDON_REASON] == "GPU replaced"
    assert before - 1 <= float(annotations[UNCORDONED_AT]) <= time.time() + 1
    assert FAULTY_TAINT not in _taint_keys(cluster)
    assert OTHER_TAINT["key"] in _taint_keys(cluster), "another taint is kept"
    wait_for(
        "the lifecycle controller lifts its unschedulable taint",
        lambda: "node.kubernetes.io/unschedulable" not in _taint_keys(cluster) or None,
        timeout=20,
    )
    # the storm guard no longer counts a returned node (its watch cache sees the annotations go)
    wait_for("the uncordon in the node cache", lambda: edge.cordon_history() == [], timeout=10)
    cache.stop()
    uncordoned: list[Any] = list(cluster.events("default", node, "Uncordoned"))
    events = [e for e in uncordoned if "alice@ops" in (e.message or "")]
    assert len(events) == 1, "one Event, naming who"
    assert events[0].involved_object.kind == "Node"

    again = _uncordon(cluster, node, "--by", "bob")
    assert again.returncode == 0 and "already back in service" in again.stdout
    assert _annotations(cluster)[UNCORDONED_BY] == "alice@ops", "the second run changes nothing"
    assert len(cluster.events("default", node, "Uncordoned")) == len(events)


def test_uncordon_refuses_a_node_a_person_cordoned(cluster: Cluster, node: str) -> None:
    events_before = len(cluster.events("default", node, "Uncordoned"))
    # what `kubectl cordon` does: unschedulable, no trainguard annotations
    cluster.core.patch_node(
        node, {"spec": {"unschedulable": True}}, _content_type="application/merge-patch+json"
    )

    refused = _uncordon(cluster, node, "--by", "alice@ops")
    assert refused.returncode == 1
    assert "cordoned by someone other than trainguard" in refused.stderr
    assert _spec(cluster).unschedulable is True
    assert UNCORDONED_BY not in _annotations(cluster)
    assert len(cluster.events("default", node, "Uncordoned")) == events_before


def test_uncordon_refuses_a_lemon_until_forced(cluster: Cluster, node: str) -> None:
    now = time.time()
    earlier = [
        Fault(now - 5 * 86400, "GPULost", "rec-e2e-a"),
        Fault(now - 86400, "GPUCriticalXid", "rec-e2e-b"),
    ]
    cluster.core.patch_node(
        node, {"metadata": {"annotations": {FAULT_HISTORY: encode(earlier)}}},
        _content_type="application/merge-patch+json",
    )  # fmt: skip
    edge = Edge(Kube(cluster.api, timeout=10), reads=None, lemons=LemonPolicy(faults=3))  # type: ignore[arg-type]
    assert edge.cordon(node, "GPUCriticalXid", "rec-e2e-c").startswith("cordoned (a lemon now")
    live = _live(cluster)
    assert (live.metadata.labels or {}).get(LEMON_LABEL) == "true"
    assert [f.record for f in parse_history(live.metadata.annotations[FAULT_HISTORY])] == [
        "rec-e2e-a", "rec-e2e-b", "rec-e2e-c"]  # fmt: skip

    refused = _uncordon(cluster, node, "--by", "alice@ops")
    assert refused.returncode == 1
    assert f"node {node} is a lemon" in refused.stderr and "rec-e2e-a" in refused.stderr
    assert "--force" in refused.stderr
    assert _spec(cluster).unschedulable is True

    forced = _uncordon(cluster, node, "--by", "alice@ops", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "forced: it is a lemon" in forced.stdout
    assert not _spec(cluster).unschedulable
    assert (_live(cluster).metadata.labels or {}).get(LEMON_LABEL) == "true", "still out of the spare pool"
