"""Kube.ensure_receiver_key: the operator key's Secret is read, or created when absent, and a created
one carries managed-by=trainguard (deploy/secret-write-policy.yaml lets the operator write no other).
CoreV1Api is a fake here (it answers 404 and 409 as the apiserver does); e2e runs the real one."""

from __future__ import annotations

import base64
import types
from typing import Any

from kubernetes.client.exceptions import ApiException

from trainguard.catalog.kubernetes import MANAGED_BY, MANAGED_BY_VALUE
from trainguard.kube import Kube


class Core:
    def __init__(self, existing: bytes | None = None) -> None:
        self.data = {"key": base64.b64encode(existing).decode()} if existing else None
        self.created: list[dict[str, Any]] = []

    def read_namespaced_secret(self, name: str, namespace: str, **_: Any) -> Any:
        if self.data is None:
            raise ApiException(status=404)
        return types.SimpleNamespace(data=self.data)

    def create_namespaced_secret(self, namespace: str, body: dict[str, Any], **_: Any) -> None:
        self.created.append(body)


def kube(core: Core) -> Kube:
    k = Kube(api=None)  # type: ignore[arg-type]
    k.core = core  # type: ignore[assignment]
    return k


def test_an_absent_key_is_created_labelled_managed_by_trainguard() -> None:
    core = Core()
    assert kube(core).ensure_receiver_key("tg", "trainguard-receiver-key", b"new") == b"new"
    [body] = core.created
    assert body["metadata"]["labels"][MANAGED_BY] == MANAGED_BY_VALUE
    assert body["stringData"] == {"key": "new"}


def test_an_existing_key_is_read_and_nothing_written() -> None:
    core = Core(existing=b"old")
    assert kube(core).ensure_receiver_key("tg", "trainguard-receiver-key", b"new") == b"old"
    assert core.created == []
