"""Node down as the running operator judges it at default settings (--detect-seconds 3, a Lease grace of
18 s, a NotReady minimum of 12 s), on fake nodes of the test's own whose Leases the test renews as a
kubelet would, every 5 s: a 5-second NotReady blip and a kubelet whose clock is 90 s behind cordon
nothing; a node whose kubelet stops renewing is cordoned within 30 s of its last renewal.

The nodes are the test's, not the shared gpu-node-*, so that it alone decides when each Lease is
renewed; each hosts a pod of the job bound to it directly (nothing needs to run there: node down is
judged from node state, and a pod Pending on its node ties the node to the job). The job whose node dies
has no other pod, so its emergency checkpoint asks no one and the cordon follows the signal at once."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from e2e.cluster import Cluster
from e2e.monitors import quickstart, ready
from e2e.receiver import records
from tests.processes import wait_for

pytestmark = pytest.mark.e2e
BOUND_S = 30.0
RENEW_S = 5.0
"""How often the test's kubelet renews (the fake kubelet's interval; a real one renews every 10 s)."""


def now(skew: float = 0.0) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=skew)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def conditions(ready: str, since: str) -> list[dict[str, str]]:
    return [{"type": "Ready", "status": ready, "reason": "KubeletReady" if ready == "True" else "KubeletNotReady",
             "message": "e2e", "lastHeartbeatTime": now(), "lastTransitionTime": since}]  # fmt: skip


class Kubelet:
    """Renews the Leases of the test's nodes every RENEW_S, each stamped with its own clock (`skew`),
    until `stop(name)`: the last renewal's time (time.monotonic) is kept."""

    def __init__(self, api: client.ApiClient) -> None:
        self.coord = client.CoordinationV1Api(api)
        self.skew: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.stopped: set[str] = set()
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="e2e-kubelet", daemon=True)
        self.errors: list[str] = []

    def renew(self, name: str) -> None:
        body = {"metadata": {"name": name, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now(self.skew.get(name, 0.0))}}  # fmt: skip
        try:
            current = self.coord.read_namespaced_lease(name, "kube-node-lease")
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            self.coord.replace_namespaced_lease(name, "kube-node-lease", body)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.coord.create_namespaced_lease("kube-node-lease", body)
        self.last[name] = time.monotonic()

    def _loop(self) -> None:
        while not self.halt.wait(RENEW_S):
            for name in sorted(set(self.skew) - self.stopped):
                try:
                    self.renew(name)
                except Exception as exc:
                    self.errors.append(f"{name}: {exc}")

    def stop(self, name: str) -> float:
        """Stop renewing `name`'s Lease; returns when it was last renewed."""
        self.stopped.add(name)
        return self.last[name]


@contextmanager
def fake_nodes(cluster: Cluster, skews: dict[str, float]) -> Iterator[Kubelet]:
    """Ready GPU nodes named after `skews`' keys, their Leases renewed by a Kubelet with those clocks."""
    kubelet = Kubelet(cluster.api)
    coord = client.CoordinationV1Api(cluster.api)
    try:
        for name, skew in skews.items():
            cluster.core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": name, "labels": {"kubernetes.io/hostname": name, "trainguard.io/e2e-node-down": "true"}}})  # fmt: skip
            capacity = {"cpu": "96", "memory": "1024Gi", "pods": "110", "nvidia.com/gpu": "8"}
            cluster.core.patch_node_status(name, {"status": {"capacity": capacity, "allocatable": capacity,
                                                             "conditions": conditions("True", now())}})  # fmt: skip
            kubelet.skew[name] = skew
            kubelet.renew(name)
        kubelet.thread.start()
        yield kubelet
    finally:
        kubelet.halt.set()
        for name in skews:
            for delete in (lambda n=name: cluster.core.delete_node(n),
                           lambda n=name: coord.delete_namespaced_lease(n, "kube-node-lease")):  # fmt: skip
                try:
                    delete()
                except ApiException as exc:
                    if exc.status != 404:
                        raise


def job_on(cluster: Cluster, ns: str, nodes: list[str]) -> None:
    """The quickstart's monitor (defaults) and one pod of its job bound to each of `nodes`."""
    monitor, policy = quickstart(ns)
    cluster.apply([monitor, policy])
    wait_for("monitor Ready", lambda: ready(cluster, ns))
    for i, name in enumerate(nodes):
        cluster.core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"llama-pretrain-{i}", "labels": {"app": "llama-pretrain"}}, "spec": {
            "nodeName": name, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "trainer", "image": "registry.invalid/llama:1"}]}})  # fmt: skip


def unschedulable(cluster: Cluster, name: str) -> bool:
    return bool(cluster.core.read_node(name).spec.unschedulable)


def watch_cordons(cluster: Cluster, names: list[str], seconds: float) -> dict[str, float]:
    """Poll the nodes for `seconds`: when (time.monotonic) each was first seen cordoned."""
    seen: dict[str, float] = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for name in names:
            if name not in seen and unschedulable(cluster, name):
                seen[name] = time.monotonic()
        time.sleep(0.5)
    return seen


def node_down_records(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    return [r for r in records(cluster, ns) if r.get("alert") == "GPUNodeDown"]


def test_a_not_ready_blip_and_a_kubelet_clock_90s_behind_cordon_nothing(operator: Cluster, ns: str) -> None:
    blip, behind = "nodedown-blip", "nodedown-behind"
    with fake_nodes(operator, {blip: 0.0, behind: -90.0}) as kubelet:
        job_on(operator, ns, [blip, behind])
        time.sleep(10)  # a few passes see both nodes Ready and renewing
        lease = client.CoordinationV1Api(operator.api).read_namespaced_lease(behind, "kube-node-lease")
        assert time.time() - lease.spec.renew_time.timestamp() > 80  # its renewTime reads 90 s in the past
        operator.core.patch_node_status(blip, {"status": {"conditions": conditions("False", now())}})
        time.sleep(5)
        operator.core.patch_node_status(blip, {"status": {"conditions": conditions("True", now())}})
        cordoned = watch_cordons(operator, [blip, behind], 40)
        assert not kubelet.errors, kubelet.errors
    assert cordoned == {}, cordoned
    assert node_down_records(operator, ns) == [], node_down_records(operator, ns)


def test_a_node_that_stops_renewing_its_lease_is_cordoned_within_30s(operator: Cluster, ns: str) -> None:
    dying = "nodedown-dying"
    with fake_nodes(operator, {dying: 0.0}) as kubelet:
        job_on(operator, ns, [dying])
        time.sleep(2 * RENEW_S)  # the operator has seen it renew
        assert not unschedulable(operator, dying)
        last = kubelet.stop(dying)
        cordoned = watch_cordons(operator, [dying], BOUND_S + 10)
        assert dying in cordoned, (records(operator, ns), operator.operator_logs()[-3000:])
        took = cordoned[dying] - last
        print(f"\nlast Lease renewal -> cordoned in {took:.1f}s")
        assert took <= BOUND_S, (took, records(operator, ns))
        got = node_down_records(operator, ns)
        assert got and got[0]["node"] == dying, got
        assert [s["kind"] for s in got[0]["steps"]][:3] == ["Cordon", "Taint", "RequestCheckpoint"]
