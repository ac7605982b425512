"""The same reads as the watch caches (kube/cache.py), made by asking the API now: for the one-shot
commands (`trainguard status`, `report`), which run once and have no watch to keep."""

from __future__ import annotations

from typing import Any

from trainguard.api.common import LabelSelector
from trainguard.kube.client import Kube

Obj = dict[str, Any]


class ApiReads:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def monitors(self) -> list[Obj]:
        return self.kube.list_monitors()

    def monitors_in(self, namespace: str, timeout: float | None = None) -> list[Obj]:
        return self.kube.list_monitors(namespace, timeout=timeout)

    def monitor(self, namespace: str, name: str) -> Obj | None:
        return self.kube.get_monitor(namespace, name)

    def policy(self, namespace: str, name: str) -> Obj | None:
        return self.kube.get_policy(namespace, name)

    def pods(self, namespace: str, selector: LabelSelector) -> list[Obj]:
        if selector.is_empty():
            return []
        return self.kube.list_pods(namespace, selector.to_selector_string())

    def job(self, namespace: str, name: str) -> Obj | None:
        return self.kube.get_job(namespace, name)

    def nodes(self) -> list[Obj]:
        return self.kube.list_nodes()

    def node_leases(self) -> list[Obj]:
        return self.kube.list_node_leases()
