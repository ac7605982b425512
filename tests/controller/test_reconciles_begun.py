"""A new monitor is reconciled once, by its own handler: the resync and a policy event leave it to that
until a reconcile of it has begun (controller/reconciles_begun.py). 2,000 monitors applied with their
policies cost about 2.7 reconciles each before.

The API edge is tests/kube/fakes.py's FakeKube with test_resync.Counted recording each request."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from tests.clock import Clock
from tests.conftest import POLICY, monitor_body
from tests.controller.test_resync import RECEIVER, Counted
from tests.kube.fakes import FakeKube
from trainguard.controller.handlers import MonitorSettings, policy_users, reconcile, resync
from trainguard.controller.metrics import OperatorMetrics
from trainguard.controller.reconciles_begun import AWAIT_HANDLER_S, ReconcilesBegun

CREATED = "2026-12-04T12:00:00Z"
AT = 1796385600.0  # CREATED in unix seconds


def new_monitor(created: str = CREATED) -> dict[str, object]:
    body = monitor_body()
    body["metadata"]["creationTimestamp"] = created  # type: ignore[index]
    return body


def test_a_monitor_awaits_its_handler_while_young_and_until_a_reconcile_begins() -> None:
    clock = Clock(AT + 5)
    begun = ReconcilesBegun(clock=clock)
    body = new_monitor()
    assert begun.awaits_handler("ml", "llama-pretrain", body)
    assert begun.awaits_handler("ml", "llama-pretrain", None), "kopf knows it, the cache not yet: new"
    clock.now = AT + AWAIT_HANDLER_S
    assert not begun.awaits_handler("ml", "llama-pretrain", body), (
        "its handler may have failed: the resync's again"
    )
    clock.now = AT + 5
    begun.began("ml", "llama-pretrain")
    assert not begun.awaits_handler("ml", "llama-pretrain", body) and not begun.awaits_handler(
        "ml", "llama-pretrain", None
    )
    assert begun.awaits_handler("ml", "other", new_monitor()), "per monitor"
    assert not begun.awaits_handler("ml", "untimed", monitor_body()), "no creation time: not judged young"


def test_the_resync_leaves_a_new_monitor_to_its_handler_and_judges_it_once_reconciled() -> None:
    kube = FakeKube(new_monitor(), POLICY)
    api = Counted(kube)
    metrics = OperatorMetrics(CollectorRegistry())
    clock = Clock(AT + 5)
    settings = MonitorSettings(metrics=metrics, begun=ReconcilesBegun(clock=clock))
    got = metrics.registry.get_sample_value

    def one_pass() -> bool:
        body = kube.monitor("ml", "llama-pretrain")
        assert body is not None
        return resync(api, kube, body, receiver=RECEIVER, settings=settings)  # type: ignore[arg-type]

    assert one_pass() is False
    assert api.requests == [] and kube.applies == [], "nothing rendered or written for it"
    assert got("trainguard_operator_resyncs_total", {"outcome": "left_to_reconcile"}) == 1
    assert got("trainguard_operator_reconcile_total", {"result": "success"}) == 0

    reconcile(api, kube, "ml", "llama-pretrain", receiver=RECEIVER, settings=settings)  # type: ignore[arg-type]  # its create handler
    assert "apply PrometheusRule" in api.requests
    api.requests.clear()
    del kube.objects[next(k for k in kube.objects if k[0] == "PrometheusRule")]  # drift, just after it
    assert one_pass() is True, "reconciled once: a pass judges it again at once and puts the rule back"
    assert "apply PrometheusRule" in api.requests


def test_a_monitor_its_handler_never_reconciled_is_the_resyncs_once_old() -> None:
    kube = FakeKube(new_monitor(), POLICY)
    api = Counted(kube)
    settings = MonitorSettings(begun=ReconcilesBegun(clock=Clock(AT + AWAIT_HANDLER_S + 1)))
    body = kube.monitor("ml", "llama-pretrain")
    assert body is not None
    assert resync(api, kube, body, receiver=RECEIVER, settings=settings) is True  # type: ignore[arg-type]
    assert "apply PrometheusRule" in api.requests and "patch_status" in api.requests


def test_a_policy_applied_with_its_new_monitors_leaves_them_to_their_handlers() -> None:
    """The burst: the policy's event comes while its monitors' create handlers are still queued, some
    not in the cache yet. It reconciles none of them; each handler's reconcile reads the policy by name."""
    kube = FakeKube(new_monitor(), POLICY)
    api = Counted(kube)
    settings = MonitorSettings(begun=ReconcilesBegun(clock=Clock(AT + 5)))
    assert policy_users(api, kube, POLICY, ["llama-pretrain", "not-cached-yet"], receiver=RECEIVER, settings=settings) == []  # type: ignore[arg-type]  # fmt: skip
    assert api.requests == []

    reconcile(api, kube, "ml", "llama-pretrain", receiver=RECEIVER, settings=settings)  # type: ignore[arg-type]
    ready = next(c for c in (kube.status or {})["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", "the handler's reconcile found the policy"


def test_a_policy_created_after_its_monitors_reconcile_began_reconciles_it() -> None:
    """The handler's reconcile began before the policy existed (PolicyNotFound): the policy's event must
    not take the monitor for one still awaiting its handler."""
    kube = FakeKube(new_monitor())
    api = Counted(kube)
    settings = MonitorSettings(begun=ReconcilesBegun(clock=Clock(AT + 5)))
    reconcile(api, kube, "ml", "llama-pretrain", receiver=RECEIVER, settings=settings)  # type: ignore[arg-type]
    assert kube.applies == [], "PolicyNotFound: nothing applied"
    kube.put(POLICY)
    assert policy_users(api, kube, POLICY, ["llama-pretrain"], receiver=RECEIVER, settings=settings) == ["llama-pretrain"]  # type: ignore[arg-type]  # fmt: skip
    ready = next(c for c in (kube.status or {})["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
