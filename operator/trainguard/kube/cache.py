"""The operator's watch caches: monitors, policies, pods, nodes, node Leases, Jobs and the namespaces
labelled trainguard.io/monitored, each listed once and then watched (kube/watch.py); and, started on the first read that needs them and only when the
cluster serves them, JobSets, TrainJobs, PyTorchJobs and Kueue Workloads (a monitor's workload owner). The periodic passes, the planner and the admission webhook read
these instead of listing: in steady state a P0 signal, an admission request and a P0 pass make no
LIST call (e2e/test_watch_caches.py counts them at the apiserver).

Each reader names the narrow interface it needs as a Protocol in its own room (admission needs
`monitors_in`, the P0 pass `monitors`, `pods`, `nodes`, `node_leases`, `job`, ...); this class serves
them all, and their tests fake only what they name.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from trainguard.api import GROUP, VERSION
from trainguard.api.common import LabelSelector
from trainguard.api.monitor import WorkloadRef
from trainguard.catalog.kubernetes import MANAGED_BY, MANAGED_BY_VALUE, MONITORED, MONITORED_VALUE
from trainguard.kube.client import FIELD_MANAGER, HASH_ANNOTATION
from trainguard.kube.errors import ApiError, NotSynced, Stale
from trainguard.kube.objects import Hearing, labels_of, slim, slim_node, slim_pod
from trainguard.kube.watch import QUIET_S, Counts, Informer, Resource
from trainguard.kube.workloads import KUEUE_JOB_UID, KUEUE_QUEUE, OwnerRead, Workload, resolve

log = logging.getLogger("trainguard.kube.cache")

Obj = dict[str, Any]

MONITORS = Resource(GROUP, VERSION, "trainingjobmonitors")
POLICIES = Resource(GROUP, VERSION, "alertpolicies")
PODS = Resource("", "v1", "pods")
NODES = Resource("", "v1", "nodes")
NODE_LEASES = Resource("coordination.k8s.io", "v1", "leases", "kube-node-lease")
JOBS = Resource("batch", "v1", "jobs")
NAMESPACES = Resource("", "v1", "namespaces")
OWNER_PLURALS = {"Job": "jobs", "JobSet": "jobsets", "TrainJob": "trainjobs", "PyTorchJob": "pytorchjobs"}
"""The plural of each workload kind a monitor's workloadRef may name."""
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets")
KUEUE_WORKLOADS = (
    Resource("kueue.x-k8s.io", "v1beta2", "workloads"),
    Resource("kueue.x-k8s.io", "v1beta1", "workloads"),
)
"""Kueue's Workloads: v1beta2 is the storage version since Kueue 0.15; v1beta1 where only it is served."""
OWNED = {
    ("monitoring.coreos.com/v1", "PrometheusRule"): Resource(
        "monitoring.coreos.com", "v1", "prometheusrules"
    ),
    ("monitoring.coreos.com/v1alpha1", "AlertmanagerConfig"): Resource(
        "monitoring.coreos.com", "v1alpha1", "alertmanagerconfigs"
    ),
    ("monitoring.coreos.com/v1", "PodMonitor"): Resource("monitoring.coreos.com", "v1", "podmonitors"),
}
"""The kinds trainguard applies for a monitor and may read (not Secrets): watched as metadata alone, only
those labelled managed-by=trainguard, so the resync compares what it renders with what is there without
a GET (Kube.apply)."""
PODS_MATCHED_MAX = 20_000
"""ClusterCache.pods' answers kept at most (one per monitor's selector; cleared when full)."""
UNSERVED_RECHECK_S = 30.0
"""How long a kind found not served is taken as such before discovery is asked again (a CRD installed
after the monitor)."""

MONITORS_WAIT_S = 5.0
"""How long the receiver's read of a monitor's uid waits for the monitor cache's first list (NotSynced
after): Alertmanager is waiting for the answer, and a 503 makes it retry."""
MONITORS_QUIET_S = QUIET_S + 30.0
"""The apiserver sends a bookmark about every minute on a quiet watch, and the cache watches again after
QUIET_S of silence: a monitor cache that has heard nothing for longer cannot reach the API, and may still
hold a monitor deleted since (and its old uid)."""
LEASES_WAIT_S = 5.0
"""How long a read of the Leases waits for their cache's first list (NotSynced after)."""
LEASES_QUIET_S = 30.0
"""Every node's kubelet renews its Lease every 10 s: a Lease cache that has heard nothing for this long
while it holds Leases has lost its watch, and its Leases would all look expired."""


def applied_meta(obj: Obj) -> Obj:
    """What an owned object's cache keeps: its name, version and content hash (the annotation trainguard
    stamps it with), and the field managers other than trainguard's that have written it (a hand edit,
    another controller): with none, the object is as trainguard last applied it."""
    meta = obj.get("metadata") or {}
    digest = (meta.get("annotations") or {}).get(HASH_ANNOTATION)
    others = sorted({
        str(f.get("manager") or "") for f in meta.get("managedFields") or []
        if f.get("manager") != FIELD_MANAGER and not f.get("subresource")
    })  # fmt: skip
    kept = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
    kept["annotations"] = {HASH_ANNOTATION: digest} if digest else {}
    return {"metadata": kept, "otherManagers": others}


def _slim_job(job: Obj) -> Obj:
    """A Job's identity and status; its pod template (the bulk) is not read from the cache."""
    kept = slim(job)
    spec = {k: v for k, v in (job.get("spec") or {}).items() if k != "template"}
    return {**kept, "spec": spec}


@dataclass
class ClusterCache:
    api: client.ApiClient
    read_timeout_s: float = 30.0
    """How long a read waits for a cache's first list before it fails (NotSynced)."""
    served: Callable[[Resource], bool] | None = None
    """Whether the cluster serves a kind (discovery, by default); tests pass their own."""
    clock: Callable[[], float] = time.monotonic
    monitors_informer: Informer = field(init=False)
    policies_informer: Informer = field(init=False)
    pods_informer: Informer = field(init=False)
    nodes_informer: Informer = field(init=False)
    leases_informer: Informer = field(init=False)
    jobs_informer: Informer = field(init=False)
    namespaces_informer: Informer = field(init=False)
    """Only the namespaces labelled trainguard.io/monitored=true (a label selector): one that loses the
    label leaves it."""
    _optional: dict[Resource, Informer] = field(init=False, default_factory=dict)
    """The caches of the kinds only some clusters serve, made on their first read."""
    _unserved: dict[Resource, float] = field(init=False, default_factory=dict)
    _started: bool = field(init=False, default=False)
    _guard: threading.Lock = field(init=False, default_factory=threading.Lock)
    _pods_matched: dict[tuple[str, Any], tuple[tuple[int, int], list[Obj]]] = field(
        init=False, default_factory=dict
    )
    """ClusterCache.pods' answers, by namespace and selector, with the namespace's version they were read at."""
    _pods_guard: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.monitors_informer = Informer(self.api, MONITORS)
        self.policies_informer = Informer(self.api, POLICIES)
        self.pods_informer = Informer(self.api, PODS, transform=slim_pod)
        self.nodes_informer = Informer(self.api, NODES, transform=slim_node)
        self.leases_informer = Informer(self.api, NODE_LEASES)
        self.jobs_informer = Informer(self.api, JOBS, transform=_slim_job)
        self.namespaces_informer = Informer(
            self.api, NAMESPACES, label_selector=f"{MONITORED}={MONITORED_VALUE}"
        )

    @property
    def informers(self) -> dict[str, Informer]:
        with self._guard:
            optional = {str(r): i for r, i in self._optional.items()}
        return {
            "monitors": self.monitors_informer,
            "policies": self.policies_informer,
            "pods": self.pods_informer,
            "nodes": self.nodes_informer,
            "leases": self.leases_informer,
            "jobs": self.jobs_informer,
            "namespaces": self.namespaces_informer,
            **optional,
        }

    def start(self) -> ClusterCache:
        self._started = True
        for informer in self.informers.values():
            informer.start()
        # the owned objects' caches too, where served: a standby that comes to lead (kopf then resumes every
        # monitor) compares with them at once instead of reading each object by name
        for resource in OWNED.values():
            try:
                self._cache_of(resource)
            except Exception as exc:  # discovery failed: made on the first apply instead
                log.warning("the cache of %s is not started yet: %s", resource, exc)
        return self

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()

    def counts(self) -> dict[str, Counts]:
        return {name: informer.counts for name, informer in self.informers.items()}

    # ---- monitors and policies ----

    def monitors(self, timeout: float | None = None) -> list[Obj]:
        """Every monitor; the metrics' scrape passes a short timeout (it must answer)."""
        return self.monitors_informer.items(timeout=timeout or self.read_timeout_s)

    def monitors_in(self, namespace: str, timeout: float | None = None) -> list[Obj]:
        """The namespace's monitors; admission passes a short timeout (it has 5 seconds in all), or 0
        on the event loop (NotSynced at once rather than a wait)."""
        return self.monitors_informer.items(
            namespace, timeout=self.read_timeout_s if timeout is None else timeout
        )

    def monitor(self, namespace: str, name: str) -> Obj | None:
        return self.monitors_informer.get(namespace, name, timeout=self.read_timeout_s)

    def monitor_uid(self, namespace: str, name: str) -> str | None:
        """The metadata.uid of the monitor the cache holds now, None when it holds no such monitor: the
        receiver checks a token against the monitor as it is now, so that a monitor deleted and created
        again under its name refuses the old one's tokens. NotSynced when the cache has not listed within
        MONITORS_WAIT_S; Stale when it has heard nothing from the API for MONITORS_QUIET_S (it cannot say
        whether the monitor it holds is still the one that exists)."""
        informer = self.monitors_informer
        found = informer.get(namespace, name, timeout=min(self.read_timeout_s, MONITORS_WAIT_S))
        quiet = informer.heard_s()
        if quiet > MONITORS_QUIET_S:
            raise Stale(f"the monitor cache has heard nothing from the API for {quiet:.0f}s")
        uid = ((found or {}).get("metadata") or {}).get("uid")
        return str(uid) if uid else None

    def policy(self, namespace: str, name: str) -> Obj | None:
        return self.policies_informer.get(namespace, name, timeout=self.read_timeout_s)

    # ---- pods and Jobs ----

    def pods(self, namespace: str, selector: LabelSelector) -> list[Obj]:
        """The namespace's pods that `selector` matches (an empty selector matches none). Kept until the
        namespace's pods change: the P0 detection asks for every monitor's pods each second, and matching
        every pod of the namespace against each monitor's selector each time was a third of that pass at
        2,000 monitors."""
        if selector.is_empty():
            return []
        informer = self.pods_informer
        version, key = informer.version(namespace), (namespace, selector.key())
        with self._pods_guard:
            kept = self._pods_matched.get(key)
        if kept is not None and kept[0] == version:
            return list(kept[1])
        # the version is read before the pods: a change in between leaves a stale version, not stale pods
        found = [
            p
            for p in informer.items(namespace, timeout=self.read_timeout_s)
            if selector.matches(labels_of(p))
        ]
        with self._pods_guard:
            if len(self._pods_matched) >= PODS_MATCHED_MAX:  # selectors of monitors long gone, or edited
                self._pods_matched.clear()
            self._pods_matched[key] = (version, found)
        return list(found)

    def pod(self, namespace: str, name: str) -> Obj | None:
        return self.pods_informer.get(namespace, name, timeout=self.read_timeout_s)

    def job(self, namespace: str, name: str) -> Obj | None:
        return self.jobs_informer.get(namespace, name, timeout=self.read_timeout_s)

    # ---- namespaces ----

    def labelled_namespaces(self, timeout: float | None = None) -> set[str]:
        """The namespaces labelled trainguard.io/monitored=true now; a reconcile passes a short timeout
        (it labels the namespace anyway when the cache has not listed: the patch is idempotent)."""
        items = self.namespaces_informer.items(timeout=timeout or self.read_timeout_s)
        return {str((n.get("metadata") or {}).get("name")) for n in items}

    # ---- nodes ----

    def nodes(self) -> list[Obj]:
        return self.nodes_informer.items(timeout=self.read_timeout_s)

    def node_leases(self) -> list[Obj]:
        """The node Leases; Stale (and a new watch) when the cache has been quiet for LEASES_QUIET_S while
        Leases exist: the node-down detection must not take a silent connection for silent kubelets."""
        informer = self.leases_informer
        # a short wait: without Leases the pass still reads the Ready conditions, and must not stall
        leases = informer.items(timeout=min(self.read_timeout_s, LEASES_WAIT_S))
        quiet = informer.heard_s()
        if leases and quiet > LEASES_QUIET_S:
            informer.reconnect()
            raise Stale(
                f"the node Lease cache has heard nothing from the API for {quiet:.0f}s; watching again"
            )
        return leases

    def node_hearing(self) -> Hearing:
        """How the node and Lease caches hear the API now, for the node-down detection: whether both have
        listed, how long the Lease cache has been quiet, and a count of their lists, errors and dropped
        watches, which grows at every break in what they heard (an apiserver outage, a relist)."""
        nodes, leases = self.nodes_informer, self.leases_informer
        breaks = sum(i.counts.lists + i.counts.errors + i.counts.quiet for i in (nodes, leases))
        return Hearing(
            synced=nodes.synced and leases.synced,
            leases=leases.size(),
            leases_heard_s=leases.heard_s(),
            breaks=breaks,
        )

    # ---- the objects trainguard applies ----

    def applied(self, obj: Obj) -> Obj | None:
        """What the cache of an owned kind holds of `obj` (applied_meta), None when there is no such object.
        NotSynced when no cache can say (a kind not cached, a cache not listed yet, a kind not served):
        the caller reads the object from the API. Never waits: the first read starts the cache."""
        resource = OWNED.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
        try:
            informer = self._cache_of(resource) if resource is not None else None
        except Exception as exc:  # discovery failed: the apply reads by name, and says why it fails
            raise NotSynced(f"no cache of {obj.get('kind')}: {exc}") from exc
        if informer is None:
            raise NotSynced(f"no cache of {obj.get('kind')} ({obj.get('apiVersion')})")
        meta = obj.get("metadata") or {}
        return informer.get(meta.get("namespace"), str(meta.get("name")), timeout=0.0)

    # ---- a monitor's workload owner ----

    def jobs(self, namespace: str) -> list[Obj]:
        return self.jobs_informer.items(namespace, timeout=self.read_timeout_s)

    def workload(self, namespace: str, ref: WorkloadRef, selector: LabelSelector) -> Workload:
        """The monitor's workload owner resolved (kube/workloads.py) from the caches: the owner, a
        TrainJob's JobSet, the namespace's Jobs, the selector's pods and, for an owner Kueue queues, its
        Workload. A kind the cluster does not serve, or an owner that does not exist, is the result's
        `problem`, not an error."""
        return resolve(self.owner_read(namespace, ref, selector))

    def owner_read(self, namespace: str, ref: WorkloadRef, selector: LabelSelector) -> OwnerRead:
        api_version = ref.resolved_api_version()
        group, _, version = api_version.rpartition("/")
        resource = Resource(group, version, OWNER_PLURALS[ref.kind])
        base = OwnerRead(ref.kind, ref.name, namespace, api_version)
        informer = self.jobs_informer if resource == JOBS else self._cache_of(resource)
        if informer is None:
            return OwnerRead(ref.kind, ref.name, namespace, api_version, served=False)
        owner = informer.get(namespace, ref.name, timeout=self.read_timeout_s)
        if owner is None:
            return base
        jobset, jobset_served = (owner if ref.kind == "JobSet" else None), True
        if ref.kind == "TrainJob":
            jobsets = self._cache_of(JOBSETS)
            jobset_served = jobsets is not None
            jobset = jobsets.get(namespace, ref.name, timeout=self.read_timeout_s) if jobsets else None
        return OwnerRead(
            ref.kind, ref.name, namespace, api_version,
            owner=owner, jobset=jobset, jobset_served=jobset_served,
            jobs=tuple(self.jobs(namespace)) if ref.kind in ("JobSet", "TrainJob") else (),
            pods=tuple(self.pods(namespace, selector)),
            workloads=tuple(self._kueue_workloads(namespace, owner)),
        )  # fmt: skip

    def _kueue_workloads(self, namespace: str, owner: Obj) -> list[Obj]:
        """The Kueue Workloads of an owner Kueue queues (it carries kueue.x-k8s.io/queue-name); none for
        another, so a cluster without Kueue is never asked."""
        if KUEUE_QUEUE not in labels_of(owner):
            return []
        uid = str((owner.get("metadata") or {}).get("uid") or "")
        for resource in KUEUE_WORKLOADS:
            informer = self._cache_of(resource)
            if informer is not None:
                items = informer.items(namespace, timeout=self.read_timeout_s)
                return [w for w in items if uid and labels_of(w).get(KUEUE_JOB_UID) == uid]
        return []

    def _cache_of(self, resource: Resource) -> Informer | None:
        """The cache of a kind only some clusters serve, made (and started, with the others) on its first
        read; None while discovery says the cluster does not serve it."""
        with self._guard:
            found = self._optional.get(resource)
            if found is not None:
                return found
            checked = self._unserved.get(resource)
            if checked is not None and self.clock() - checked < UNSERVED_RECHECK_S:
                return None
        if not (self.served or self._discovered)(resource):
            with self._guard:
                self._unserved[resource] = self.clock()
            return None
        with self._guard:
            informer = self._optional.get(resource)
            if informer is None:
                informer = self._optional[resource] = self._informer(resource)
                self._unserved.pop(resource, None)
                if self._started:
                    informer.start()
            return informer

    def _informer(self, resource: Resource) -> Informer:
        if resource in OWNED.values():
            return Informer(self.api, resource, transform=applied_meta, metadata_only=True,
                            label_selector=f"{MANAGED_BY}={MANAGED_BY_VALUE}")  # fmt: skip
        return Informer(self.api, resource)

    def _discovered(self, resource: Resource) -> bool:
        """Whether the API's discovery of the group and version lists the plural (a 404: not served)."""
        path = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
        method, url, headers, body, _ = self.api.param_serialize(
            "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
        )
        response = self.api.call_api(method, url, header_params=headers, body=body, _request_timeout=10.0)
        if response.status == 404:
            return False
        if not 200 <= response.status < 300:
            raise ApiError(status=response.status, reason=f"discovery of {path}")
        names = {r.get("name") for r in json.loads(response.read()).get("resources") or []}
        return resource.plural in names
