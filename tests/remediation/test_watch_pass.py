"""The detection pass reads the watch caches: node down from the Ready condition and from the node's
Lease. A Lease cache that has gone quiet (its watch lost without a word) is not read that pass, so a
silent connection is never taken for silent kubelets; the Ready condition still counts."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.conftest import MONITOR
from trainguard.kube import Stale
from trainguard.remediation.passes import WatchPass
from trainguard.times import rfc3339

NOW = 1_800_000_000.0
LONG_AGO = rfc3339(NOW - 600)


def node(name: str, ready: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"conditions": [
        {"type": "Ready", "status": ready, "reason": "KubeletNotReady", "lastTransitionTime": LONG_AGO}]}}  # fmt: skip


def lease(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {"renewTime": LONG_AGO, "leaseDurationSeconds": 40}}  # fmt: skip


class Reads:
    def __init__(self, nodes: list[dict[str, Any]], stale_leases: bool) -> None:
        self._nodes, self.stale_leases = nodes, stale_leases

    def monitors(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(MONITOR)]

    def pods(self, namespace: str, selector: Any) -> list[dict[str, Any]]:
        return [{"metadata": {"name": f"llama-{n}", "namespace": "ml", "labels": {"app": "llama-pretrain"}},
                 "spec": {"nodeName": n}, "status": {"phase": "Running"}} for n in ("gpu-a", "gpu-b")]  # fmt: skip

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def nodes(self) -> list[dict[str, Any]]:
        return self._nodes

    def node_leases(self) -> list[dict[str, Any]]:
        if self.stale_leases:
            raise Stale("the node Lease cache has heard nothing from the API for 45s; watching again")
        return [lease("gpu-a"), lease("gpu-b")]


class Queue:
    def __init__(self) -> None:
        self.got: list[Any] = []

    def submit(self, signals: list[Any]) -> None:
        self.got += signals


def detected(reads: Reads) -> list[tuple[str, str]]:
    intake = Queue()
    WatchPass(reads, intake, leader=lambda: True, clock=lambda: NOW).run()  # type: ignore[arg-type]
    return [(s.alertname, s.node) for s in intake.got]


def test_expired_leases_are_a_node_down_when_the_cache_is_fresh() -> None:
    assert detected(Reads([node("gpu-a", "True"), node("gpu-b", "True")], stale_leases=False)) == [
        ("GPUNodeDown", "gpu-a"), ("GPUNodeDown", "gpu-b")]  # fmt: skip


def test_a_stale_lease_cache_is_not_read_and_the_ready_condition_still_counts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert detected(Reads([node("gpu-a", "False"), node("gpu-b", "True")], stale_leases=True)) == [
        ("GPUNodeDown", "gpu-a")]  # fmt: skip
    assert "node down is read from the Ready conditions alone" in caplog.text
