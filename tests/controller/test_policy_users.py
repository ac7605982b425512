"""A policy event (its create, change, or the resume of every policy at an operator's start) reconciles
only the monitors that name it and whose objects or status it would change, decided from the caches with
the event's policy: applied in the same burst as its monitors, a policy used to reconcile each of them a
second time.

The API edge is tests/kube/fakes.py's in-memory FakeKube and test_resync.Counted, which records each
request a kube.Kube would make."""

from __future__ import annotations

import copy
from typing import Any

from tests.conftest import POLICY, monitor_body
from tests.controller.test_resync import RECEIVER, Counted
from tests.kube.fakes import FakeKube
from trainguard.controller.handlers import policy_users, reconcile


def cluster(*objects: Any) -> tuple[FakeKube, Counted]:
    kube = FakeKube(monitor_body(), *objects)
    return kube, Counted(kube)


def test_a_policy_its_monitor_already_applied_reconciles_nothing() -> None:
    kube, api = cluster(POLICY)
    reconcile(api, kube, "ml", "llama-pretrain", receiver=RECEIVER)  # type: ignore[arg-type]
    api.requests.clear()
    assert policy_users(api, kube, POLICY, ["llama-pretrain"], receiver=RECEIVER) == []  # type: ignore[arg-type]
    assert api.requests == [], "no read by name, no apply, no status patch"


def test_a_changed_policy_reconciles_its_monitor_even_before_its_cache_hears_of_it() -> None:
    kube, api = cluster(POLICY)
    reconcile(api, kube, "ml", "llama-pretrain", receiver=RECEIVER)  # type: ignore[arg-type]
    changed = copy.deepcopy(POLICY)
    changed["spec"]["alerts"] = [{"name": "GPUThermalThrottling", "threshold": 80}]
    kube.put(changed)  # the API has it
    kube.policy = lambda ns, name: copy.deepcopy(POLICY)  # type: ignore[method-assign]  # the cache not yet
    kube.applies.clear()
    assert policy_users(api, kube, changed, ["llama-pretrain"], receiver=RECEIVER) == ["llama-pretrain"]  # type: ignore[arg-type]
    assert kube.applies == ["PrometheusRule"]


def test_a_policy_created_after_its_monitor_makes_it_ready() -> None:
    kube, api = cluster()
    reconcile(api, kube, "ml", "llama-pretrain", receiver=RECEIVER)  # type: ignore[arg-type]
    assert kube.applies == [], "PolicyNotFound: nothing applied"
    kube.put(POLICY)
    assert policy_users(api, kube, POLICY, ["llama-pretrain"], receiver=RECEIVER) == ["llama-pretrain"]  # type: ignore[arg-type]
    ready = next(c for c in (kube.status or {})["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"


def test_a_monitor_its_cache_does_not_hold_yet_is_reconciled() -> None:
    kube, api = cluster(POLICY)
    kube.monitor = lambda ns, name: None  # type: ignore[method-assign]
    assert policy_users(api, kube, POLICY, ["llama-pretrain"], receiver=RECEIVER) == ["llama-pretrain"]  # type: ignore[arg-type]
    assert "patch_status" in api.requests
