"""The planner decides one signal at a time on cluster state read from the watch caches, which may be a
moment behind its own plans: a cordon it planned counts against the cluster-wide cap before the node's
annotation reaches the cache, whichever monitor's plan it was. Deciding a signal removes it from the
monitor's pending signals, in the record's own write; a transient API error is retried with backoff,
and a signal not decided stays pending."""

from __future__ import annotations

import copy
import threading
from dataclasses import replace
from typing import Any

from tests.conftest import MONITOR, POLICY
from tests.kube.fakes import FakeKube, refused
from tests.remediation.fakes import KEY, loop_rig, p0_signal
from tests.remediation.test_intake import JOB, NS, pending_in
from tests.remediation.test_pending import copies
from trainguard.remediation.model import Signal
from trainguard.remediation.plan import record_id
from trainguard.remediation.planner import RETRY_DELAYS_S, Planner
from trainguard.remediation.store import RecordStore


def monitors() -> FakeKube:
    """Two jobs' monitors, each with a cap of one cordoned node cluster-wide."""
    bodies = []
    for name in ("job-a", "job-b"):
        body = copy.deepcopy(MONITOR)
        body["metadata"].update(name=name, uid=f"u-{name}")
        body["spec"]["remediation"] = {"maxCordonedNodes": 1}
        bodies.append(body)
    return FakeKube(*bodies)


class LaggingNodeCache:
    """Nodes as a watch cache that has not yet seen any cordon."""

    def gpu_node_count(self) -> int:
        return 10

    def cordon_history(self) -> list[tuple[str, float]]:
        return []

    def spares(self) -> list[str]:
        return []

    def job_nodes(self, namespace: str, selector: Any) -> set[str]:
        return {"gpu-a", "gpu-b", "gpu-1"}

    def unready_nodes(self) -> set[str]:
        return set()

    def held_cordons(self) -> list[str]:
        return []

    def pools(self, label: str) -> list[tuple[str, str, bool]]:
        return [(f"gpu-{i}", "", True) for i in range(10)]


class NoDispatch:
    """A dispatcher whose records stay under way (`done` empties them)."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def dispatch(self, record: Any, *args: Any, **kw: Any) -> bool:
        self.ids.add(record["id"])
        return True

    def ended_since(self, record_id: str) -> float | None:
        return None if record_id in self.ids else 60.0

    def done(self) -> None:
        self.ids.clear()


def signal_for(job: str, node: str) -> Signal:
    s = p0_signal("GPUCriticalXid", node)
    return Signal(s.alertname, s.severity, {**s.labels, "training_job": job}, f"{s.fingerprint}-{job}", s.source,
                  s.starts_at)  # fmt: skip


def test_a_planned_cordon_counts_against_the_cap_before_the_cache_shows_it() -> None:
    kube = monitors()
    locks: dict[tuple[str, str], threading.RLock] = {}
    store = RecordStore(kube, lambda ns, n: locks.setdefault((ns, n), threading.RLock()), key=lambda: KEY)  # type: ignore[arg-type]
    planner = Planner(
        store, LaggingNodeCache(), NoDispatch(), leader=lambda: True, clock=lambda: 1_700_000_000.0
    )  # type: ignore[arg-type]

    first = planner.handle(signal_for("job-a", "gpu-a"))
    second = planner.handle(signal_for("job-b", "gpu-b"))

    assert first is not None and "Cordon" in [s["kind"] for s in first["steps"]]
    assert second is not None and second["skipped"].startswith("cordon cap reached"), second
    assert [s["kind"] for s in second["steps"]] == ["Notify"]


def planner_for(kube: FakeKube, policy: Any = lambda ns, name: None) -> Planner:
    locks: dict[tuple[str, str], threading.RLock] = {}
    store = RecordStore(kube, lambda ns, n: locks.setdefault((ns, n), threading.RLock()), key=lambda: KEY)  # type: ignore[arg-type]
    return Planner(store, LaggingNodeCache(), NoDispatch(), leader=lambda: True,  # type: ignore[arg-type]
                   clock=lambda: 1_700_000_000.0, policy=policy)  # fmt: skip


def test_a_signal_naming_a_node_the_job_is_not_on_leaves_no_record_and_no_cordon() -> None:
    kube = monitors()
    assert planner_for(kube).handle(signal_for("job-a", "gpu-c")) is None
    assert not (kube.get_monitor("ml", "job-a") or {}).get("status", {}).get("remediations")


def test_the_fast_path_follows_the_policy_that_disabled_or_lowered_its_alert() -> None:
    """The sidecar posts the catalogue's P0; the monitor's AlertPolicy has the last word, as it has for
    the rule the alert would otherwise come from."""

    def policy(alerts: list[dict[str, Any]]) -> Any:
        return lambda ns, name: {**copy.deepcopy(POLICY), "spec": {"alerts": alerts}}

    kube = monitors()
    off = planner_for(kube, policy([{"name": "GPUCriticalXid", "enabled": False}]))
    assert off.handle(signal_for("job-a", "gpu-a")) is None
    lowered = planner_for(kube, policy([{"name": "GPUCriticalXid", "severity": "P2"}]))
    assert lowered.handle(signal_for("job-a", "gpu-a")) is None
    assert not (kube.get_monitor("ml", "job-a") or {}).get("status", {}).get("remediations")
    kept = planner_for(kube, policy([{"name": "GPUCriticalXid", "severity": "P0"}]))
    record = kept.handle(signal_for("job-a", "gpu-a"))
    assert record is not None and record["steps"][0]["kind"] == "ConfirmFault"


def test_mode_off_plans_nothing_and_an_open_breaker_withholds_the_cordon() -> None:
    kube = monitors()
    locks: dict[tuple[str, str], threading.RLock] = {}
    store = RecordStore(kube, lambda ns, n: locks.setdefault((ns, n), threading.RLock()), key=lambda: KEY)  # type: ignore[arg-type]
    mode = ["off"]
    planner = Planner(store, LaggingNodeCache(), NoDispatch(), leader=lambda: True,  # type: ignore[arg-type]
                      clock=lambda: 1_700_000_000.0, mode=lambda: mode[0],
                      breaker=lambda: {"": "5 of 10 node(s) look down at once"})  # fmt: skip

    assert planner.handle(signal_for("job-a", "gpu-1")) is None
    assert kube.status_writes == [] and kube.events == [], "nothing written"
    mode[0] = "act"
    record = planner.handle(signal_for("job-a", "gpu-1"))
    assert record is not None and record["skipped"].startswith("circuit breaker open for all GPU nodes"), (
        record
    )
    assert [s["kind"] for s in record["steps"]] == ["Notify"]


# ---- the pending signals --------------------------------------------------------------------------


def test_a_saved_record_removes_the_faults_pending_entries_in_the_same_write() -> None:
    responder, kube, _ = loop_rig()
    am, sidecar = copies()[0], copies()[2]
    responder.receive([sidecar])
    writes = len(kube.status_writes)
    assert responder.handle(am) is not None
    record_write = kube.status_writes[writes]
    assert [r["phase"] for r in record_write["remediations"]] == ["Planned"]
    assert record_write["pendingSignals"] == [], "the record and the removal are one write"
    assert pending_in(kube) == []


def test_a_quiet_decision_removes_only_its_own_entry() -> None:
    responder, kube, _ = loop_rig()
    first = p0_signal("GPUCriticalXid")
    responder.handle(first)
    assert responder.idle()
    again, other = replace(first, starts_at=first.starts_at + 1), p0_signal("GPULost", "gpu-b")
    responder.receive([again, other])
    assert len(pending_in(kube)) == 2
    assert responder.handle(again) is None  # a duplicate of the record: quiet
    assert [e["alertname"] for e in pending_in(kube)] == ["GPULost"]


def test_a_standby_leaves_the_entry_for_the_leader() -> None:
    responder, kube, _ = loop_rig(leader=False)
    signal = p0_signal("GPUCriticalXid")
    responder.receive([signal])
    assert responder.handle(signal) is None
    assert [e["id"] for e in pending_in(kube)] == [record_id(signal)]


class Flaky:
    """kube.Kube's monitor read failing `times` times with `exc`, then reading."""

    def __init__(self, kube: FakeKube, exc: Exception, times: int) -> None:
        self.kube, self.exc, self.left = kube, exc, times
        self.get = kube.get_monitor

    def __call__(self, namespace: str, name: str) -> Any:
        if self.left:
            self.left -= 1
            raise self.exc
        return self.get(namespace, name)


def test_a_transient_api_error_is_retried_with_backoff() -> None:
    responder, kube, _ = loop_rig()
    signal = p0_signal("GPUCriticalXid")
    responder.receive([signal])
    kube.get_monitor = Flaky(kube, refused(503, "etcdserver: request timed out"), 2)  # type: ignore[method-assign]
    waits: list[float] = []
    assert responder.planner.try_handle(signal, waits.append)
    assert waits == list(RETRY_DELAYS_S[:2])
    assert len(kube.records(NS, JOB)) == 1 and pending_in(kube) == []


def test_a_refusal_is_not_retried_and_an_outage_is_given_up_on_with_the_entry_kept() -> None:
    for exc, times, tries in ((refused(403, "forbidden"), 1, 0), (refused(503, "unavailable"), 99, 5)):
        responder, kube, _ = loop_rig()
        signal = p0_signal("GPUCriticalXid")
        responder.receive([signal])
        kube.get_monitor = Flaky(kube, exc, times)  # type: ignore[method-assign]
        waits: list[float] = []
        assert not responder.planner.try_handle(signal, waits.append)
        assert len(waits) == tries
        assert kube.records(NS, JOB) == [] and [e["id"] for e in pending_in(kube)] == [record_id(signal)]


def test_a_planned_cordon_whose_record_ended_without_it_stops_counting() -> None:
    """A record that ended without cordoning (its GPU fault unconfirmed, say), or a node uncordoned before
    the cache was read again, no longer holds the cap once the cache had time to show the cordon."""
    kube = monitors()
    locks: dict[tuple[str, str], threading.RLock] = {}
    store = RecordStore(kube, lambda ns, n: locks.setdefault((ns, n), threading.RLock()), key=lambda: KEY)  # type: ignore[arg-type]
    now = [1_700_000_000.0]
    dispatch = NoDispatch()
    planner = Planner(store, LaggingNodeCache(), dispatch, leader=lambda: True,  # type: ignore[arg-type]
                      clock=lambda: now[0])  # fmt: skip
    assert planner.handle(signal_for("job-a", "gpu-a")) is not None
    capped = planner.handle(signal_for("job-b", "gpu-b"))
    assert capped is not None and capped["skipped"].startswith("cordon cap reached"), "still under way"
    dispatch.done()  # the first record ended a minute ago; the cache never showed gpu-a cordoned
    acted = planner.handle(signal_for("job-b", "gpu-1"))  # another fault (gpu-b's was decided: capped)
    assert acted is not None and "Cordon" in [s["kind"] for s in acted["steps"]], acted
