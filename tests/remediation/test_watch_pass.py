"""The detection pass reads the watch caches: node down from the Ready condition and from the node's
Lease. A Lease cache that has gone quiet (its watch lost without a word) is not read that pass, so a
silent connection is never taken for silent kubelets; the Ready condition still counts."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import MONITOR
from tests.kube.fakes import FakeKube, pod
from trainguard.kube import Stale
from trainguard.remediation.passes import WatchPass
from trainguard.times import rfc3339

NOW = 1_800_000_000.0
LONG_AGO = rfc3339(NOW - 600)


def node(name: str, ready: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"conditions": [
        {"type": "Ready", "status": ready, "reason": "KubeletNotReady", "lastTransitionTime": LONG_AGO}]}}  # fmt: skip


def lease(name: str) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {"renewTime": LONG_AGO, "leaseDurationSeconds": 40}}  # fmt: skip


class QuietLeases(FakeKube):
    """The watch caches with a Lease cache gone quiet: its read raises Stale, as kube.ClusterCache's does."""

    def node_leases(self) -> list[dict[str, Any]]:
        raise Stale("the node Lease cache has heard nothing from the API for 45s; watching again")


def reads(nodes: list[dict[str, Any]], stale_leases: bool) -> FakeKube:
    """The test monitor, its two running pods on gpu-a and gpu-b, `nodes` and both nodes' expired Leases."""
    selected = MONITOR["spec"]["selector"]["matchLabels"]
    pods = [
        pod("ml", f"llama-{n}", selected, spec={"nodeName": n}, status={"phase": "Running"})
        for n in ("gpu-a", "gpu-b")
    ]
    return (QuietLeases if stale_leases else FakeKube)(MONITOR, *pods, *nodes, lease("gpu-a"), lease("gpu-b"))


class Queue:
    def __init__(self) -> None:
        self.got: list[Any] = []

    def submit(self, signals: list[Any]) -> None:
        self.got += signals


def detected(reads: FakeKube) -> list[tuple[str, str]]:
    intake = Queue()
    WatchPass(reads, intake, leader=lambda: True, clock=lambda: NOW).run()  # type: ignore[arg-type]
    return [(s.alertname, s.node) for s in intake.got]


def test_expired_leases_are_a_node_down_when_the_cache_is_fresh() -> None:
    assert detected(reads([node("gpu-a", "True"), node("gpu-b", "True")], stale_leases=False)) == [
        ("GPUNodeDown", "gpu-a"), ("GPUNodeDown", "gpu-b")]  # fmt: skip


def test_a_stale_lease_cache_is_not_read_and_the_ready_condition_still_counts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert detected(reads([node("gpu-a", "False"), node("gpu-b", "True")], stale_leases=True)) == [
        ("GPUNodeDown", "gpu-a")]  # fmt: skip
    assert "node down is read from the Ready conditions alone" in caplog.text
