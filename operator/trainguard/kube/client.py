"""Reads by name and writes: server-side apply, create-if-absent, resourceVersion-conditional patches,
status, Events, and the few Secrets the operator may touch. Every call has a timeout: a hung call must
not hold a handler thread forever. Collections are read from the watch caches (kube/cache.py); the
list methods here serve the one-shot commands (`trainguard status`, `report`, `drill`)."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import secrets
import time
from collections.abc import Callable
from typing import Any, cast

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from trainguard.api import GROUP, VERSION
from trainguard.catalog.kubernetes import MANAGED_LABELS
from trainguard.kube.errors import MissingAPI, NotSynced, is_conflict

FIELD_MANAGER = "trainguard-operator"
HASH_ANNOTATION = "trainguard.io/input-hash"
PEERING = ("kopf.dev", "v1", "clusterkopfpeerings")
MERGE_PATCH = "application/merge-patch+json"
SECRET_REWRITE_S = 3600.0
"""How long a Secret this process wrote stands before an apply writes it again although its content is
the same: the operator cannot read Secrets, so a hand edit of one shows nowhere; it is repaired within
this time (or at once when its content changes: a new key, a new uid, a new CA)."""
WORKLOAD_PLURALS = {"Job": "jobs", "JobSet": "jobsets", "TrainJob": "trainjobs", "PyTorchJob": "pytorchjobs"}
"""The workload kinds a monitor's workloadRef may name, by plural."""


def _workload(api_version: str, kind: str) -> tuple[str, str, str] | None:
    """(group, version, plural) of a workload kind a monitor may name; None for another kind."""
    group, _, version = api_version.rpartition("/")
    plural = WORKLOAD_PLURALS.get(kind)
    return (group, version, plural) if group and plural else None


def content_hash(obj: dict[str, Any]) -> str:
    """A stable hash of an object as rendered (before the hash annotation is added)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:20]


def with_hash(obj: dict[str, Any]) -> tuple[dict[str, Any], str]:
    digest = content_hash(obj)
    meta = dict(obj["metadata"])
    meta["annotations"] = {**meta.get("annotations", {}), HASH_ANNOTATION: digest}
    return {**obj, "metadata": meta}, digest


Live = Callable[[dict[str, Any]], dict[str, Any] | None]
"""What a watch cache holds of an object trainguard applies (kube.ClusterCache.applied: its metadata and
`otherManagers`), None when absent; raises NotSynced when no cache can say."""


class Kube:
    def __init__(
        self,
        api: client.ApiClient,
        timeout: float = 30.0,
        *,
        live: Live | None = None,
        secret_rewrite_s: float = SECRET_REWRITE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.timeout = timeout
        """Seconds any one API call may take: a hung call must not hold a handler thread forever."""
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._dynamic: DynamicClient | None = None
        self.live = live
        """The owned objects' watch cache; without it (or before it has listed) an apply reads by name."""
        self.secret_rewrite_s = secret_rewrite_s
        self.clock = clock
        self._applied: dict[tuple[str, str, str], tuple[str, str]] = {}
        """(resourceVersion, content hash) of what this process last applied, per object: while the live
        object is still at that version and the desired content the same, there is nothing to repair."""
        self._written_at: dict[tuple[str, str, str], float] = {}
        """When this process last wrote each Secret (SECRET_REWRITE_S)."""

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

    def _live(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """The live object's metadata, from the watch cache when it holds the kind, else read by name
        (then without its field managers: only this process's memory of its version tells it untouched)."""
        if self.live is not None:
            try:
                return self.live(obj)
            except NotSynced:
                pass
        meta = obj["metadata"]
        try:
            found = self.dynamic.get(
                self._resource(obj),
                name=meta["name"],
                namespace=meta.get("namespace"),
                _request_timeout=self.timeout,
            )
        except NotFoundError:
            return None
        return {"metadata": {"resourceVersion": str(found.metadata.resourceVersion)}, "otherManagers": None}

    def live_version(self, obj: dict[str, Any]) -> str | None:
        """The resourceVersion the owned objects' watch cache holds for `obj`, None when it holds none;
        no request. Raises NotSynced when there is no such cache or it has not listed."""
        if self.live is None:
            raise NotSynced("no watch cache of the owned objects")
        live = self.live(obj)
        return None if live is None else str((live.get("metadata") or {}).get("resourceVersion") or "")

    def _state(self, obj: dict[str, Any]) -> tuple[str | None, bool]:
        """(the version the object is at, None when absent or unknown; whether it is in place as rendered).
        In place: untouched since this process applied the same content (its version has not moved), or,
        for an object this process has not applied (a new leader, a restart), stamped with the same content
        hash and written by no other field manager. A Secret, which the operator cannot read, is in place
        while this process wrote the same content less than `secret_rewrite_s` ago."""
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace") or "", meta["name"])
        # a reconciled object carries its content's hash already (with_hash); others are hashed here
        digest = (meta.get("annotations") or {}).get(HASH_ANNOTATION) or content_hash(obj)
        applied = self._applied.get(key)
        if obj["kind"] == "Secret":
            at = self._written_at.get(key)
            fresh = at is not None and self.clock() - at < self.secret_rewrite_s
            return (applied[0] if applied else None), bool(applied and applied[1] == digest and fresh)
        live = self._live(obj)
        if live is None:
            return None, False
        version = str((live.get("metadata") or {}).get("resourceVersion") or "")
        stamped = ((live.get("metadata") or {}).get("annotations") or {}).get(HASH_ANNOTATION)
        others = live.get("otherManagers")
        untouched = applied == (version, digest) or (stamped == digest and others == [])
        return version, untouched

    def unchanged(self, obj: dict[str, Any]) -> bool:
        """Whether an apply of `obj` would write nothing (see _state); reads only the watch cache when it
        holds the kind."""
        return self._state(obj)[1]

    def apply(self, obj: dict[str, Any]) -> bool | None:
        """Server-side apply, taking ownership of the fields trainguard renders. Returns whether the
        object changed: an unchanged object is not written again, so its resourceVersion tells. None for
        a Secret this process has not written before (the operator cannot read Secrets, so it cannot
        tell). The apply is skipped when the object is in place as rendered (_state): the owned kinds are
        compared with their watch cache, with no request; a hand edit, a deletion, or another manager's
        write makes it apply again. A Secret is written when its content changes, and again every
        `secret_rewrite_s`."""
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace") or "", meta["name"])
        before, in_place = self._state(obj)
        if in_place:
            return False
        digest = (meta.get("annotations") or {}).get(HASH_ANNOTATION) or content_hash(obj)
        result = self.dynamic.server_side_apply(
            self._resource(obj),
            body=obj,
            name=meta["name"],
            namespace=meta.get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
            _request_timeout=self.timeout,
        )
        after = str(result.metadata.resourceVersion)
        self._applied[key] = (after, digest)
        if obj["kind"] == "Secret":
            self._written_at[key] = self.clock()
            if before is None:
                return None
        return before != after

    def create_if_absent(self, obj: dict[str, Any]) -> bool:
        """Create without reading first (the operator may create Secrets but not read them)."""
        try:
            self.dynamic.create(
                self._resource(obj),
                body=obj,
                namespace=obj["metadata"].get("namespace"),
                _request_timeout=self.timeout,
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def _get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            result = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, name, _request_timeout=self.timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return cast(dict[str, Any], result)

    def get_policy(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_custom("alertpolicies", namespace, name)

    def get_monitor(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_custom("trainingjobmonitors", namespace, name)

    def list_monitors(
        self, namespace: str | None = None, timeout: float | None = None
    ) -> list[dict[str, Any]]:
        """Monitors read from the API now (one-shot commands; the operator reads its watch cache)."""
        t = timeout or self.timeout
        if namespace is None:
            result = self.custom.list_cluster_custom_object(
                GROUP, VERSION, "trainingjobmonitors", _request_timeout=t
            )
        else:
            result = self.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, "trainingjobmonitors", _request_timeout=t
            )
        return [cast(dict[str, Any], item) for item in cast(dict[str, Any], result).get("items", [])]

    def get_peering(self, name: str) -> dict[str, Any] | None:
        try:
            return cast(
                dict[str, Any],
                self.custom.get_cluster_custom_object(*PEERING, name, _request_timeout=self.timeout),
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def server_version(self) -> tuple[str, str]:
        info = client.VersionApi(self.api).get_code(_request_timeout=self.timeout)
        return str(info.major), str(info.minor)

    def patch_status(
        self,
        plural: str,
        namespace: str,
        name: str,
        status: dict[str, Any],
        *,
        resource_version: str | None = None,
    ) -> None:
        """A merge patch of the object's status. With `resource_version` the write is conditional: the
        apiserver answers 409 (kube.errors.is_conflict) when the object has been written since that
        version was read."""
        body: dict[str, Any] = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, plural, name, body, _request_timeout=self.timeout
            )
        except ApiException as exc:
            if exc.status != 404:  # deleted meanwhile: nothing to report on
                raise

    def post_event(
        self,
        regarding: dict[str, Any],
        reason: str,
        message: str,
        type_: str = "Normal",
        timeout: float | None = None,
    ) -> None:
        """A core/v1 Event about an object (apiVersion, kind, metadata.name/namespace/uid): from kopf's
        handlers and from the operator's own threads alike, where kopf's event queue does not exist."""
        meta = regarding.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        now = dt.datetime.now(dt.UTC)
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.get('name', 'trainguard')}.{secrets.token_hex(8)}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": regarding.get("apiVersion"),
                "kind": regarding.get("kind"),
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": FIELD_MANAGER},
            "firstTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "count": 1,
            "reportingComponent": FIELD_MANAGER,
        }
        self.core.create_namespaced_event(
            namespace, cast(Any, event), _request_timeout=timeout or self.timeout
        )

    def ensure_receiver_key(self, namespace: str, name: str, new_key: bytes) -> bytes:
        """The operator key, shared by every replica through one Secret in the operator's namespace:
        read it (the only Secret the operator may read, by name), or create it with `new_key`; a replica
        that loses the race to create reads the winner's."""
        for _ in range(3):
            try:
                secret = self.core.read_namespaced_secret(name, namespace, _request_timeout=self.timeout)
                data = (secret.data or {}).get("key")
                if data:
                    return base64.b64decode(data).strip()
                raise ValueError(f"Secret {namespace}/{name} has no 'key'")
            except ApiException as exc:
                if exc.status != 404:
                    raise
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_LABELS)},
                "type": "Opaque",
                "stringData": {"key": new_key.decode("ascii")},
            }  # fmt: skip
            try:
                self.core.create_namespaced_secret(namespace, cast(Any, body), _request_timeout=self.timeout)
                return new_key
            except ApiException as exc:
                if exc.status != 409:
                    raise
        raise RuntimeError(f"could neither read nor create Secret {namespace}/{name}")

    def workload_annotation(
        self,
        namespace: str,
        api_version: str,
        kind: str,
        name: str,
        key: str,
        *,
        timeout: float | None = None,
    ) -> str | None:
        """One annotation of the workload a monitor names (Job, JobSet, PyTorchJob), or None."""
        where = _workload(api_version, kind)
        if where is None:
            return None
        group, version, plural = where
        try:
            obj = self.custom.get_namespaced_custom_object(
                group, version, namespace, plural, name, _request_timeout=timeout or self.timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        value = ((cast(dict[str, Any], obj).get("metadata") or {}).get("annotations") or {}).get(key)
        return str(value) if value else None

    def plain(self, obj: Any) -> dict[str, Any]:
        return cast(dict[str, Any], self.api.sanitize_for_serialization(obj))

    def annotate_workload(
        self, namespace: str, api_version: str, kind: str, name: str, annotations: dict[str, str | None]
    ) -> None:
        """A merge patch of the workload's annotations (a None value removes the key)."""
        where = _workload(api_version, kind)
        if where is None:
            raise ValueError(f"cannot annotate a {kind} ({api_version})")
        group, version, plural = where
        self.custom.patch_namespaced_custom_object(
            group,
            version,
            namespace,
            plural,
            name,
            {"metadata": {"annotations": annotations}},
            _content_type=MERGE_PATCH,
            _request_timeout=self.timeout,
        )

    def label_namespace(self, name: str, labels: dict[str, str | None]) -> bool:
        """A merge patch of the namespace's labels (a None value removes the key); False when the
        namespace is gone."""
        try:
            self.core.patch_namespace(
                name,
                {"metadata": {"labels": labels}},
                _content_type=MERGE_PATCH,
                _request_timeout=self.timeout,
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def patch_monitor(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A merge patch of a monitor (not its status): annotations, or spec.remediation.dryRun."""
        result = self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "trainingjobmonitors", name, patch,
            _content_type=MERGE_PATCH, _request_timeout=self.timeout,
        )  # fmt: skip
        return cast(dict[str, Any], result)

    # ---- one-shot collections, for commands (the operator reads kube/cache.py) ----

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        pods = self.core.list_namespaced_pod(
            namespace, label_selector=selector, _request_timeout=self.timeout
        )
        return [self.plain(p) for p in pods.items]

    def list_nodes(self, selector: str | None = None) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = {"label_selector": selector} if selector else {}
        return [self.plain(n) for n in self.core.list_node(_request_timeout=self.timeout, **kwargs).items]

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A pod read now (the fast path's sender, when the watch cache has not seen it yet); None if gone."""
        try:
            return self.plain(self.core.read_namespaced_pod(name, namespace, _request_timeout=self.timeout))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def token_review(self, token: str, audiences: list[str]) -> dict[str, Any]:
        """The apiserver's verdict on a bearer token for `audiences` (authentication.k8s.io/v1
        TokenReview): its status, with authenticated, audiences, user (username, uid, groups, extra)
        and error. The token travels in the request body only; nothing here logs it."""
        body = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=audiences))
        review = client.AuthenticationV1Api(self.api).create_token_review(body, _request_timeout=self.timeout)
        return cast(dict[str, Any], self.plain(review).get("status") or {})

    def read_node(self, name: str) -> dict[str, Any]:
        return self.plain(self.core.read_node(name, _request_timeout=self.timeout))

    def patch_node(self, name: str, patch: dict[str, Any]) -> None:
        """A merge patch; put metadata.resourceVersion in it to make it conditional (a 409 if the node
        changed since it was read)."""
        self.core.patch_node(name, patch, _content_type=MERGE_PATCH, _request_timeout=self.timeout)

    def delete_pod(
        self, namespace: str, name: str, *, uid: str | None = None, grace_period_s: int | None = None
    ) -> bool:
        """Delete with the pod's own grace period (or `grace_period_s`; 0 forces it off a dead node);
        with `uid`, only that incarnation of the name (a pod recreated under it meanwhile is a 409).
        False when it was already gone."""
        body = client.V1DeleteOptions(
            grace_period_seconds=grace_period_s,
            preconditions=client.V1Preconditions(uid=uid) if uid else None,
        )
        try:
            self.core.delete_namespaced_pod(name, namespace, body=body, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def evict_pod(self, namespace: str, name: str, *, uid: str, grace_period_s: int) -> bool:
        """policy/v1 Eviction of that incarnation of the pod: the apiserver sets its DisruptionTarget
        condition (EvictionByEvictionAPI) and respects PodDisruptionBudgets (a 429 when one forbids it,
        raised). False when the pod was already gone."""
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=client.V1DeleteOptions(
                grace_period_seconds=grace_period_s, preconditions=client.V1Preconditions(uid=uid)
            ),
        )
        try:
            self.core.create_namespaced_pod_eviction(name, namespace, body, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """A strategic merge patch of the pod's status (conditions merge by type)."""
        self.core.patch_namespaced_pod_status(name, namespace, patch, _request_timeout=self.timeout)

    def delete_job(self, namespace: str, name: str, *, uid: str) -> bool:
        """Delete that incarnation of a batch Job with Background propagation: the Job goes at once and
        the garbage collector removes its pods after (Foreground would wait for a dead node's pod
        forever). False when it was already gone."""
        body = client.V1DeleteOptions(
            propagation_policy="Background", preconditions=client.V1Preconditions(uid=uid)
        )
        try:
            client.BatchV1Api(self.api).delete_namespaced_job(
                name, namespace, body=body, _request_timeout=self.timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def pod_log(self, namespace: str, pod: str, container: str, *, since_s: int, limit_bytes: int) -> str:
        text = self.core.read_namespaced_pod_log(
            pod, namespace, container=container, timestamps=True, since_seconds=since_s,
            limit_bytes=limit_bytes, _request_timeout=30,
        )  # fmt: skip
        return str(text or "")

    def create_event(self, namespace: str, event: dict[str, Any], timeout: float | None = None) -> None:
        self.core.create_namespaced_event(
            namespace, cast(Any, event), _request_timeout=timeout or self.timeout
        )

    # ---- the guardrails' ConfigMap (the circuit breaker's manual reset) ----

    def read_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        """A ConfigMap's data, or None when it is absent."""
        try:
            found = self.core.read_namespaced_config_map(name, namespace, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return {str(k): str(v) for k, v in (found.data or {}).items()}

    # ---- the operator's own Secrets (the key, the self-managed certificates) ----

    def read_secret(self, namespace: str, name: str) -> tuple[dict[str, str], str] | None:
        """(data, resourceVersion), or None when absent; the data is base64, as the API keeps it."""
        try:
            secret = self.core.read_namespaced_secret(name, namespace, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        data = {str(k): str(v) for k, v in (secret.data or {}).items()}
        return data, str(secret.metadata.resource_version if secret.metadata else "")

    def write_secret(self, body: dict[str, Any]) -> bool:
        """Create the Secret, or replace it when the body carries the resourceVersion it was read at.
        False when another writer was first (a 409): read again."""
        meta = body["metadata"]
        try:
            if meta.get("resourceVersion"):
                self.core.replace_namespaced_secret(
                    meta["name"], meta["namespace"], cast(Any, body), _request_timeout=self.timeout
                )
            else:
                self.core.create_namespaced_secret(
                    meta["namespace"], cast(Any, body), _request_timeout=self.timeout
                )
        except ApiException as exc:
            if is_conflict(exc):
                return False
            raise
        return True

    # ---- the pod proxy (the drill reaches sidecars through it) ----

    def proxy(
        self, namespace: str, pod: str, port: int, *, method: str, path: str, body: Any, timeout: float
    ) -> tuple[int, bytes]:
        """A request to a pod's port through the apiserver; (HTTP status, body). Status 0 when the
        apiserver itself could not be reached."""
        url_path = f"/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy{path}"
        headers = {"Content-Type": "application/json", "Accept": "*/*"}
        try:
            # the client's own request building (server, credentials, TLS), then the raw response: the
            # sidecar answers JSON or text, not a Kubernetes object
            method_, url, headers_, body_, _ = self.api.param_serialize(
                method, url_path, header_params=headers, body=body, auth_settings=["BearerToken"]
            )
            answer: Any = self.api.call_api(method_, url, header_params=headers_, body=body_,
                                          _request_timeout=timeout)  # fmt: skip
            return int(answer.status), bytes(answer.read() or b"")
        except ApiException as exc:
            return int(exc.status or 0), str(exc.body or "").encode()
        except urllib3.exceptions.HTTPError as exc:  # the apiserver itself unreachable
            return 0, str(exc).encode()
