"""Reads a watch cache (kube/cache.py) would serve, made by asking the API now: for a one-shot command,
which runs once and has no watch to keep."""

from __future__ import annotations

from typing import Any

from trainguard.api.common import LabelSelector
from trainguard.kube.client import Kube

Obj = dict[str, Any]


class ApiReads:
    """The reads `trainguard report` makes (diagnosis.fetch.ReportReads), asked of the API now."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def policy(self, namespace: str, name: str) -> Obj | None:
        return self.kube.get_policy(namespace, name)

    def pods(self, namespace: str, selector: LabelSelector) -> list[Obj]:
        if selector.is_empty():
            return []
        return self.kube.list_pods(namespace, selector.to_selector_string())
