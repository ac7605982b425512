"""Kube.apply against a stand-in for the apiserver's dynamic client (the real one is exercised by
e2e/test_review_defects.py's hand-edit repair, and its requests counted by e2e/test_watch_caches.py). Like
the apiserver, a server-side apply whose content is already there does not move the resourceVersion; any
other write does, and records its field manager. The stand-in counts its GETs and applies: what these
tests assert is which requests an apply makes, with and without the owned objects' watch cache (`watched`
stands in for kube.ClusterCache.applied, over the same objects)."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from kubernetes.dynamic.exceptions import NotFoundError

from trainguard.kube import FIELD_MANAGER, Kube, NotSynced, with_hash
from trainguard.kube.cache import applied_meta


def content(obj: dict[str, Any]) -> dict[str, Any]:
    """What an apply sets: everything but the resourceVersion."""
    meta = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


class FakeDynamic:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 100
        self.applies = 0
        self.gets = 0
        self.managers: dict[tuple[str, str], set[str]] = {}
        self.resources = SimpleNamespace(get=lambda api_version, kind: kind, invalidate_cache=lambda: None)

    def _result(self, obj: dict[str, Any]) -> Any:
        return SimpleNamespace(metadata=SimpleNamespace(resourceVersion=obj["metadata"]["resourceVersion"]))

    def get(self, resource: str, name: str, namespace: str | None, **_: Any) -> Any:
        self.gets += 1
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
        self.managers.setdefault((resource, name), set()).add(FIELD_MANAGER)
        return self._result(live)

    def hand_edit(self, resource: str, name: str) -> None:
        self.version += 1
        live = self.objects[(resource, name)]
        live["spec"] = {"groups": []}
        live["metadata"]["resourceVersion"] = str(self.version)
        self.managers[(resource, name)].add("kubectl-edit")

    def watched(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """What the owned objects' watch cache would hold of `obj`: its metadata and field managers."""
        live = self.objects.get((obj["kind"], obj["metadata"]["name"]))
        if live is None:
            return None
        fields = [
            {"manager": m, "operation": "Apply"}
            for m in sorted(self.managers[(obj["kind"], obj["metadata"]["name"])])
        ]
        return applied_meta({**live, "metadata": {**live["metadata"], "managedFields": fields}})


def rule(expr: str = "up == 0") -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "trainguard-llama", "namespace": "ml"},
        "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": expr}]}]},
    }


def kube_with(fake: FakeDynamic, **kw: Any) -> Kube:
    kube = Kube(api=None, **kw)  # type: ignore[arg-type]
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


SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "t", "namespace": "ml"},
          "stringData": {"token": "x"}}  # fmt: skip


def test_a_secret_which_the_operator_cannot_read_is_written_again_only_when_its_time_is_up() -> None:
    fake = FakeDynamic()
    now = [0.0]
    kube = kube_with(fake, secret_rewrite_s=600.0, clock=lambda: now[0])
    assert kube.apply(SECRET) is None, "first write of this process: it cannot tell"
    assert kube.apply(SECRET) is False and fake.applies == 1, "the same content, written a moment ago"
    now[0] = 599.0
    assert kube.apply(SECRET) is False and fake.applies == 1
    now[0] = 600.0
    assert kube.apply(SECRET) is False and fake.applies == 2, "written again: a hand edit is repaired"
    changed = {**SECRET, "stringData": {"token": "y"}}
    assert kube.apply(changed) is True and fake.applies == 3, "new content is written at once"
    assert fake.gets == 0, "a Secret is never read"


def test_with_the_watch_cache_an_object_in_place_costs_no_request() -> None:
    fake = FakeDynamic()
    kube = kube_with(fake, live=fake.watched)
    assert kube.apply(rule()) is True
    assert kube.unchanged(rule()) and kube.apply(rule()) is False
    assert (fake.gets, fake.applies) == (0, 1)


def test_a_restarted_operator_with_the_watch_cache_applies_nothing_in_place() -> None:
    fake = FakeDynamic()
    kube_with(fake, live=fake.watched).apply(with_hash(rule())[0])
    restarted = kube_with(fake, live=fake.watched)
    assert restarted.apply(with_hash(rule())[0]) is False
    assert (fake.gets, fake.applies) == (0, 1), "its hash stamped and no other manager: nothing to apply"


def test_a_hand_edit_seen_in_the_watch_cache_is_repaired_after_a_restart_too() -> None:
    fake = FakeDynamic()
    kube_with(fake, live=fake.watched).apply(with_hash(rule())[0])
    fake.hand_edit("PrometheusRule", "trainguard-llama")
    restarted = kube_with(fake, live=fake.watched)
    assert not restarted.unchanged(with_hash(rule())[0]), "another field manager wrote it"
    assert restarted.apply(with_hash(rule())[0]) is True
    assert fake.objects[("PrometheusRule", "trainguard-llama")]["spec"] == rule()["spec"]
    assert restarted.apply(with_hash(rule())[0]) is False, "its version is the one this process applied"
    assert fake.gets == 0


def test_before_the_watch_cache_has_listed_an_apply_reads_the_object_by_name() -> None:
    fake = FakeDynamic()

    def not_listed(obj: dict[str, Any]) -> dict[str, Any] | None:
        raise NotSynced("the cache of prometheusrules has not listed yet")

    kube = kube_with(fake, live=not_listed)
    kube.apply(rule())
    assert kube.apply(rule()) is False
    assert (fake.gets, fake.applies) == (2, 1)
