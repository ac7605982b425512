"""The Kubernetes edge in memory, for the tests of the rooms that read and write through it: one store of
objects by kind, namespace and name, served as kube.Kube's calls and kube.ClusterCache's reads, which
the rooms name in narrow Protocols of their own (controller/reconcile.py ReconcileAPI and ReconcileReads,
controller/periodic.py, remediation/store.py MonitorAPI, remediation/passes.py, diagnosis/passes.py
PassAPI and PassReads, diagnosis/fetch.py ReportAPI and ReportReads, status/fetch.py MonitorAPI).

It behaves as the real edge does where the rooms depend on it: a read returns a copy (an object read from
the API or a watch cache is the reader's own); a server-side apply writes only when the object changes
and says whether it did (None for a Secret this process had not applied: the operator cannot read
Secrets), and a refused apply raises the client's ApiException; create_if_absent creates once; a status
or monitor patch is a JSON merge patch. Every write moves the object's resourceVersion (get_monitor
shows it), and a status patch given a resourceVersion that is no longer the object's is refused with
409, as the apiserver does; `interleave` holds writes of someone else's that land just before the next
status patch. Every write is recorded for the tests to look at.

The real edge is exercised against a kube-apiserver in e2e/ (e2e/test_remediation_cluster.py,
e2e/test_watch_caches.py, e2e/test_operator.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from trainguard.api.common import LabelSelector
from trainguard.api.monitor import WorkloadRef
from trainguard.kube import MissingAPI
from trainguard.kube.client import HASH_ANNOTATION, content_hash
from trainguard.kube.objects import Hearing, labels_of
from trainguard.kube.workloads import KUEUE_JOB_UID, OwnerRead, Workload, resolve

Obj = dict[str, Any]
Key = tuple[str, str, str]
"""kind, namespace ("" for a cluster-scoped object), name."""

MONITOR = "TrainingJobMonitor"
POLICY = "AlertPolicy"
PLURALS = {"trainingjobmonitors": MONITOR, "alertpolicies": POLICY}


def _digest(obj: Obj) -> str:
    """An object's content hash: its hash annotation (kube.client.with_hash), else its content's."""
    return str(
        ((obj.get("metadata") or {}).get("annotations") or {}).get(HASH_ANNOTATION) or content_hash(obj)
    )


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the apiserver applies application/merge-patch+json."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def key_of(obj: Obj) -> Key:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace") or "", meta["name"]


def pod(namespace: str, name: str, labels: dict[str, str], *containers: str, **fields: Any) -> Obj:
    """A Pod with `containers` (by name), and other top-level fields (spec and status merged in)."""
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "labels": dict(labels)},
        "spec": {"containers": [{"name": c} for c in containers]},
    }
    return merge_patch(body, fields) if fields else body


def node(name: str, **labels: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels)}}


def refused(code: int, message: str) -> ApiException:
    """The client's exception for a request the apiserver refused with a Status (422: the object is
    invalid, 403: forbidden, 503: the apiserver is not well ...)."""
    exc = ApiException(status=code, reason="Unprocessable Entity" if code == 422 else "Error")
    exc.body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "code": code})
    return exc


def namespace_terminating(namespace: str = "ml") -> ApiException:
    """What the apiserver's NamespaceLifecycle admission answers (k8s.io/apiserver, v0.36.3): a Forbidden
    Status whose details carry the NamespaceTerminating cause."""
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = json.dumps({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Forbidden", "code": 403,
        "message": f'podmonitors.monitoring.coreos.com "trainguard-llama-pretrain" is forbidden: unable to create '
                   f"new content in namespace {namespace} because it is being terminated",
        "details": {"name": "trainguard-llama-pretrain", "group": "monitoring.coreos.com", "kind": "podmonitors",
                    "causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace",
                                "message": f"namespace {namespace} is being terminated"}]},
    })  # fmt: skip
    return exc


class FakeKube:
    """kube.Kube and kube.ClusterCache over one in-memory store (see the module's docstring).

    `objects` are the store's first contents (monitors, policies, pods, nodes, Leases, Jobs ...; put()
    adds or replaces more). An apply of a kind in `missing_kinds` raises MissingAPI (its CRD is not
    installed); one of a kind in `refuse` raises that ApiException."""

    def __init__(
        self,
        *objects: Obj,
        missing_kinds: tuple[str, ...] = (),
        refuse: dict[str, ApiException] | None = None,
    ) -> None:
        self.objects: dict[Key, Obj] = {}
        self.versions: dict[Key, int] = {}
        """Each object's resourceVersion, moved by every write."""
        self.interleave: list[Callable[[FakeKube], None]] = []
        """Someone else's writes, each landing just before the next status patch (taken in order)."""
        self.conflicts = 0
        """Status patches refused for a stale resourceVersion."""
        self.put(*objects)
        self.missing_kinds = missing_kinds
        self.refuse = refuse or {}
        # what was written
        self.calls: list[str] = []
        """The kind of every apply, in order."""
        self.applies: list[str] = []
        """The kinds whose apply changed the object."""
        self.applied: set[Key] = set()
        """What has ever been applied (server-side apply's field manager owns its fields)."""
        self.written: set[Key] = set()
        """What this process has applied (kube.Kube's memory: clear it for a restarted operator)."""
        self.emptied: list[str] = []
        """Secrets applied again without their data: server-side apply drops the keys trainguard owned."""
        self.created: list[Obj] = []
        self.status_writes: list[Obj] = []
        """Each patch_status's status, in order."""
        self.monitor_patches: list[tuple[str, str, Obj]] = []
        self.events: list[tuple[str, str]] = []
        """(reason, message) of each Event posted."""
        self.hearing = Hearing(synced=True, leases=0, leases_heard_s=0.0, breaks=0)
        """What node_hearing answers: caches that have listed and hear the API all along."""

    # ---- the store ----

    def put(self, *objects: Obj) -> None:
        """Add or replace objects (a test's setup, or a change made by someone else)."""
        for obj in objects:
            self.objects[key_of(obj)] = copy.deepcopy(obj)
            self._moved(key_of(obj))

    def _moved(self, key: Key) -> None:
        self.versions[key] = self.versions.get(key, 0) + 1

    def _get(self, kind: str, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.objects.get((kind, namespace, name)))

    def _list(self, kind: str, namespace: str | None = None) -> list[Obj]:
        return [copy.deepcopy(o) for (k, ns, _), o in self.objects.items()
                if k == kind and namespace in (None, ns)]  # fmt: skip

    def records(self, namespace: str, name: str) -> list[Obj]:
        """The remediation records in the status of the monitor `namespace`/`name`."""
        return list(
            ((self._get(MONITOR, namespace, name) or {}).get("status") or {}).get("remediations") or []
        )

    @property
    def status(self) -> Obj | None:
        """The status last written, None before any."""
        return self.status_writes[-1] if self.status_writes else None

    # ---- kube.Kube: reads ----

    def get_monitor(self, namespace: str, name: str) -> Obj | None:
        found = self._get(MONITOR, namespace, name)
        if found is not None:
            found.setdefault("metadata", {})["resourceVersion"] = str(
                self.versions.get((MONITOR, namespace, name), 0)
            )
        return found

    def get_policy(self, namespace: str, name: str) -> Obj | None:
        return self._get(POLICY, namespace, name)

    def list_monitors(self, namespace: str | None = None, timeout: float | None = None) -> list[Obj]:
        return self._list(MONITOR, namespace)

    # ---- kube.Kube: writes ----

    def apply(self, obj: Obj) -> bool | None:
        self.calls.append(obj["kind"])
        if obj["kind"] in self.missing_kinds:
            raise MissingAPI(f"{obj['kind']} is not served")
        if obj["kind"] in self.refuse:
            raise self.refuse[obj["kind"]]
        key = key_of(obj)
        first_secret_write = obj["kind"] == "Secret" and key not in self.written
        changed = self.objects.get(key) != obj
        if obj["kind"] == "Secret" and key in self.applied and "data" not in obj:
            self.emptied.append(key[2])
        self.objects[key] = copy.deepcopy(obj)
        if changed:
            self._moved(key)
        self.applied.add(key)
        self.written.add(key)
        if changed:
            self.applies.append(obj["kind"])
        return None if first_secret_write else changed

    def unchanged(self, obj: Obj) -> bool:
        """Whether an apply would change nothing, as kube.Kube answers it from the owned objects' watch
        cache without a request (a Secret, which it cannot read: whether this process wrote the same)."""
        key = key_of(obj)
        stored = self.objects.get(key)
        if obj["kind"] == "Secret":  # by content hash, as kube.Kube: a caller may hold only the hash
            return key in self.written and stored is not None and _digest(stored) == _digest(obj)
        return stored == obj

    def create_if_absent(self, obj: Obj) -> bool:
        key = key_of(obj)
        if key in self.objects:
            return False
        self.objects[key] = copy.deepcopy(obj)
        self._moved(key)
        self.created.append(copy.deepcopy(obj))
        return True

    def patch_status(
        self, plural: str, namespace: str, name: str, status: Obj, *, resource_version: str | None = None
    ) -> None:
        """A merge patch of the object's status; one that is not there is left alone, as kube.Kube does; one
        with a resourceVersion the object has moved past is refused with 409."""
        if self.interleave:
            self.interleave.pop(0)(self)
        key = (PLURALS.get(plural, plural), namespace, name)
        if (
            key in self.objects
            and resource_version is not None
            and resource_version != str(self.versions.get(key, 0))
        ):
            self.conflicts += 1
            raise ApiException(status=409, reason="Conflict")
        self.status_writes.append(copy.deepcopy(status))
        if key in self.objects:
            self.objects[key] = merge_patch(self.objects[key], {"status": copy.deepcopy(status)})
            self._moved(key)

    def patch_monitor(self, namespace: str, name: str, patch: Obj) -> Obj:
        self.monitor_patches.append((namespace, name, copy.deepcopy(patch)))
        key = (MONITOR, namespace, name)
        self.objects[key] = merge_patch(self.objects[key], copy.deepcopy(patch))
        self._moved(key)
        return copy.deepcopy(self.objects[key])

    def post_event(
        self, regarding: Obj, reason: str, message: str, type_: str = "Normal", timeout: float | None = None
    ) -> None:
        self.events.append((reason, message))

    # ---- kube.ClusterCache: the watch caches' reads ----

    def monitors(self) -> list[Obj]:
        """As the monitor cache holds them: each with its resourceVersion."""
        return [self._versioned(m) for m in self._list(MONITOR)]

    def _versioned(self, obj: Obj) -> Obj:
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.versions.get(key_of(obj), 0))
        return obj

    def live_version(self, obj: Obj) -> str | None:
        """The owned object's resourceVersion, as the owned objects' watch cache holds it."""
        key = key_of(obj)
        return str(self.versions.get(key, 0)) if key in self.objects else None

    def monitors_in(self, namespace: str, timeout: float | None = None) -> list[Obj]:
        return self._list(MONITOR, namespace)

    def monitor(self, namespace: str, name: str) -> Obj | None:
        """As the monitor cache holds it: with its resourceVersion, like `monitors`."""
        found = self._get(MONITOR, namespace, name)
        return None if found is None else self._versioned(found)

    def monitor_uid(self, namespace: str, name: str) -> str | None:
        uid = ((self._get(MONITOR, namespace, name) or {}).get("metadata") or {}).get("uid")
        return str(uid) if uid else None

    def policy(self, namespace: str, name: str) -> Obj | None:
        found = self._get(POLICY, namespace, name)
        return None if found is None else self._versioned(found)

    def pods(self, namespace: str, selector: LabelSelector) -> list[Obj]:
        """The namespace's pods that `selector` matches (an empty selector matches none)."""
        if selector.is_empty():
            return []
        return [p for p in self._list("Pod", namespace) if selector.matches(labels_of(p))]

    def job(self, namespace: str, name: str) -> Obj | None:
        return self._get("Job", namespace, name)

    def workload(self, namespace: str, ref: WorkloadRef, selector: LabelSelector) -> Workload:
        """As kube.ClusterCache reads it: the owner, a TrainJob's JobSet, the namespace's Jobs, the
        selector's pods, its Kueue Workloads; a kind in `missing_kinds` is not served."""
        version = ref.resolved_api_version()
        if ref.kind in self.missing_kinds:
            return resolve(OwnerRead(ref.kind, ref.name, namespace, version, served=False))
        owner = self._get(ref.kind, namespace, ref.name)
        if owner is None:
            return resolve(OwnerRead(ref.kind, ref.name, namespace, version))
        jobset = owner if ref.kind == "JobSet" else None
        if ref.kind == "TrainJob":
            jobset = self._get("JobSet", namespace, ref.name)
        uid = (owner.get("metadata") or {}).get("uid")
        return resolve(OwnerRead(
            ref.kind, ref.name, namespace, version, owner=owner, jobset=jobset,
            jobset_served="JobSet" not in self.missing_kinds, jobs=tuple(self._list("Job", namespace)),
            pods=tuple(self.pods(namespace, selector)),
            workloads=tuple(w for w in self._list("Workload", namespace) if uid and labels_of(w).get(KUEUE_JOB_UID) == uid),
        ))  # fmt: skip

    def nodes(self) -> list[Obj]:
        return self._list("Node")

    def node(self, name: str) -> Obj | None:
        return self._get("Node", "", name)

    def node_leases(self) -> list[Obj]:
        return self._list("Lease")

    def node_hearing(self) -> Hearing:
        return self.hearing
