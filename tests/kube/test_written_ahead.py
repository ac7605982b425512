"""This process's own writes, awaited from the watch: until an object's cache brings the version a write
made, a difference from what the cache holds is the cache being behind, not a drift to repair
(kube.watch.Informer.await_version, kube.Kube.behind). During the apply of 2,000 monitors the resync
reconciled 739 of them again because their caches had not caught up with their first reconcile.

The informer is fed events as its watch loop feeds them (`_apply`) and lists as its list does (`replace`);
its loop against an apiserver is tests/kube/test_watch.py's."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.clock import Clock
from tests.kube.test_apply import FakeDynamic, kube_with, rule
from trainguard.kube import ClusterCache, NotSynced
from trainguard.kube.watch import Informer, Resource


def informer(clock: Clock) -> Informer:
    cache = Informer(
        client.ApiClient(), Resource("monitoring.coreos.com", "v1", "prometheusrules"), clock=clock
    )
    cache.replace([])
    return cache


def event(kind: str, version: str, name: str = "trainguard-llama") -> dict[str, Any]:
    return {
        "type": kind,
        "object": {"metadata": {"namespace": "ml", "name": name, "resourceVersion": version}},
    }


def test_a_write_is_behind_until_the_watch_brings_its_version() -> None:
    cache = informer(Clock(0.0))
    cache.await_version("ml", "trainguard-llama", "7", 60.0)
    assert cache.behind("ml", "trainguard-llama")
    assert not cache.behind("ml", "other"), "per object"
    cache._apply(event("MODIFIED", "5"))  # an older version, still on its way
    assert cache.behind("ml", "trainguard-llama")
    cache._apply(event("ADDED", "7"))
    assert not cache.behind("ml", "trainguard-llama")


def test_a_hand_edit_after_the_write_is_not_hidden() -> None:
    """Events of one object come in order: once the write's version came, the next is someone else's."""
    cache = informer(Clock(0.0))
    cache.await_version("ml", "trainguard-llama", "7", 60.0)
    cache._apply(event("MODIFIED", "7"))
    cache._apply(event("MODIFIED", "8"))
    assert not cache.behind("ml", "trainguard-llama")
    cache.await_version("ml", "trainguard-llama", "9", 60.0)
    cache._apply(event("MODIFIED", "9"))
    cache._apply(event("DELETED", "10"))
    assert not cache.behind("ml", "trainguard-llama") and cache.get("ml", "trainguard-llama") is None


def test_a_version_the_cache_holds_already_is_not_awaited() -> None:
    """The watch may bring the write's version before the writer says it awaits it."""
    cache = informer(Clock(0.0))
    cache._apply(event("ADDED", "7"))
    cache.await_version("ml", "trainguard-llama", "7", 60.0)
    assert not cache.behind("ml", "trainguard-llama")


def test_a_version_never_brought_is_awaited_only_so_long_and_a_list_ends_every_wait() -> None:
    clock = Clock(0.0)
    cache = informer(clock)
    cache.await_version("ml", "trainguard-llama", "7", 60.0)
    clock.now = 59.0
    assert cache.behind("ml", "trainguard-llama")
    clock.now = 60.0
    assert not cache.behind("ml", "trainguard-llama"), "judged by what the cache holds again"
    cache.await_version("ml", "trainguard-llama", "9", 60.0)
    cache.replace([])  # a relist (after a 410) may have skipped past the version
    assert not cache.behind("ml", "trainguard-llama")


class Awaited:
    """kube.ClusterCache's side of Kube's writes, over one informer."""

    def __init__(self, cache: Informer) -> None:
        self.cache = cache
        self.awaited: list[str] = []

    def await_written(self, obj: dict[str, Any], version: str) -> None:
        self.awaited.append(version)
        self.cache.await_version(obj["metadata"]["namespace"], obj["metadata"]["name"], version, 60.0)

    def written_ahead(self, obj: dict[str, Any]) -> bool:
        return self.cache.behind(obj["metadata"]["namespace"], obj["metadata"]["name"])


def test_an_object_this_process_wrote_is_in_place_while_its_cache_is_behind() -> None:
    fake = FakeDynamic()
    cache = informer(Clock(0.0))
    awaited = Awaited(cache)
    kube = kube_with(fake, live=lambda obj: cache.get("ml", obj["metadata"]["name"]), written=awaited)
    assert kube.apply(rule()) is True
    assert awaited.awaited == ["101"]
    assert kube.behind(rule()) and kube.unchanged(rule()), "the cache holds nothing yet: no drift"
    assert kube.apply(rule()) is False and fake.applies == 1
    assert not kube.unchanged(rule("up == 1")), "other content is applied whatever the cache holds"
    cache._apply(event("ADDED", "101"))
    assert not kube.behind(rule())
    assert kube.apply(rule("up == 1")) is True and awaited.awaited == ["101", "102"]


def test_the_cluster_cache_awaits_a_write_in_the_cache_of_its_kind() -> None:
    cache = ClusterCache(api=None, served=lambda resource: True)  # type: ignore[arg-type]
    rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "trainguard-llama", "namespace": "ml"}}  # fmt: skip
    monitor = {"apiVersion": "trainguard.io/v1alpha1", "kind": "TrainingJobMonitor",
               "metadata": {"name": "llama-pretrain", "namespace": "ml"}}  # fmt: skip
    with pytest.raises(NotSynced):
        cache.applied(rule)  # makes the PrometheusRules' cache
    for obj in (rule, monitor):
        cache.await_written(obj, "5")
        assert cache.written_ahead(obj)
    cache.informers["prometheusrules.monitoring.coreos.com"]._apply(event("ADDED", "5"))
    assert not cache.written_ahead(rule) and cache.written_ahead(monitor), "each kind its own cache"
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ml"}}
    cache.await_written(secret, "5")
    assert not cache.written_ahead(secret), "a kind with no cache is never behind"
