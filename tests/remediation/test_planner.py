"""The planner decides one signal at a time on cluster state read from the watch caches, which may be a
moment behind its own plans: a cordon it planned counts against the cluster-wide cap before the node's
annotation reaches the cache, whichever monitor's plan it was."""

from __future__ import annotations

import copy
import threading
from typing import Any

from tests.conftest import MONITOR, POLICY
from tests.kube.fakes import FakeKube
from tests.remediation.fakes import KEY, p0_signal
from trainguard.remediation.model import Signal
from trainguard.remediation.planner import Planner
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
    def dispatch(self, *args: Any, **kw: Any) -> bool:
        return True


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
