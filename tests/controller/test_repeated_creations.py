"""A creation kopf hands over again costs no reconcile and no write: the monitor's create handler, called
for a generation this process already reconciled to Ready, does nothing (controller/ready_generations.py),
and a policy's event writes no status the policy holds already. Every other call reconciles.

The handlers are the ones `register` attaches, called as kopf calls them; the API edge is
tests/kube/fakes.py's FakeKube with test_resync.Counted recording each request."""

from __future__ import annotations

from typing import Any

import kopf
from prometheus_client import CollectorRegistry

from tests.conftest import POLICY, monitor_body
from tests.controller.test_resync import RECEIVER, Counted
from tests.kube.fakes import FakeKube
from trainguard.controller.handlers import MonitorSettings, register
from trainguard.controller.metrics import OperatorMetrics
from trainguard.controller.ready_generations import ReadyGenerations


def monitor_handler() -> Any:
    registry = kopf.OperatorRegistry()
    register(registry)
    return next(h.fn for h in registry._changing.get_all_handlers() if h.fn.__name__ == "monitor_changed")


class Operator:
    def __init__(self, *objects: dict[str, Any]) -> None:
        self.kube = FakeKube(*objects)
        self.api = Counted(self.kube)
        self.metrics = OperatorMetrics(CollectorRegistry())
        self.memo = kopf.Memo(kube=self.api, reads=self.kube, receiver=RECEIVER,
                              settings=MonitorSettings(metrics=self.metrics, ready=ReadyGenerations()))  # fmt: skip
        self.handler = monitor_handler()

    def call(self, reason: kopf.Reason, body: dict[str, Any] | None = None) -> list[str]:
        """The handler as kopf calls it; the requests it made."""
        body = body or monitor_body()
        self.api.requests.clear()
        meta = body["metadata"]
        self.handler(namespace=meta["namespace"], name=meta["name"], memo=self.memo, reason=reason,
                     uid=meta.get("uid"), body=kopf.Body(body))  # fmt: skip
        return list(self.api.requests)

    def results(self) -> dict[str, float]:
        got = self.metrics.registry.get_sample_value
        return {
            r: got("trainguard_operator_reconcile_total", {"result": r}) or 0 for r in ("success", "repeated")
        }


def test_a_creation_handed_over_again_at_a_generation_reconciled_to_ready_does_nothing() -> None:
    op = Operator(monitor_body(), POLICY)
    assert "apply PrometheusRule" in op.call(kopf.Reason.CREATE)
    assert op.call(kopf.Reason.CREATE) == [], "no read, no write"
    assert op.results() == {"success": 1, "repeated": 1}
    assert "get_monitor" in op.call(kopf.Reason.UPDATE), "an update always reconciles"
    assert "get_monitor" in op.call(kopf.Reason.RESUME), "so does a resume"


def test_a_new_generation_or_another_object_of_the_name_is_reconciled() -> None:
    op = Operator(monitor_body(), POLICY)
    op.call(kopf.Reason.CREATE)
    changed = monitor_body()
    changed["metadata"]["generation"] = 2  # its spec was changed
    op.kube.put(changed)
    assert "get_monitor" in op.call(kopf.Reason.CREATE, changed), "the spec changed: generation 2"
    assert op.call(kopf.Reason.CREATE, changed) == []
    recreated = monitor_body()
    recreated["metadata"]["uid"] = "u-2"
    op.kube.put(recreated)
    assert "get_monitor" in op.call(kopf.Reason.CREATE, recreated), "deleted and created again: another uid"


def test_a_creation_after_a_reconcile_that_did_not_end_ready_runs_again() -> None:
    op = Operator(monitor_body())  # its policy is missing: PolicyNotFound, not Ready
    op.call(kopf.Reason.CREATE)
    assert "get_monitor" in op.call(kopf.Reason.CREATE)
    op.kube.put(POLICY)
    assert "apply PrometheusRule" in op.call(kopf.Reason.CREATE), "ends Ready now"
    assert op.call(kopf.Reason.CREATE) == []


def test_without_the_record_every_creation_reconciles() -> None:
    op = Operator(monitor_body(), POLICY)
    op.memo.settings = MonitorSettings()
    op.call(kopf.Reason.CREATE)
    assert "get_monitor" in op.call(kopf.Reason.CREATE)


def test_the_record_is_per_monitor_and_cleared_by_a_reconcile_that_did_not_end_ready() -> None:
    ready = ReadyGenerations()
    body = monitor_body()
    ready.reconciled(body, True)
    assert ready.holds("ml", "llama-pretrain", "u-1", 1)
    assert not ready.holds("ml", "llama-pretrain", "u-1", 2) and not ready.holds("ml", "other", "u-1", 1)
    ready.reconciled(body, False)
    assert not ready.holds("ml", "llama-pretrain", "u-1", 1) and len(ready) == 0
    del body["metadata"]["uid"]
    ready.reconciled(body, True)
    assert len(ready) == 0, "no uid: nothing to tell a repeat by"


def test_a_policy_event_whose_status_is_written_already_writes_none() -> None:
    """kopf hands a policy's creation over again as it does a monitor's (207 policy writes for 46
    policies in the 2,000-monitor run): the status it would write is the one the policy holds."""
    op = Operator(monitor_body(), POLICY)
    registry = kopf.OperatorRegistry()
    register(registry)
    handler = next(h.fn for h in registry._changing.get_all_handlers() if h.fn.__name__ == "policy_changed")
    policy = dict(POLICY)

    def event() -> int:
        before = len(op.kube.status_writes)
        handler(namespace="ml", name=policy["metadata"]["name"], body=kopf.Body(policy), memo=op.memo,
                monitors_by_policy=None)  # fmt: skip
        return len(op.kube.status_writes) - before

    assert event() == 1
    policy["status"] = op.kube.status_writes[-1]
    assert event() == 0
    policy["metadata"] = {**policy["metadata"], "generation": 2}
    assert event() == 1, "observedGeneration moves on"
