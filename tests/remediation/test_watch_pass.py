"""The detection pass over the watch caches: node down as the pass has watched it, pass after pass, on
its own monotonic clock, and only while the node and Lease caches hear the API. A Lease cache whose read
fails (Stale: its watch lost without a word; NotSynced) or whose hearing broke (errors, a relist) flags
no node, and the grace starts again once it hears. Interrupted pods are read with the monitor's records,
so a termination from before the job's last gang restart is history."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import MONITOR
from tests.kube.fakes import FakeKube, pod
from trainguard.kube import Stale
from trainguard.kube.objects import Hearing
from trainguard.remediation.detect import LEASE_GRACE_S
from trainguard.remediation.passes import NodeWatch, WatchPass
from trainguard.times import rfc3339

NOW = 1_800_000_000.0
LONG_AGO = rfc3339(NOW - 600)


def node(name: str, ready: str = "True") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"conditions": [
        {"type": "Ready", "status": ready, "reason": "KubeletNotReady", "lastTransitionTime": LONG_AGO}]}}  # fmt: skip


def lease(name: str, version: str = "7") -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease", "resourceVersion": version},
            "spec": {"renewTime": LONG_AGO, "leaseDurationSeconds": 40}}  # fmt: skip


class Caches(FakeKube):
    """The watch caches, with a Lease cache whose read can raise Stale as kube.ClusterCache's does."""

    stale = False

    def node_leases(self) -> list[dict[str, Any]]:
        if self.stale:
            raise Stale("the node Lease cache has heard nothing from the API for 45s; watching again")
        return super().node_leases()


SELECTED = MONITOR["spec"]["selector"]["matchLabels"]


def caches(*extra: dict[str, Any]) -> Caches:
    """The test monitor, its two running pods on gpu-a and gpu-b, both nodes Ready with their Leases."""
    pods = [
        pod("ml", f"llama-{n}", SELECTED, spec={"nodeName": n}, status={"phase": "Running"})
        for n in ("gpu-a", "gpu-b")
    ]
    reads = Caches(MONITOR, *pods, node("gpu-a"), node("gpu-b"), lease("gpu-a"), lease("gpu-b"), *extra)
    reads.hearing = Hearing(synced=True, leases=2, leases_heard_s=1.0, breaks=0)
    return reads


class Queue:
    def __init__(self) -> None:
        self.got: list[Any] = []

    def submit(self, signals: list[Any]) -> None:
        self.got += signals


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def make_pass(reads: FakeKube) -> tuple[WatchPass, Queue, Clock]:
    intake, mono = Queue(), Clock()
    watch = WatchPass(reads, intake, leader=lambda: True, clock=lambda: NOW + mono.t, nodes=NodeWatch(mono))  # type: ignore[arg-type]
    return watch, intake, mono


def passes(watch: WatchPass, intake: Queue, mono: Clock, seconds: float) -> list[tuple[str, str]]:
    """Run a pass every 3 s for `seconds`: what the last pass detected."""
    end = mono.t + seconds
    while True:
        intake.got.clear()
        watch.run()
        if mono.t + 3 > end:
            return [(s.alertname, s.node) for s in intake.got]
        mono.t += 3


def renew(reads: FakeKube, name: str, version: str) -> None:
    reads.put(lease(name, version))


def test_a_lease_seen_unchanged_for_the_grace_is_a_node_down_and_a_renewed_one_is_not() -> None:
    reads = caches()
    watch, intake, mono = make_pass(reads)
    assert (
        passes(watch, intake, mono, LEASE_GRACE_S - 3) == []
    )  # its renewTime, 10 min old, is not read as a time
    renew(reads, "gpu-b", "8")
    assert passes(watch, intake, mono, 6) == [("GPUNodeDown", "gpu-a")]


def test_a_stale_lease_cache_flags_no_node_and_the_grace_starts_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reads = caches()
    watch, intake, mono = make_pass(reads)
    passes(watch, intake, mono, LEASE_GRACE_S - 6)
    reads.stale = True
    assert passes(watch, intake, mono, 30) == []
    assert "no node is judged down this pass" in caplog.text
    reads.stale = False
    # the Leases have not changed, but the operator could not have heard them change: a full grace again
    assert passes(watch, intake, mono, LEASE_GRACE_S - 3) == []
    assert passes(watch, intake, mono, 3) == [("GPUNodeDown", "gpu-a"), ("GPUNodeDown", "gpu-b")]


def test_a_break_in_what_the_caches_heard_restarts_the_grace() -> None:
    """An apiserver outage: the watches fail (breaks grow) and the Lease cache hears nothing for 2 minutes;
    no node is flagged, then or in the grace after the caches list again."""
    reads = caches()
    watch, intake, mono = make_pass(reads)
    passes(watch, intake, mono, 9)
    for quiet in range(0, 120, 3):
        reads.hearing = Hearing(synced=True, leases=2, leases_heard_s=float(quiet), breaks=quiet // 3 + 1)
        assert passes(watch, intake, mono, 0) == [], quiet
        mono.t += 3
    reads.hearing = Hearing(synced=True, leases=2, leases_heard_s=0.5, breaks=99)
    assert passes(watch, intake, mono, LEASE_GRACE_S - 3) == []


def test_a_replica_that_stops_leading_forgets_what_it_saw() -> None:
    reads = caches()
    leads = [True]
    intake, mono = Queue(), Clock()
    watch = WatchPass(
        reads, intake, leader=lambda: leads[0], clock=lambda: NOW + mono.t, nodes=NodeWatch(mono)
    )  # type: ignore[arg-type]
    passes(watch, intake, mono, LEASE_GRACE_S - 3)
    leads[0] = False
    passes(watch, intake, mono, 3)
    leads[0] = True
    assert passes(watch, intake, mono, LEASE_GRACE_S - 3) == []


def test_the_records_of_a_gang_restart_make_the_old_gangs_termination_history() -> None:
    created = rfc3339(NOW - 3600)
    old = pod("ml", "llama-old", SELECTED, metadata={"creationTimestamp": created}, spec={"nodeName": "gpu-a"},
              status={"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {"terminated": {
                  "exitCode": 137, "reason": "OOMKilled", "finishedAt": rfc3339(NOW - 1800)}}}]})  # fmt: skip
    restarted = {
        "id": "r1", "fingerprint": "f", "alert": "TrainingInterrupted", "phase": "Succeeded", "dryRun": False,
        "created": rfc3339(NOW - 1700),
        "steps": [{"kind": "RestartGang", "phase": "Succeeded", "progress": {"count": 2, "createdUpTo": int(NOW - 3600)}}],
    }  # fmt: skip
    without = caches(old)
    watch, intake, _ = make_pass(without)
    watch.run()
    assert [(s.alertname, s.labels.get("pod")) for s in intake.got] == [("TrainingInterrupted", "llama-old")]
    with_record = caches(old, {**MONITOR, "status": {"remediations": [restarted]}})
    watch, intake, _ = make_pass(with_record)
    watch.run()
    assert intake.got == []


# ---- planned maintenance -------------------------------------------------------------------------


def test_a_persons_cordon_of_a_node_of_the_job_is_signalled_with_one_date_every_pass() -> None:
    cordoned = {**node("gpu-a"), "spec": {"unschedulable": True}}
    reads = caches()
    reads.put(cordoned)
    watch, intake, mono = make_pass(reads)
    watch.run()
    mono.t += 3
    watch.run()
    got = [s for s in intake.got if s.alertname == "NodeMaintenancePlanned"]
    assert [s.node for s in got] == ["gpu-a", "gpu-a"]
    assert got[0].starts_at == got[1].starts_at == NOW + 100


def test_a_bad_maintenance_annotation_is_logged_once_naming_the_annotation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = {
        **node("gpu-a"),
        "metadata": {"name": "gpu-a", "annotations": {"trainguard.io/maintenance-at": "soon"}},
    }
    reads = caches()
    reads.put(bad)
    watch, intake, mono = make_pass(reads)
    watch.run()
    mono.t += 3
    watch.run()
    said = [r.getMessage() for r in caplog.records if "trainguard.io/maintenance-at" in r.getMessage()]
    assert len(said) == 1
    assert "RFC 3339" in said[0]
    assert not [s for s in intake.got if s.alertname == "NodeMaintenancePlanned"]
