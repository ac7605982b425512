"""The leader's periodic work: a resync of every monitor and the pod count, without kopf timers
(whose finalizers outlive an uninstalled operator)."""

from __future__ import annotations

import threading
import time
from typing import Any

import kopf

from tests.clock import Clock
from tests.conftest import MONITOR, merged
from tests.kube.fakes import FakeKube, pod
from tests.kube.owners import jobset
from trainguard.controller.handlers import LOCKS, MonitorLocks, register
from trainguard.controller.periodic import Loop, Periodic

SELECTED = MONITOR["spec"]["selector"]["matchLabels"]
PODS = [pod("ml", f"llama-{i}", SELECTED, "trainer", "trainguard-exporter") for i in range(3)]


def fake(*monitors: dict[str, Any]) -> FakeKube:
    """The watch caches and the API with `monitors` (the test monitor by default) and three monitored pods."""
    return FakeKube(*(monitors or [MONITOR]), *PODS)


def periodic(leader: bool, clock: Clock, kube: FakeKube, done: list[str]) -> Periodic:
    return Periodic(kube, kube, leader=lambda: leader, reconcile=lambda ns, n: done.append(f"{ns}/{n}"),
                    lock=LOCKS, resync_s=120, pods_s=15, clock=clock)  # fmt: skip


def test_the_leader_resyncs_every_monitor_on_its_interval() -> None:
    clock, kube, done = Clock(1000.0), fake(), []
    p = periodic(True, clock, kube, done)
    p.tick()
    assert done == []
    clock.now += 120
    p.tick()
    assert done == ["ml/llama-pretrain"]
    clock.now += 60
    p.tick()
    assert done == ["ml/llama-pretrain"], "not again before the interval"


def test_pods_are_counted_and_written_only_when_the_count_changes() -> None:
    clock, kube, done = Clock(1000.0), fake(), []
    p = periodic(True, clock, kube, done)
    clock.now += 5
    p.tick()
    assert kube.status_writes == [{"podsMonitored": 3, "podsUnmonitored": 0}]
    clock.now += 15
    p.tick()
    assert kube.status_writes == [{"podsMonitored": 3, "podsUnmonitored": 0}]


def test_pods_without_the_exporter_are_counted_and_named_in_a_warning_once_each_time_they_grow() -> None:
    """A pod admitted before the webhook's cache held its monitor, or while the webhook was down, runs
    unwatched: the pod count says how many, and an Event names them and the fix."""
    bare = pod("ml", "llama-9", SELECTED, "trainer", status={"phase": "Running"})
    done_pod = pod("ml", "llama-old", SELECTED, "trainer", status={"phase": "Succeeded"})
    kube = FakeKube(MONITOR, *PODS, bare, done_pod)
    said: list[tuple[str, str]] = []
    clock = Clock(1000.0)
    p = Periodic(kube, kube, leader=lambda: True, reconcile=lambda ns, n: None, lock=LOCKS, pods_s=15,
                 clock=clock, announce=lambda body, reason, message: said.append((reason, message)))  # fmt: skip
    clock.now += 15
    p.tick()
    assert kube.status_writes == [{"podsMonitored": 3, "podsUnmonitored": 1}], "a finished pod is not counted"
    assert [r for r, _ in said] == ["PodsWithoutExporter"]
    assert "(llama-9)" in said[0][1] and "delete them" in said[0][1], said
    kube.put(merged(MONITOR, **{"status": {"podsMonitored": 3, "podsUnmonitored": 1}}))
    clock.now += 15
    p.tick()
    assert len(said) == 1, "said once while the set does not grow"
    kube.put(pod("ml", "llama-10", SELECTED, "trainer", status={"phase": "Pending"}))
    clock.now += 15
    p.tick()
    assert len(said) == 2 and "2 pod(s)" in said[1][1] and "llama-10, llama-9" in said[1][1], said


def test_the_leader_keeps_the_namespace_labels_at_the_pod_count_cadence() -> None:
    clock, kube, sweeps = Clock(1000.0), fake(), []
    for leader in (True, False):
        p = Periodic(kube, kube, leader=lambda leader=leader: leader, reconcile=lambda ns, n: None, lock=LOCKS,
                     resync_s=120, pods_s=15, clock=clock, label_namespaces=lambda: sweeps.append(clock.now))  # fmt: skip
        for _ in range(3):
            clock.now += 15
            p.tick()
    assert len(sweeps) == 3, "on every pod count of the leader, never on a standby"


def test_a_standby_does_nothing() -> None:
    clock, kube, done = Clock(1000.0), fake(), []
    p = periodic(False, clock, kube, done)
    clock.now += 1000
    p.tick()
    assert done == [] and kube.status_writes == []


def test_one_failing_monitor_does_not_stop_the_pass() -> None:
    clock = Clock(1000.0)
    kube = fake(
        MONITOR | {"metadata": {"name": "a", "namespace": "ml"}},
        MONITOR | {"metadata": {"name": "b", "namespace": "ml"}},
    )
    done: list[str] = []

    def reconcile(ns: str, name: str) -> None:
        if name == "a":
            raise RuntimeError("boom")
        done.append(name)

    p = Periodic(
        kube, kube, leader=lambda: True, reconcile=reconcile, lock=LOCKS, resync_s=1, pods_s=100, clock=clock
    )
    clock.now += 1
    p.tick()
    assert done == ["b"]


def test_no_handler_asks_kopf_for_a_finalizer() -> None:
    """kopf puts a finalizer on every object with a timer, daemon or mandatory deletion handler: one
    left by an uninstalled operator blocks the monitor's (and its namespace's) deletion."""
    registry = kopf.OperatorRegistry()
    register(registry)
    spawning = list(registry._spawning.get_all_handlers())
    changing = [h for h in registry._changing.get_all_handlers() if h.requires_finalizer]
    assert spawning == [] and changing == []


def test_locks_of_gone_monitors_are_pruned() -> None:
    locks = MonitorLocks()
    for i in range(100):
        with locks("ml", f"m{i}"):
            pass
    assert len(locks) == 0
    held = locks("ml", "kept")
    assert locks("ml", "kept") is held, "the same lock while someone holds it"
    assert len(locks) == 1


def test_a_stuck_report_pass_does_not_hold_back_the_p0_loop() -> None:
    """Each Loop is a thread: a report pass stuck on a slow Prometheus (here: until released) leaves the
    P0 loop's passes running at their cadence."""
    release, p0_passes = threading.Event(), []
    reports = Loop("reports", 0.01, lambda: release.wait(10), leader=lambda: True, first_s=0)
    p0 = Loop("p0", 0.01, lambda: p0_passes.append(time.monotonic()), leader=lambda: True, first_s=0)
    reports.start(), p0.start()
    try:
        deadline = time.monotonic() + 5
        while len(p0_passes) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(p0_passes) >= 5, "the P0 loop waited for the report pass"
        assert not release.is_set()
    finally:
        release.set()
        reports.stop(), p0.stop()


def test_a_loop_acts_on_the_leader_only_and_survives_a_failed_pass() -> None:
    calls: list[str] = []
    leading = False

    def work() -> None:
        calls.append("pass")
        raise RuntimeError("Alertmanager down")

    loop = Loop("p0", 15.0, work, leader=lambda: leading)
    loop.tick()
    assert calls == []
    leading = True
    loop.tick()
    loop.tick()  # the failure is logged, and the next pass runs all the same
    assert calls == ["pass", "pass"]


def test_a_monitor_whose_workload_appears_or_goes_is_reconciled_at_the_next_pod_count() -> None:
    body = merged(MONITOR, **{"spec.workloadRef": {"kind": "JobSet", "name": "llama-pretrain"}})
    body["status"] = {"conditions": [{"type": "WorkloadResolved", "status": "False", "reason": "WorkloadNotFound",
                                      "message": "spec.workloadRef: JobSet ml/llama-pretrain not found: create it, "
                                      "or fix spec.workloadRef.name"}]}  # fmt: skip
    clock, kube, done = Clock(1000.0), fake(body), []
    p = periodic(True, clock, kube, done)
    clock.now += 5
    p.tick()
    assert done == [], "still missing: nothing to redo"
    kube.put(jobset(name="llama-pretrain"))
    clock.now += 15
    p.tick()
    assert done == ["ml/llama-pretrain"], "created after its monitor: Degraded is cleared within a pass"


def test_a_monitor_degraded_for_another_reason_is_left_to_its_resync() -> None:
    body = merged(MONITOR, **{"spec.workloadRef": {"kind": "JobSet", "name": "llama-pretrain"}})
    body["status"] = {"conditions": [{"type": "Degraded", "status": "True", "reason": "PolicyNotFound"}]}
    clock, kube, done = Clock(1000.0), fake(body), []
    p = periodic(True, clock, kube, done)
    clock.now += 5
    p.tick()
    assert done == []
