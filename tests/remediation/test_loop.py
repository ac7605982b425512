"""The P0 loop wired in the operator: a signal is planned on the leader, its record written to the
monitor's status before anything happens, carried out once, and resumed after a crash. The cluster is
the remediation tests' in-memory fake (it behaves like the real edge, see tests/remediation)."""

from __future__ import annotations

import copy
import threading
from typing import Any

from tests.conftest import MONITOR
from tests.remediation.test_executor import TOKEN, Clock, FakeCluster, _signal
from trainguard.remediation.executor import Executor
from trainguard.remediation.loop import RemediationLoop
from trainguard.remediation.model import Phase


class FakeKube:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = copy.deepcopy(body)
        self.status_writes: list[list[dict[str, Any]]] = []
        self.events: list[tuple[str, str]] = []

    def get_monitor(self, namespace: str, name: str) -> dict[str, Any] | None:
        meta = self.body["metadata"]
        return copy.deepcopy(self.body) if (meta["namespace"], meta["name"]) == (namespace, name) else None

    def monitors(self) -> list[dict[str, Any]]:
        """The watch cache's view (the monitor as last written)."""
        return [copy.deepcopy(self.body)]

    def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.body.setdefault("status", {}).update(copy.deepcopy(status))
        self.status_writes.append(copy.deepcopy(status.get("remediations", [])))

    def post_event(self, body: dict[str, Any], reason: str, message: str, type_: str = "Normal") -> None:
        self.events.append((reason, message))

    @property
    def records(self) -> list[dict[str, Any]]:
        return list((self.body.get("status") or {}).get("remediations") or [])


def rig(leader: bool = True) -> tuple[RemediationLoop, FakeKube, FakeCluster]:
    clock = Clock()
    timeline: list[tuple[str, ...]] = []
    cluster = FakeCluster(clock, timeline)
    body = copy.deepcopy(MONITOR)
    body["metadata"]["uid"] = "u-1"
    body["spec"]["workloadRef"] = {"kind": "Job", "name": "llama-pretrain"}
    body["spec"]["remediation"] = {"emergencyCheckpointTimeout": "30s"}
    kube = FakeKube(body)
    locks: dict[tuple[str, str], threading.RLock] = {}

    def executor(c: Any, save: Any, token_for: Any, **kw: Any) -> Executor:
        return Executor(c, save, lambda ns, name: TOKEN, clock=clock, sleep=clock.sleep, **kw)

    responder = RemediationLoop(
        kube,  # type: ignore[arg-type]
        kube,  # type: ignore[arg-type]
        cluster,
        key=lambda: b"k" * 48,
        leader=lambda: leader,
        lock=lambda ns, name: locks.setdefault((ns, name), threading.RLock()),
        clock=clock,
        executor_factory=executor,
    )
    return responder, kube, cluster


def test_a_node_fault_is_recorded_before_it_is_acted_on_and_carried_out_once() -> None:
    responder, kube, cluster = rig()
    record = responder.handle(_signal("GPUCriticalXid"))
    assert record is not None
    first = kube.status_writes[0]
    assert [r["phase"] for r in first] == [Phase.PLANNED], "written before any step"
    assert responder.idle()
    done = kube.records[0]
    assert done["phase"] == Phase.SUCCEEDED, done
    assert [e[0] for e in cluster.effects].count("cordon") == 1
    assert ("RemediationPlanned" in [r for r, _ in kube.events]) and (
        "RemediationSucceeded" in [r for r, _ in kube.events]
    )


def test_the_same_fault_by_the_other_path_acts_once() -> None:
    responder, kube, cluster = rig()
    responder.handle(_signal("GPUCriticalXid"))
    assert responder.idle()
    assert responder.handle(_signal("GPUCriticalXid")) is None
    assert len(kube.records) == 1
    assert [e[0] for e in cluster.effects].count("cordon") == 1


def test_a_standby_plans_nothing() -> None:
    responder, kube, cluster = rig(leader=False)
    assert responder.handle(_signal("GPUCriticalXid")) is None
    assert kube.records == [] and cluster.effects == []
    assert responder.resume.run() == 0


def test_an_unfinished_record_left_by_a_killed_operator_is_resumed_once() -> None:
    responder, kube, cluster = rig()
    responder.handle(_signal("GPUCriticalXid"))
    assert responder.idle()
    done = kube.records[0]
    # the same record as a killed operator left it: the cordon step was under way
    crashed = copy.deepcopy(done)
    crashed["phase"] = Phase.IN_PROGRESS
    for step in crashed["steps"]:
        if step["kind"] in ("Cordon", "Taint", "RestartGang", "ConfirmPlacement"):
            step["phase"] = Phase.PLANNED
            step["detail"] = ""
    crashed["steps"][1]["phase"] = Phase.IN_PROGRESS
    kube.body["status"]["remediations"] = [crashed]
    before = [e[0] for e in cluster.effects].count("cordon")
    assert responder.resume.run() == 1
    assert responder.idle()
    assert kube.records[0]["phase"] == Phase.SUCCEEDED
    assert [e[0] for e in cluster.effects].count("cordon") == before, "an idempotent cordon: no second change"
    assert responder.resume.run() == 0, "finished records are not resumed"


def test_a_signal_for_a_monitor_that_does_not_exist_does_nothing() -> None:
    responder, kube, _ = rig()
    other = _signal("GPUCriticalXid")
    stranger = type(other)(**{**other.__dict__, "labels": {**other.labels, "training_job": "nobody"}})
    assert responder.handle(stranger) is None
    assert kube.records == []


def test_a_record_the_cache_still_shows_unfinished_is_read_again_before_it_is_resumed() -> None:
    """The watch cache may be a moment behind the executor: a record it shows InProgress that the API
    has as finished must not be carried out a second time."""
    responder, kube, cluster = rig()
    responder.handle(_signal("GPUCriticalXid"))
    assert responder.idle()
    done = kube.records[0]
    stale = copy.deepcopy(done)
    stale["phase"] = Phase.IN_PROGRESS
    stale["steps"][1]["phase"] = Phase.IN_PROGRESS
    cached = copy.deepcopy(kube.body)
    cached["status"]["remediations"] = [stale]
    effects = len(cluster.effects)
    kube.monitors = lambda: [copy.deepcopy(cached)]  # type: ignore[method-assign]
    responder.resume.run()
    assert responder.idle()
    assert kube.records[0] == done and len(cluster.effects) == effects, "the finished record was left alone"
