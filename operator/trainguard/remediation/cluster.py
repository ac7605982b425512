"""The remediation edge: the Kubernetes calls and sidecar control calls a plan is carried out with.

Every call has a timeout: a hung apiserver or sidecar must not hold the executor forever. Every write is
idempotent, so a step redone after an operator restart changes nothing the first run already changed.
`ClusterOps` is the protocol the executor depends on; tests use a fake that behaves the same.

RBAC the operator needs for this module: nodes get, list, patch; pods list, delete (namespaced);
jobs.batch, jobsets.jobset.x-k8s.io, pytorchjobs.kubeflow.org patch (the resume-from annotation).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, TypeVar, cast

from kubernetes import client
from kubernetes import utils as k8s_utils
from kubernetes.client.exceptions import ApiException

CORDONED_AT = "trainguard.io/cordoned-at"
CORDONED_BY = "trainguard.io/cordoned-by"
CORDON_REASON = "trainguard.io/cordon-reason"
FAULTY_TAINT = "trainguard.io/faulty"
SPARE_LABEL = "trainguard.io/spare"
RESUME_FROM = "trainguard.io/resume-from"
"""On the workload: JSON {step, path} of the checkpoint the gang was restarted to resume from."""
GPU_RESOURCE = "nvidia.com/gpu"
MERGE_PATCH = "application/merge-patch+json"
CONTROL_TIMEOUT = 3.0
"""Seconds one sidecar control call may take: a sidecar on a dying node must not stall the plan."""
CONFLICT_RETRIES = 5

PLURALS = {"Job": "jobs", "JobSet": "jobsets", "PyTorchJob": "pytorchjobs"}

T = TypeVar("T")


class Sidecar(NamedTuple):
    pod: str
    node: str
    base_url: str
    """http://<podIP>:<port>, the sidecar's TCP server (control needs the bearer token there)."""


class ControlError(Exception):
    """A sidecar did not answer its control endpoint with 2xx (or not at all)."""


class ClusterOps(Protocol):
    def cordon(self, node: str, reason: str, record_id: str) -> str:
        """Mark the node unschedulable with who, when and why; returns what was done."""
        ...

    def taint(self, node: str, reason: str) -> str:
        """Add trainguard.io/faulty=<reason>:NoSchedule unless present; returns what was done."""
        ...

    def cordon_history(self) -> list[tuple[str, float]]: ...

    def gpu_node_count(self) -> int: ...

    def spares(self) -> list[str]: ...

    def gang_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]: ...

    def delete_pods(self, namespace: str, names: list[str]) -> list[str]:
        """Delete pods; returns the names actually deleted (a pod already gone is fine)."""
        ...

    def placement(
        self, namespace: str, label_selector: str, created_after: float
    ) -> dict[str, str] | None: ...

    def annotate_workload(
        self, namespace: str, api_version: str, kind: str, name: str, annotations: dict[str, str]
    ) -> None: ...

    def sidecars(self, namespace: str, label_selector: str, port: int) -> list[Sidecar]: ...

    def control(self, base_url: str, token: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def read_control(self, base_url: str, token: str) -> dict[str, Any]: ...


def creation_seconds(obj: dict[str, Any]) -> float:
    """metadata.creationTimestamp as unix seconds (the apiserver keeps whole seconds)."""
    raw = (obj.get("metadata") or {}).get("creationTimestamp")
    if not raw:
        return 0.0
    return dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()


def is_terminating(pod: dict[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def new_pods_placement(pods: list[dict[str, Any]], created_after: float) -> dict[str, str] | None:
    """{pod: node} of the live pods created at or after `created_after`, or None while any of them is
    unscheduled or there are none. creationTimestamp has whole seconds, so the second `created_after`
    falls in counts as after; pods being deleted (the old gang) are left out."""
    floor = math.floor(created_after)
    fresh = [p for p in pods if not is_terminating(p) and creation_seconds(p) >= floor]
    if not fresh:
        return None
    placed = {str(p["metadata"]["name"]): str((p.get("spec") or {}).get("nodeName") or "") for p in fresh}
    return None if any(not node for node in placed.values()) else placed


def taints_with(
    taints: list[dict[str, Any]], key: str, value: str, effect: str
) -> list[dict[str, Any]] | None:
    """The node's taints with ours added, or None when a taint of that key and effect is already there
    (whatever its value: the first reason stands)."""
    if any(t.get("key") == key and t.get("effect") == effect for t in taints):
        return None
    return [*taints, {"key": key, "value": value, "effect": effect}]


def label_value(text: str) -> str:
    """A taint value from free text: at most 63 of [A-Za-z0-9_.-], starting and ending alphanumeric."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "-" for c in text)[:63]
    return cleaned.strip("-_.") or "fault"


def _is_ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _gpus(node: dict[str, Any]) -> float:
    capacity = (node.get("status") or {}).get("capacity") or {}
    try:
        return float(cast(Any, k8s_utils).parse_quantity(capacity.get(GPU_RESOURCE, "0")))
    except ValueError:
        return 0.0


def _url_host(ip: str) -> str:
    try:
        return f"[{ip}]" if ipaddress.ip_address(ip).version == 6 else ip
    except ValueError:
        return ip


class Cluster:
    """ClusterOps over a kubernetes ApiClient and the sidecars' HTTP control endpoint."""

    def __init__(
        self,
        api: client.ApiClient,
        timeout: float = 10.0,
        control_timeout: float = CONTROL_TIMEOUT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.timeout = timeout
        """Seconds any one API call may take."""
        self.control_timeout = control_timeout
        self.clock = clock
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def _plain(self, obj: Any) -> dict[str, Any]:
        """A client model as the API's JSON (camelCase dict)."""
        return cast(dict[str, Any], cast(Any, self.api).sanitize_for_serialization(obj))

    # ---- nodes ----

    def _node(self, name: str) -> dict[str, Any]:
        node = self.core.read_node(name, _request_timeout=self.timeout)
        return self._plain(node)

    def _nodes(self, label_selector: str | None = None) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = {"_request_timeout": self.timeout}
        if label_selector:
            kwargs["label_selector"] = label_selector
        items = self.core.list_node(**kwargs).items
        return [self._plain(n) for n in items]

    def _patch_node(self, name: str, body: dict[str, Any]) -> None:
        self.core.patch_node(name, body, _content_type=MERGE_PATCH, _request_timeout=self.timeout)

    def _on_conflict(self, fn: Callable[[], T]) -> T:
        """Run a read-modify-write; a 409 (someone wrote in between) reads again."""
        for attempt in range(CONFLICT_RETRIES):
            try:
                return fn()
            except ApiException as exc:
                if exc.status != 409 or attempt == CONFLICT_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def cordon(self, node: str, reason: str, record_id: str) -> str:
        """Unschedulable, annotated with when, by which record and why. Idempotent: a node this record
        (or another trainguard record) already cordoned keeps its first annotations, so a redo does not
        move cordoned-at and the storm guard counts it once. A node someone else cordoned is left as
        it is: that cordon is theirs, and `trainguard uncordon` must not undo it."""

        def attempt() -> str:
            live = self._node(node)
            meta = live.get("metadata") or {}
            annotations = meta.get("annotations") or {}
            cordoned = bool((live.get("spec") or {}).get("unschedulable"))
            if cordoned and CORDONED_BY in annotations:
                return f"already cordoned by {annotations[CORDONED_BY]}"
            if cordoned:
                return "already cordoned, not by trainguard: left as is"
            self._patch_node(
                node,
                {
                    "metadata": {
                        "resourceVersion": meta.get("resourceVersion"),
                        "annotations": {
                            CORDONED_AT: str(int(self.clock())),
                            CORDONED_BY: record_id,
                            CORDON_REASON: reason[:1024],
                        },
                    },
                    "spec": {"unschedulable": True},
                },
            )
            return "cordoned"

        return self._on_conflict(attempt)

    def taint(self, node: str, reason: str) -> str:
        """A merge patch replaces the whole taint list, so read, add ours, and write with the
        resourceVersion read: a taint another writer added meanwhile is a 409 and a fresh read, not a
        lost taint."""

        def attempt() -> str:
            live = self._node(node)
            taints = (live.get("spec") or {}).get("taints") or []
            merged = taints_with(taints, FAULTY_TAINT, label_value(reason), "NoSchedule")
            if merged is None:
                return f"already tainted {FAULTY_TAINT}:NoSchedule"
            version = (live.get("metadata") or {}).get("resourceVersion")
            self._patch_node(node, {"metadata": {"resourceVersion": version}, "spec": {"taints": merged}})
            return f"tainted {FAULTY_TAINT}={label_value(reason)}:NoSchedule"

        return self._on_conflict(attempt)

    def cordon_history(self) -> list[tuple[str, float]]:
        """(node, unix seconds) of every cordon trainguard's annotations still show."""
        out: list[tuple[str, float]] = []
        for n in self._nodes():
            annotations = (n.get("metadata") or {}).get("annotations") or {}
            try:
                out.append((str(n["metadata"]["name"]), float(str(annotations[CORDONED_AT]))))
            except (KeyError, ValueError):
                continue
        return sorted(out, key=lambda item: item[1])

    def gpu_node_count(self) -> int:
        return sum(1 for n in self._nodes() if _gpus(n) > 0)

    def spares(self) -> list[str]:
        """Spare nodes a pod could be placed on now: labelled, Ready and not cordoned."""
        return sorted(
            str(n["metadata"]["name"])
            for n in self._nodes(f"{SPARE_LABEL}=true")
            if not (n.get("spec") or {}).get("unschedulable") and _is_ready(n)
        )

    # ---- pods and workloads ----

    def gang_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        pods = self.core.list_namespaced_pod(
            namespace, label_selector=label_selector, _request_timeout=self.timeout
        ).items
        return [self._plain(p) for p in pods]

    def delete_pods(self, namespace: str, names: list[str]) -> list[str]:
        """Delete with the pods' own grace period (the kubelet stops the old ranks before the Job
        controller's replacements start on a live node); a pod already gone is not an error."""
        deleted = []
        for name in names:
            try:
                self.core.delete_namespaced_pod(name, namespace, _request_timeout=self.timeout)
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            deleted.append(name)
        return deleted

    def placement(self, namespace: str, label_selector: str, created_after: float) -> dict[str, str] | None:
        return new_pods_placement(self.gang_pods(namespace, label_selector), created_after)

    def annotate_workload(
        self, namespace: str, api_version: str, kind: str, name: str, annotations: dict[str, str]
    ) -> None:
        group, _, version = api_version.rpartition("/")
        if kind not in PLURALS or not group:
            raise ValueError(f"cannot annotate a {kind} ({api_version})")
        self.custom.patch_namespaced_custom_object(
            group,
            version,
            namespace,
            PLURALS[kind],
            name,
            {"metadata": {"annotations": annotations}},
            _content_type=MERGE_PATCH,
            _request_timeout=self.timeout,
        )

    # ---- sidecars ----

    def sidecars(self, namespace: str, label_selector: str, port: int) -> list[Sidecar]:
        """The Running, not terminating pods of the selector with an IP: their sidecars can be called."""
        out = []
        for pod in self.gang_pods(namespace, label_selector):
            status = pod.get("status") or {}
            ip = status.get("podIP")
            if status.get("phase") != "Running" or not ip or is_terminating(pod):
                continue
            node = str((pod.get("spec") or {}).get("nodeName") or "")
            out.append(Sidecar(str(pod["metadata"]["name"]), node, f"http://{_url_host(ip)}:{port}"))
        return sorted(out)

    def _call(self, method: str, url: str, token: str, body: dict[str, Any] | None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.control_timeout) as response:
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:200].decode(errors="replace")
            raise ControlError(f"{method} {url}: HTTP {exc.code} {detail}".strip()) from None
        except (OSError, ValueError) as exc:  # refused, timed out, unreachable, not JSON
            raise ControlError(f"{method} {url}: {exc}") from None
        if not isinstance(answer, dict):
            raise ControlError(f"{method} {url}: expected a JSON object")
        return answer

    def control(self, base_url: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/control; the answer is the sidecar's control view after the change."""
        return self._call("POST", f"{base_url}/v1/control", token, body)

    def read_control(self, base_url: str, token: str) -> dict[str, Any]:
        return self._call("GET", f"{base_url}/v1/control", token, None)
