"""reconcile_monitor's decisions, with an in-memory stand-in for the API edge (the real API is
exercised by e2e/test_operator.py against a kube-apiserver)."""

from __future__ import annotations

import copy
from typing import Any

from tests.conftest import MONITOR, POLICY
from trainguard.controller.kube import HASH_ANNOTATION, MissingAPI
from trainguard.controller.reconcile import reconcile_monitor


class FakeKube:
    def __init__(
        self, policies: dict[str, dict[str, Any]] | None = None, missing_kinds: tuple[str, ...] = ()
    ) -> None:
        self.policies = policies or {}
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.applies: list[str] = []
        self.status: dict[str, Any] | None = None
        self.created: list[str] = []
        self.missing_kinds = missing_kinds

    def get_policy(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.policies.get(name))

    def current_hash(self, obj: dict[str, Any]) -> str | None:
        live = self.objects.get((obj["kind"], obj["metadata"]["name"]))
        return None if live is None else live["metadata"]["annotations"][HASH_ANNOTATION]

    def apply(self, obj: dict[str, Any]) -> None:
        if obj["kind"] in self.missing_kinds:
            raise MissingAPI(f"{obj['kind']} is not served")
        self.objects[(obj["kind"], obj["metadata"]["name"])] = obj
        self.applies.append(obj["kind"])

    def create_if_absent(self, obj: dict[str, Any]) -> bool:
        if obj["metadata"]["name"] in self.created:
            return False
        self.created.append(obj["metadata"]["name"])
        return True

    def node_names(self, selector: str) -> list[str]:
        return ["gpu-node-7"] if selector == "rack=r12" else []

    def count_pods(self, namespace: str, selector: str) -> int:
        assert selector == "app=llama-pretrain"
        return 2

    def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.status = status


def body(**spec: Any) -> dict[str, Any]:
    b = copy.deepcopy(MONITOR)
    b["metadata"].update(generation=1, uid="u-1")
    b["spec"].update(spec)
    return b


def cond(kube: FakeKube, type_: str) -> dict[str, Any]:
    assert kube.status is not None
    return next(c for c in kube.status["conditions"] if c["type"] == type_)


def test_applies_everything_then_nothing_when_unchanged() -> None:
    kube = FakeKube({"default": POLICY})
    events: list[tuple[str, str]] = []
    reconcile_monitor(kube, body(), announce=lambda r, m: events.append((r, m)))  # type: ignore[arg-type]
    assert kube.applies == ["PrometheusRule", "AlertmanagerConfig", "PodMonitor"]
    assert kube.created == ["trainguard-llama-pretrain-fastpath"]
    assert cond(kube, "Ready")["status"] == "True"
    assert kube.status and kube.status["podsMonitored"] == 2
    assert events and events[0][0] == "Applied" and "generation 1" in events[0][1]
    kube.applies.clear()
    events.clear()
    reconcile_monitor(kube, body(), announce=lambda r, m: events.append((r, m)))  # type: ignore[arg-type]
    assert kube.applies == [] and events == [], "the input-hash annotation says nothing changed"


def test_policy_change_reapplies_only_what_changed() -> None:
    kube = FakeKube({"default": POLICY})
    reconcile_monitor(kube, body())  # type: ignore[arg-type]
    kube.applies.clear()
    changed = copy.deepcopy(POLICY)
    changed["spec"]["alerts"] = [{"name": "GPUThermalThrottling", "threshold": 80}]
    kube.policies["default"] = changed
    reconcile_monitor(kube, body())  # type: ignore[arg-type]
    assert kube.applies == ["PrometheusRule"]


def test_missing_policy_degrades_and_applies_nothing() -> None:
    kube = FakeKube()
    reconcile_monitor(kube, body())  # type: ignore[arg-type]
    assert kube.applies == []
    assert cond(kube, "Degraded")["reason"] == "PolicyNotFound"
    assert cond(kube, "Ready")["status"] == "False"


def test_invalid_spec_degrades_without_raising() -> None:
    kube = FakeKube({"default": POLICY})
    reconcile_monitor(kube, body(baseline={"sigma": -1}))  # type: ignore[arg-type]
    c = cond(kube, "Degraded")
    assert c["reason"] == "InvalidSpec" and "spec.baseline.sigma" in c["message"]


def test_invalid_policy_degrades_naming_it() -> None:
    bad = copy.deepcopy(POLICY)
    bad["spec"]["alerts"] = [{"name": "GPUMemoryHang", "params": {"nope": 1}}]
    kube = FakeKube({"default": bad})
    reconcile_monitor(kube, body())  # type: ignore[arg-type]
    c = cond(kube, "Degraded")
    assert c["reason"] == "InvalidPolicy" and "AlertPolicy ml/default" in c["message"]


def test_missing_prometheus_operator_crds_is_a_clear_condition() -> None:
    kube = FakeKube({"default": POLICY}, missing_kinds=("PrometheusRule",))
    reconcile_monitor(kube, body())  # type: ignore[arg-type]
    c = cond(kube, "Degraded")
    assert c["reason"] == "MissingCRDs" and "install prometheus-operator's CRDs" in c["message"]


def test_maintenance_window_node_selector_is_resolved_to_node_names() -> None:
    pol = copy.deepcopy(POLICY)
    pol["spec"]["maintenanceWindows"] = [
        {"name": "rack-12", "start": "2026-12-01T22:00:00Z", "end": "2026-12-01T23:00:00Z",
         "nodeSelector": {"matchLabels": {"rack": "r12"}}}
    ]  # fmt: skip
    kube = FakeKube({"default": pol})
    reconcile_monitor(kube, body())  # type: ignore[arg-type]
    amc = kube.objects[("AlertmanagerConfig", "trainguard-llama-pretrain")]
    p0 = amc["spec"]["route"]["routes"][0]
    assert p0["routes"][0]["matchers"] == [{"name": "node", "matchType": "=~", "value": "gpu-node-7"}]
    assert p0["routes"][0]["routes"][0]["muteTimeIntervals"] == ["maintenance-rack-12"]
