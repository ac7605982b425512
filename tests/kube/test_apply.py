"""Kube.apply against a stand-in for the apiserver's dynamic client (the real one is exercised by
e2e/test_review_defects.py's hand-edit repair). Like the apiserver, a server-side apply whose content is
already there does not move the resourceVersion; any other write does."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from kubernetes.dynamic.exceptions import NotFoundError

from trainguard.kube import Kube


def content(obj: dict[str, Any]) -> dict[str, Any]:
    """What an apply sets: everything but the resourceVersion."""
    meta = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


class FakeDynamic:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 100
        self.applies = 0
        self.resources = SimpleNamespace(get=lambda api_version, kind: kind, invalidate_cache=lambda: None)

    def _result(self, obj: dict[str, Any]) -> Any:
        return SimpleNamespace(metadata=SimpleNamespace(resourceVersion=obj["metadata"]["resourceVersion"]))

    def get(self, resource: str, name: str, namespace: str | None, **_: Any) -> Any:
        if (resource, name) not in self.objects:
            raise NotFoundError(SimpleNamespace(status=404, reason="Not Found", body=b"", headers={}))
        return self._result(self.objects[(resource, name)])

    def server_side_apply(self, resource: str, body: dict[str, Any], name: str, **_: Any) -> Any:
        self.applies += 1
        live = self.objects.get((resource, name))
        if live is None or content(live) != content(body):
            self.version += 1
            live = copy.deepcopy(content(body))
            live["metadata"]["resourceVersion"] = str(self.version)
            self.objects[(resource, name)] = live
        return self._result(live)

    def hand_edit(self, resource: str, name: str) -> None:
        self.version += 1
        live = self.objects[(resource, name)]
        live["spec"] = {"groups": []}
        live["metadata"]["resourceVersion"] = str(self.version)


def rule(expr: str = "up == 0") -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "trainguard-llama", "namespace": "ml"},
        "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": expr}]}]},
    }


def kube_with(fake: FakeDynamic) -> Kube:
    kube = Kube(api=None)  # type: ignore[arg-type]
    kube._dynamic = fake  # type: ignore[assignment]
    return kube


def test_an_object_untouched_since_this_process_applied_it_is_not_applied_again() -> None:
    fake = FakeDynamic()
    kube = kube_with(fake)
    assert kube.apply(rule()) is True
    assert kube.apply(rule()) is False
    assert kube.apply(rule()) is False
    assert fake.applies == 1


def test_a_hand_edit_is_repaired_at_the_next_apply() -> None:
    fake = FakeDynamic()
    kube = kube_with(fake)
    kube.apply(rule())
    fake.hand_edit("PrometheusRule", "trainguard-llama")
    assert kube.apply(rule()) is True, "the edit moved the resourceVersion: apply again, and it changes"
    assert fake.objects[("PrometheusRule", "trainguard-llama")]["spec"] == rule()["spec"]
    assert fake.applies == 2


def test_a_deleted_object_is_created_again() -> None:
    fake = FakeDynamic()
    kube = kube_with(fake)
    kube.apply(rule())
    del fake.objects[("PrometheusRule", "trainguard-llama")]
    assert kube.apply(rule()) is True
    assert ("PrometheusRule", "trainguard-llama") in fake.objects


def test_new_content_is_applied() -> None:
    fake = FakeDynamic()
    kube = kube_with(fake)
    kube.apply(rule())
    assert kube.apply(rule("up == 2")) is True
    assert fake.objects[("PrometheusRule", "trainguard-llama")]["spec"] == rule("up == 2")["spec"]


def test_a_restarted_operator_applies_once_and_finds_nothing_changed() -> None:
    fake = FakeDynamic()
    kube_with(fake).apply(rule())
    restarted = kube_with(fake)
    assert restarted.apply(rule()) is False, "same content: the apiserver writes nothing"
    assert fake.applies == 2
    assert restarted.apply(rule()) is False and fake.applies == 2


def test_secrets_which_the_operator_cannot_read_are_applied_every_time() -> None:
    fake = FakeDynamic()
    kube = kube_with(fake)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "t", "namespace": "ml"},
              "stringData": {"token": "x"}}  # fmt: skip
    assert kube.apply(secret) is None, "first write of this process: it cannot tell"
    assert kube.apply(secret) is False
    assert fake.applies == 2
