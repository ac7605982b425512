"""The watch caches' reads that guard a decision: a Lease cache gone quiet while it holds Leases says so
(every kubelet renews its Lease every 10 s), instead of handing out Leases that all look expired; the
monitor cache says which monitor object a name is now (the receiver's token check), or that it cannot."""

from __future__ import annotations

import time

import pytest

from trainguard.api.common import LabelSelector
from trainguard.kube import ClusterCache, NotSynced, Stale
from trainguard.kube.cache import LEASES_QUIET_S, MONITORS_QUIET_S


def filled(cache: ClusterCache, name: str, objects: list[dict]) -> None:  # type: ignore[type-arg]
    informer = cache.informers[name]
    for obj in objects:
        meta = obj["metadata"]
        informer._objects[(meta.get("namespace", ""), meta["name"])] = obj
        informer._by_namespace.setdefault(meta.get("namespace", ""), {})[meta["name"]] = obj
    informer._synced.set()


def test_a_quiet_lease_cache_is_stale_and_an_empty_one_is_not() -> None:
    cache = ClusterCache(api=None)  # type: ignore[arg-type]  # not started: filled by hand
    filled(cache, "leases", [])
    assert cache.node_leases() == []
    lease = {"metadata": {"name": "gpu-0", "namespace": "kube-node-lease"}, "spec": {"renewTime": "x"}}
    filled(cache, "leases", [lease])
    assert cache.node_leases() == [lease], "just heard from"
    cache.leases_informer._heard = time.monotonic() - LEASES_QUIET_S - 1
    with pytest.raises(Stale, match="node Lease cache has heard nothing"):
        cache.node_leases()


def test_pods_are_read_by_namespace_and_selector() -> None:
    cache = ClusterCache(api=None)  # type: ignore[arg-type]
    filled(cache, "pods", [
        {"metadata": {"name": "a", "namespace": "ml", "labels": {"app": "llama"}}},
        {"metadata": {"name": "b", "namespace": "ml", "labels": {"app": "other"}}},
        {"metadata": {"name": "c", "namespace": "research", "labels": {"app": "llama"}}},
    ])  # fmt: skip
    llama = LabelSelector.model_validate({"matchLabels": {"app": "llama"}})
    assert [p["metadata"]["name"] for p in cache.pods("ml", llama)] == ["a"]
    assert cache.pods("ml", LabelSelector()) == [], "an empty selector matches nothing"


def test_the_monitor_uid_is_the_cached_monitors_or_none_and_a_cache_that_cannot_say_raises() -> None:
    cache = ClusterCache(api=None, read_timeout_s=0.01)  # type: ignore[arg-type]
    with pytest.raises(NotSynced):
        cache.monitor_uid("ml", "llama")
    filled(cache, "monitors", [{"metadata": {"name": "llama", "namespace": "ml", "uid": "u-1"}}])
    assert cache.monitor_uid("ml", "llama") == "u-1"
    assert cache.monitor_uid("ml", "other") is None
    assert cache.monitor_uid("research", "llama") is None
    cache.monitors_informer._heard = time.monotonic() - MONITORS_QUIET_S - 1
    with pytest.raises(Stale, match="monitor cache has heard nothing"):
        cache.monitor_uid("ml", "llama")
