"""The operator's edge to the Kubernetes API: every read and write of the controller goes here."""

from __future__ import annotations

import hashlib
import json
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from trainguard.api import GROUP, VERSION

FIELD_MANAGER = "trainguard-operator"
HASH_ANNOTATION = "trainguard.io/input-hash"


class MissingAPI(Exception):
    """A kind the cluster does not serve (for example prometheus-operator's CRDs are not installed)."""


def content_hash(obj: dict[str, Any]) -> str:
    """A stable hash of an object as rendered (before the hash annotation is added)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:20]


def with_hash(obj: dict[str, Any]) -> tuple[dict[str, Any], str]:
    digest = content_hash(obj)
    meta = dict(obj["metadata"])
    meta["annotations"] = {**meta.get("annotations", {}), HASH_ANNOTATION: digest}
    return {**obj, "metadata": meta}, digest


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._dynamic: DynamicClient | None = None

    @property
    def dynamic(self) -> DynamicClient:
        if self._dynamic is None:
            self._dynamic = DynamicClient(self.api)
        return self._dynamic

    def _resource(self, obj: dict[str, Any]) -> Any:
        try:
            return self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        except ResourceNotFoundError:
            # the CRD may have been installed after our discovery: look again once
            self.dynamic.resources.invalidate_cache()
            try:
                return self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            except ResourceNotFoundError:
                raise MissingAPI(
                    f"{obj['kind']} ({obj['apiVersion']}) is not served by this cluster"
                ) from None

    def current_hash(self, obj: dict[str, Any]) -> str | None:
        """The input-hash annotation of the live object, or None if it does not exist."""
        meta = obj["metadata"]
        try:
            live = self.dynamic.get(self._resource(obj), name=meta["name"], namespace=meta.get("namespace"))
        except NotFoundError:
            return None
        annotations = live.metadata.annotations or {}
        return str(annotations.get(HASH_ANNOTATION, "")) or ""

    def apply(self, obj: dict[str, Any]) -> None:
        """Server-side apply, taking ownership of the fields trainguard renders."""
        meta = obj["metadata"]
        self.dynamic.server_side_apply(
            self._resource(obj),
            body=obj,
            name=meta["name"],
            namespace=meta.get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )

    def create_if_absent(self, obj: dict[str, Any]) -> bool:
        """Create without reading first (the operator may create Secrets but not read them)."""
        try:
            self.dynamic.create(self._resource(obj), body=obj, namespace=obj["metadata"].get("namespace"))
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def _get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            result = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return cast(dict[str, Any], result)

    def get_policy(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_custom("alertpolicies", namespace, name)

    def get_monitor(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_custom("trainingjobmonitors", namespace, name)

    def node_names(self, selector: str) -> list[str]:
        nodes = self.core.list_node(label_selector=selector).items
        return sorted(str(n.metadata.name) for n in nodes if n.metadata is not None)

    def count_pods(self, namespace: str, selector: str) -> int:
        pods = self.core.list_namespaced_pod(namespace, label_selector=selector)
        return len([p for p in pods.items if p.metadata is None or p.metadata.deletion_timestamp is None])

    def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, plural, name, {"status": status}
            )
        except ApiException as exc:
            if exc.status != 404:  # deleted meanwhile: nothing to report on
                raise
