"""GPUNodeDown from node state judged by the operator's own clock: a node is down when the operator has
seen its Lease unchanged for the grace, or its Ready condition not True for the minimum, counting only
time in which its caches heard the API. Driven pass by pass through the WatchPass's NodeWatch with a fake
monotonic clock, the decision itself being detect.sight and detect.node_faults (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.conftest import monitor as make_monitor
from trainguard.catalog.events import fingerprint
from trainguard.catalog.severity import grade_labels
from trainguard.kube.objects import Hearing
from trainguard.remediation import detect
from trainguard.remediation.detect import LEASE_GRACE_S, NOT_READY_MIN_S, NodeDownSettings, node_faults
from trainguard.remediation.model import Signal
from trainguard.remediation.passes import NodeWatch
from trainguard.times import parse_rfc3339, rfc3339

WALL0 = parse_rfc3339("2023-11-14T22:20:00Z")
MONO0 = 5_000.0
PASS_S = 3.0
"""The detection pass's default period (--detect-seconds)."""
RENEW_S = 10.0
"""The kubelet's Lease renew interval."""
MONITOR = make_monitor(**{"spec.workloadRef": {"kind": "Job", "name": "llama-pretrain"}})
LABELS = {"app": "llama-pretrain", "batch.kubernetes.io/job-name": "llama-pretrain"}


def node(name: str, ready: str = "True", since: str = "2023-11-01T08:00:00Z") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"conditions": [
        {"type": "Ready", "status": ready, "reason": "KubeletReady" if ready == "True" else "KubeletNotReady",
         "lastTransitionTime": since}]}}  # fmt: skip


def lease(name: str, renewed: float, version: int) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease", "resourceVersion": str(version)},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": rfc3339(renewed)}}  # fmt: skip


def pod(name: str, on: str, phase: str = "Running") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml", "labels": LABELS},
            "spec": {"nodeName": on}, "status": {"phase": phase}}  # fmt: skip


PODS = [pod("llama-pretrain-0-x7k2p", "gpu-a"), pod("llama-pretrain-1-q9z4m", "gpu-b")]
HEARING = Hearing(synced=True, leases=2, leases_heard_s=1.0, breaks=0)


@dataclass
class Cluster:
    """What the caches show, second by second: each node's Ready condition and Lease, each Lease renewed
    by its kubelet every RENEW_S (stamped with the kubelet's own clock, `skew` off ours) until it dies."""

    t: float = 0.0
    """Seconds since the start, on the operator's clocks."""
    ready: dict[str, tuple[str, str]] = field(
        default_factory=lambda: {"gpu-a": ("True", ""), "gpu-b": ("True", "")}
    )
    skew: dict[str, float] = field(default_factory=dict)
    dead_at: dict[str, float] = field(default_factory=dict)
    phase: dict[str, float] = field(default_factory=dict)
    """When in its renew interval each kubelet renews (seconds after t=0)."""
    hearing: Hearing | None = HEARING
    outage: tuple[float, float] | None = None
    """(start, end) of an apiserver outage: nothing renews in it, and every kubelet within 5 s of its end."""

    def renewed(self, name: str) -> tuple[float, int] | None:
        """(renewTime on the kubelet's clock, resourceVersion) of the Lease's last renewal by now."""
        now = self.t
        if self.outage is not None and self.outage[0] <= now < self.outage[1] + 5:
            now = self.outage[0]
        last_alive = min(now, self.dead_at.get(name, float("inf")))
        first = self.phase.get(name, 0.0)
        if last_alive < first:
            return None
        n = int((last_alive - first) // RENEW_S)
        at = first + n * RENEW_S
        return WALL0 + at + self.skew.get(name, 0.0), n + 1

    def nodes(self) -> list[dict[str, Any]]:
        out = []
        for name, (status, since) in sorted(self.ready.items()):
            out.append(node(name, status, since or "2023-11-01T08:00:00Z"))
        return out

    def leases(self) -> list[dict[str, Any]]:
        return [lease(n, *r) for n in sorted(self.ready) if (r := self.renewed(n)) is not None]


@dataclass
class Operator:
    cluster: Cluster
    settings: NodeDownSettings = field(default_factory=NodeDownSettings)
    pods: list[dict[str, Any]] = field(default_factory=lambda: PODS)
    watch: NodeWatch = field(init=False)

    def __post_init__(self) -> None:
        self.watch = NodeWatch(clock=lambda: MONO0 + self.cluster.t)

    def look(self) -> list[Signal]:
        c = self.cluster
        wall = WALL0 + c.t
        sightings, since = self.watch.look(c.nodes(), c.leases(), c.hearing, wall)
        return node_faults(
            c.nodes(), self.pods, MONITOR, sightings, since=since, now=wall, settings=self.settings
        )

    def run_until(self, end: float, start: float | None = None) -> dict[str, float]:
        """Pass every PASS_S from `start` to `end`: when each node was first flagged (seconds)."""
        flagged: dict[str, float] = {}
        t = self.cluster.t if start is None else start
        while t <= end:
            self.cluster.t = t
            for s in self.look():
                flagged.setdefault(s.node, t)
            t += PASS_S
        return flagged


# ---- the Lease -------------------------------------------------------------------------------------


@pytest.mark.parametrize("pass_offset", [0.0, 0.5, 1.5, 2.9])
@pytest.mark.parametrize("death_after_renewal", [0.01, 5.0, 9.99])
def test_a_node_that_stops_renewing_is_down_within_21_seconds(
    pass_offset: float, death_after_renewal: float
) -> None:
    """The kubelet renews every 10 s, then dies: the pass every 3 s flags its node at most 3 + 18 = 21 s
    after the death (the pass that first sees the last renewal, then the grace), leaving the planner and
    the cordon the rest of the 30 s. Never before the grace has passed since the last renewal."""
    death = 60.0 + death_after_renewal
    cluster = Cluster(dead_at={"gpu-a": death})
    flagged = Operator(cluster).run_until(death + 40, start=pass_offset)
    assert list(flagged) == ["gpu-a"]
    assert flagged["gpu-a"] - death <= PASS_S + LEASE_GRACE_S
    assert flagged["gpu-a"] - 60.0 >= LEASE_GRACE_S


def test_a_kubelet_whose_clock_is_90_seconds_behind_is_not_down() -> None:
    """Its renewTime reads 90 s (and 130 s past its expiry, by our clock) in the past at every renewal,
    but it changes every 10 s: only a change, never the time written, counts."""
    cluster = Cluster(skew={"gpu-a": -90.0, "gpu-b": +90.0})
    assert Operator(cluster).run_until(300) == {}


def test_a_dead_nodes_signal_keeps_its_time_and_is_dated_by_the_earlier_of_its_renewal_and_our_sighting() -> (
    None
):
    cluster = Cluster(dead_at={"gpu-a": 30.0}, skew={"gpu-a": +90.0})
    op = Operator(cluster)
    op.run_until(60)
    first = op.look()
    op.run_until(90, start=63.0)
    later = op.look()
    assert first == later and len(first) == 1
    sig = first[0]
    # the kubelet (90 s ahead) stamped its last renewal at 30 + 90: our first sighting of it, at the pass
    # of t=30, is earlier and dates the fault
    assert sig.starts_at == WALL0 + 30.0
    assert sig.labels == {"alertname": "GPUNodeDown", **grade_labels("P0"), "namespace": "ml",
                          "training_job": "llama-pretrain", "node": "gpu-a"}  # fmt: skip
    assert sig.fingerprint == fingerprint(
        {"alertname": "GPUNodeDown", "namespace": "ml", "training_job": "llama-pretrain", "node": "gpu-a"}
    )
    assert "Lease unchanged" in sig.annotations["description"]


def test_a_node_without_a_lease_gives_no_lease_evidence() -> None:
    cluster = Cluster(phase={"gpu-a": 1e9})  # never renewed: no Lease in the cache
    assert Operator(cluster).run_until(120) == {}


# ---- the Ready condition -------------------------------------------------------------------------


def test_a_5_second_not_ready_blip_does_nothing() -> None:
    cluster = Cluster()
    op = Operator(cluster)
    op.run_until(30)
    cluster.ready["gpu-a"] = ("False", rfc3339(WALL0 + 31))
    flagged = op.run_until(36, start=31.0)  # seen at 31 and 34
    cluster.ready["gpu-a"] = ("True", rfc3339(WALL0 + 36))
    flagged |= op.run_until(120, start=37.0)
    assert flagged == {}


def test_not_ready_held_for_the_minimum_is_down_timed_from_our_first_sighting() -> None:
    """Its lastTransitionTime, by a kubelet clock an hour behind, says it has been NotReady for an hour:
    the wait runs from when the operator first saw it."""
    cluster = Cluster()
    op = Operator(cluster)
    op.run_until(30)
    cluster.ready["gpu-b"] = ("False", rfc3339(WALL0 + 31 - 3600))
    flagged = op.run_until(80, start=31.0)
    assert flagged == {"gpu-b": 31.0 + 4 * PASS_S}  # the first pass at least NOT_READY_MIN_S after 31
    assert 4 * PASS_S >= NOT_READY_MIN_S > 3 * PASS_S
    sig = op.look()[0]
    assert "NotReady (KubeletNotReady)" in sig.annotations["description"]
    assert sig.starts_at == WALL0 + 31 - 3600  # dated by the earlier: the condition's own time


def test_a_new_transition_between_two_passes_restarts_the_wait() -> None:
    """NotReady, Ready and NotReady again between two passes: the operator never saw it Ready, but the
    changed lastTransitionTime says it was; the wait starts again."""
    cluster = Cluster()
    op = Operator(cluster)
    cluster.ready["gpu-a"] = ("False", rfc3339(WALL0))
    assert op.run_until(9) == {}
    cluster.ready["gpu-a"] = ("False", rfc3339(WALL0 + 10))
    flagged = op.run_until(40, start=12.0)
    assert flagged == {"gpu-a": 12.0 + 4 * PASS_S}


def test_unknown_from_the_node_lifecycle_controller_is_down_like_not_ready() -> None:
    cluster = Cluster()
    cluster.ready["gpu-a"] = ("Unknown", rfc3339(WALL0))
    op = Operator(cluster)
    assert op.run_until(15) == {"gpu-a": 12.0}
    assert "Ready Unknown" in op.look()[0].annotations["description"]


# ---- what the caches heard -------------------------------------------------------------------------


def test_a_two_minute_apiserver_outage_flags_no_node_and_the_grace_restarts_after_it() -> None:
    """8 nodes; the apiserver goes away for 120 s: the caches' watches fail (breaks grow) and hear
    nothing, no Lease changes. No node is flagged during the outage nor after it, as the kubelets renew
    again within 5 s of its end; a node that died during it is flagged a full grace after the caches
    hear again, never earlier."""
    names = [f"gpu-{i}" for i in "abcdefgh"]
    start, end = 61.0, 181.0
    cluster = Cluster(ready={n: ("True", "") for n in names}, dead_at={"gpu-h": 100.0}, outage=(start, end))
    op = Operator(cluster, pods=[pod(f"llama-pretrain-{i}", n) for i, n in enumerate(names)])
    assert op.run_until(60) == {}
    flagged: dict[str, float] = {}
    t, breaks = start, 0
    while t < end:
        breaks += 1  # the watches fail and retry
        cluster.hearing = Hearing(synced=True, leases=8, leases_heard_s=t - start, breaks=breaks)
        flagged |= op.run_until(t, start=t)
        t += PASS_S
    assert flagged == {}
    cluster.hearing = Hearing(synced=True, leases=8, leases_heard_s=0.5, breaks=breaks + 1)  # listed again
    after = op.run_until(end + 60, start=end)
    assert list(after) == ["gpu-h"], after
    assert after["gpu-h"] - end >= LEASE_GRACE_S


def test_a_silent_lease_cache_restarts_the_grace_without_any_error() -> None:
    """A watch whose connection died without a word: no error, the Lease cache just stops hearing."""
    cluster = Cluster(dead_at={"gpu-a": 0.0, "gpu-b": 0.0})
    op = Operator(cluster)
    t = 0.0
    while t <= 120:
        cluster.t = t
        cluster.hearing = Hearing(synced=True, leases=2, leases_heard_s=t, breaks=0)
        assert op.look() == [], t
        t += PASS_S


@pytest.mark.parametrize(
    ("case", "hearing"),
    [
        ("a cache not yet listed", Hearing(synced=False, leases=0, leases_heard_s=0.0, breaks=0)),
        ("the Lease cache read failed (Stale, NotSynced)", None),
    ],
)
def test_no_node_is_judged_while_the_caches_cannot_be_trusted(case: str, hearing: Hearing | None) -> None:
    cluster = Cluster(dead_at={"gpu-a": 0.0}, hearing=hearing)
    assert Operator(cluster).run_until(120) == {}, case


def test_passes_too_far_apart_start_the_sightings_again() -> None:
    """A pass that stalled (or a replica that did not lead meanwhile) cannot vouch for the time between."""
    cluster = Cluster(dead_at={"gpu-a": 0.0})
    op = Operator(cluster)
    cluster.t = 1.0
    op.look()
    resumed = 1.0 + detect.HEARING_S + 5
    cluster.t = resumed
    assert op.look() == []  # 20 s unchanged, but the operator looked only at its ends
    flagged = op.run_until(resumed + 30, start=resumed)
    assert flagged == {"gpu-a": resumed + 6 * PASS_S}  # the first pass LEASE_GRACE_S after it resumed


def test_continuity_is_a_pure_reading_of_two_looks() -> None:
    ok = Hearing(synced=True, leases=3, leases_heard_s=2.0, breaks=4)
    assert detect.continuous(ok, ok, PASS_S)
    assert not detect.continuous(None, ok, PASS_S)
    assert not detect.continuous(ok, Hearing(True, 3, 2.0, 5), PASS_S)  # a list, error or dropped watch
    assert not detect.continuous(ok, Hearing(True, 3, 16.0, 4), PASS_S)  # the Lease cache went quiet
    assert not detect.continuous(ok, ok, 16.0)  # the looks too far apart
    assert detect.hearing(Hearing(True, 0, 999.0, 4))  # no Lease to hear: only the Ready conditions count
    assert not detect.hearing(Hearing(False, 3, 0.0, 4))


# ---- whose node ------------------------------------------------------------------------------------


def test_only_nodes_that_run_a_live_pod_of_the_job_are_reported() -> None:
    cluster = Cluster(dead_at={"gpu-a": 0.0, "gpu-b": 0.0})
    other = pod("bert-0", "gpu-b")
    other["metadata"]["labels"] = {"app": "bert"}
    op = Operator(cluster, pods=[pod("llama-pretrain-0", "gpu-a", phase="Succeeded"), other])
    assert op.run_until(60) == {}


def test_the_settings_are_the_operators_to_change() -> None:
    cluster = Cluster(dead_at={"gpu-a": 0.0})
    flagged = Operator(cluster, settings=NodeDownSettings(lease_grace_s=45.0)).run_until(90)
    assert flagged["gpu-a"] >= 45.0
    assert NodeDownSettings() == NodeDownSettings(lease_grace_s=18.0, not_ready_min_s=12.0)
    assert NOT_READY_MIN_S == 12.0
