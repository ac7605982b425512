"""A JobSet that Kueue v0.17.0 admits, on the real JobSet controller v0.11.1 and Kueue together
(e2e/controlplane/controllers.py; Kueue's JobSet integration on): trainguard restarts it only through
its owner and within what Kueue admitted. A node fault replaces only the faulty node's pod through the
JobSet, onto the warm spare, while Kueue's Workload stays admitted as it was (not evicted, not
requeued) and the ClusterQueue's usage stays the admitted gang's; a Workload Kueue deactivates or
preempts while the fault is handled leaves the node isolated and nothing restarted; and with Kueue's topology-aware
scheduling, trainguard's cordon, taint and pod removal are Kueue's signal to replace the node: Kueue
assigns the recreated pod another node of the topology.

What these tests found Kueue doing, and what they do not cover, is in docs/p0-response.md ("Kueue").
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.audit import Audit
from e2e.cluster import Cluster
from e2e.controlplane.controllers import Controller
from e2e.nodes import NODES
from e2e.podprocesses import bound_token
from e2e.receiver import alert_payload, monitor_token, post, records
from e2e.sidecars import sidecar_that_saw
from e2e.test_workload_owners import (
    JOB,
    JOBSET_API,
    SELECTOR,
    child_jobs,
    degraded,
    gang,
    jobset_status,
    monitor_on,
    training_jobset,
)
from tests.processes import wait_for
from trainguard.api.monitor import WorkloadRef
from trainguard.catalog.events import EVENTS_AUDIENCE
from trainguard.catalog.kubernetes import FAULTY_TAINT
from trainguard.kube import ClusterCache
from trainguard.kube.workloads import KUEUE_QUEUE
from trainguard.remediation import tokens

pytestmark = pytest.mark.e2e

KUEUE_API = "kueue.x-k8s.io/v1beta2"
KUEUE_WORKLOADS = ("kueue.x-k8s.io", "v1beta2", "workloads")
GPU = "nvidia.com/gpu"
GANG_GPUS = 16
"""training_jobset's gang: 2 pods of 8 GPUs."""
QUOTA_GPUS = GANG_GPUS + 8
"""The ClusterQueue's quota: the gang and one spare node's worth."""
LOCAL_QUEUE = "training"
BLOCK = "e2e.trainguard.io/block"
"""The fake nodes' topology label above the hostname, for Kueue's topology-aware scheduling."""
FAKE_NODE = "trainguard.io/fake-node"
TERMINATED_BY_KUEUE = "TerminatedByKueue"
"""The condition Kueue's TAS node controller sets on a pod it fails because the node its topology
assignment names is tainted (kueue v0.17.0 pkg/controller/tas/node_controller.go, markPodsFailed)."""
IGNORE_TERMINATED_BY_KUEUE = {
    "action": "Ignore",
    "onPodConditions": [{"type": TERMINATED_BY_KUEUE, "status": "True"}],
}


def queue_objects(ns: str, topology: bool = False) -> list[dict[str, Any]]:
    """A ResourceFlavor, a WorkloadPriorityClass `urgent-<ns>`, a ClusterQueue for `ns` only with
    QUOTA_GPUS GPUs (a Workload of higher priority preempts a lower one), and LOCAL_QUEUE in `ns`;
    with `topology`, a Topology first (BLOCK, then the hostname) that the flavor names: the flavor is
    topology-aware."""
    flavor, cq = f"gpu-{ns}", f"cq-{ns}"
    objs: list[dict[str, Any]] = [
        {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": flavor}, "spec": {}},
        {"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass", "metadata": {"name": f"urgent-{ns}"},
         "value": 1000},
        {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{"coveredResources": [GPU], "flavors": [
                {"name": flavor, "resources": [{"name": GPU, "nominalQuota": QUOTA_GPUS}]}]}]}},
        {"apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": {"name": LOCAL_QUEUE, "namespace": ns},
         "spec": {"clusterQueue": cq}},
    ]  # fmt: skip
    if topology:
        objs[0]["spec"] = {"nodeLabels": {FAKE_NODE: "true"}, "topologyName": f"topo-{ns}"}
        objs.insert(0, {"apiVersion": KUEUE_API, "kind": "Topology", "metadata": {"name": f"topo-{ns}"},
                        "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": "kubernetes.io/hostname"}]}})  # fmt: skip
    return objs


PLURALS = {"Topology": "topologies", "ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues",
           "LocalQueue": "localqueues", "WorkloadPriorityClass": "workloadpriorityclasses"}  # fmt: skip


def true(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    """The condition `kind` of `obj` while it is True."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind and c["status"] == "True":
            return dict(c)
    return None


@contextlib.contextmanager
def kueue_queue(cluster: Cluster, ns: str, topology: bool = False) -> Iterator[str]:
    """`ns`, with a LocalQueue of a ClusterQueue of its own (queue_objects). After the test its JobSets
    are deleted and their pods waited out (a running JobSet would recreate them, holding the fake GPUs
    the next test needs), then the Kueue objects, which are cluster-scoped and held by Kueue's
    finalizers while a Workload uses them."""
    objs = queue_objects(ns, topology)
    cluster.apply(objs)
    cq = f"cq-{ns}"
    wait_for("the ClusterQueue Active", lambda: true(kueue_get(cluster, "clusterqueues", cq), "Active"))
    try:
        yield ns
    finally:
        cluster.delete_owners(ns, *JOBSET_API, "jobset.sigs.k8s.io/jobset-name")
        # a Workload that reserves quota holds the ClusterQueue (Kueue's resource-in-use finalizer): the
        # JobSets' Workloads go with them (Foreground), before the queue objects are deleted
        wait_for(f"the JobSets and Workloads in {ns} gone", lambda: not cluster.custom.list_namespaced_custom_object(
            *JOBSET_API[:2], ns, JOBSET_API[2])["items"] and not workloads(cluster, ns), timeout=120)  # fmt: skip
        for obj in reversed(objs):
            plural, name = PLURALS[obj["kind"]], obj["metadata"]["name"]
            where = obj["metadata"].get("namespace", "")
            kueue_delete(cluster, plural, name, where)
            try:
                wait_for(f"the {obj['kind']} {name} gone", lambda p=plural, n=name, w=where: kueue_get(cluster, p, n, w)
                         is None, timeout=120)  # fmt: skip
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{held(cluster, plural, name, where)}") from None


def held(cluster: Cluster, plural: str, name: str, ns: str) -> str:
    """What holds a Kueue object that does not go: its finalizers and status, and every Workload left
    in the cluster with its queue, conditions and finalizers."""
    obj = kueue_get(cluster, plural, name, ns) or {}
    lines = [f"{plural}/{name}: finalizers {obj.get('metadata', {}).get('finalizers')}, "
             f"status {json.dumps(obj.get('status') or {}, sort_keys=True)}"]  # fmt: skip
    for w in cluster.custom.list_cluster_custom_object(*KUEUE_WORKLOADS)["items"]:
        meta, status = w["metadata"], w.get("status") or {}
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        lines.append(f"Workload {meta['namespace']}/{meta['name']}: queue {w['spec'].get('queueName')}, "
                     f"conditions {conditions}, finalizers {meta.get('finalizers')}, "
                     f"deleting {bool(meta.get('deletionTimestamp'))}")  # fmt: skip
    return "\n".join(lines)


@pytest.fixture
def queued(
    cluster: Cluster, jobset_controller: Controller, kueue_controller: Controller, ns: str
) -> Iterator[str]:
    """The namespace, with a LocalQueue of a ClusterQueue of its own (kueue_queue)."""
    with kueue_queue(cluster, ns) as queue:
        yield queue


@pytest.fixture
def topology_queued(
    cluster: Cluster, jobset_controller: Controller, kueue_controller: Controller, ns: str
) -> Iterator[str]:
    """As `queued`, its flavor topology-aware: the fake nodes labelled as one BLOCK while it lasts."""
    for name in NODES:
        cluster.core.patch_node(name, {"metadata": {"labels": {BLOCK: "b1"}}})
    try:
        with kueue_queue(cluster, ns, topology=True) as queue:
            yield queue
    finally:
        for name in NODES:
            cluster.core.patch_node(name, {"metadata": {"labels": {BLOCK: None}}})


def kueue_get(cluster: Cluster, plural: str, name: str, ns: str = "") -> dict[str, Any] | None:
    try:
        if ns:
            return dict(
                cluster.custom.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", ns, plural, name)
            )
        return dict(cluster.custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", plural, name))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def kueue_delete(cluster: Cluster, plural: str, name: str, ns: str = "") -> None:
    try:
        if ns:
            cluster.custom.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", ns, plural, name)
        else:
            cluster.custom.delete_cluster_custom_object("kueue.x-k8s.io", "v1beta2", plural, name)
    except ApiException as exc:
        if exc.status != 404:
            raise


def queued_jobset() -> dict[str, Any]:
    """training_jobset (maxRestarts 2, 2 ranks of 8 GPUs, one per child Job) queued in LOCAL_QUEUE."""
    js = training_jobset(max_restarts=2)
    js["metadata"]["labels"] = {KUEUE_QUEUE: LOCAL_QUEUE}
    return js


NODE_FAULT_STEPS = ["ConfirmFault", "Cordon", "Taint", "RequestCheckpoint", "ReplacePod", "RestartInPlace",
                    "ConfirmPlacement"]  # fmt: skip
"""A JobSet's confirmed node fault (plan.py): the healthy ranks restart in place where they run
`trainguard launch` (here they do not: the step leaves them be)."""
URGENT = "urgent"


def urgent_job(ns: str) -> dict[str, Any]:
    """A Job of 2 pods of 8 GPUs queued at WorkloadPriorityClass urgent-<ns>: with the gang admitted it
    does not fit the ClusterQueue, so Kueue preempts the gang's Workload for it."""
    pod = {"restartPolicy": "Never", "containers": [
        {"name": "c", "image": "registry.invalid/urgent:1", "resources": {"limits": {GPU: "8"}}}]}  # fmt: skip
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": URGENT, "labels": {KUEUE_QUEUE: LOCAL_QUEUE, "kueue.x-k8s.io/priority-class": f"urgent-{ns}"}},
            "spec": {"suspend": True, "parallelism": 2, "completions": 2, "backoffLimit": 0, "template": {"spec": pod}}}  # fmt: skip


def workloads(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    return list(
        cluster.custom.list_namespaced_custom_object(*KUEUE_WORKLOADS[:2], ns, KUEUE_WORKLOADS[2])["items"]
    )


def admitted(cluster: Cluster, ns: str) -> dict[str, Any]:
    """The JobSet's one Kueue Workload, once Kueue has admitted it."""
    return wait_for("Kueue admitting the JobSet", lambda: (w := workloads(cluster, ns)) and len(w) == 1
                    and true(w[0], "Admitted") and w[0], timeout=60)  # fmt: skip


def usage(cluster: Cluster, ns: str) -> tuple[int, int, int]:
    """The ClusterQueue's GPUs in use (status.flavorsUsage, all flavors), its admitted and its pending
    Workloads."""
    status = (kueue_get(cluster, "clusterqueues", f"cq-{ns}") or {}).get("status") or {}
    gpus = sum(int(r.get("total", 0)) for f in status.get("flavorsUsage") or []
               for r in f.get("resources") or [] if r["name"] == GPU)  # fmt: skip
    return gpus, int(status.get("admittedWorkloads") or 0), int(status.get("pendingWorkloads") or 0)


def assigned_nodes(workload: dict[str, Any]) -> set[str]:
    """The nodes Kueue's topology assignment names for the Workload's pod set (the hostname level)."""
    (podset,) = workload["status"]["admission"]["podSetAssignments"]
    nodes = set()
    for piece in podset["topologyAssignment"]["slices"]:
        values = piece["valuesPerLevel"][-1]
        if "individual" in values:
            prefix = values["individual"].get("prefix", "")
            nodes |= {
                prefix + r + values["individual"].get("suffix", "") for r in values["individual"]["roots"]
            }
        else:
            nodes.add(values["universal"])
    return nodes


def owner_read(cluster: Cluster, ns: str) -> Any:
    """The operator's own reading of the JobSet and its Workload (kube/workloads.py), from real caches."""
    cache = ClusterCache(cluster.api).start()
    try:
        ref = WorkloadRef(kind="JobSet", name=JOB)
        return wait_for("the owner and its Workload read", lambda: (r := cache.workload(ns, ref, SELECTOR)).admission
                        and r, timeout=30)  # fmt: skip
    finally:
        cache.stop()


@contextlib.contextmanager
def post_fast_path_fault(operator: Cluster, ns: str, faulty: client.V1Pod) -> Iterator[None]:
    """A fatal XID on the faulty pod's node, posted by its sidecar's fast path (its pod-bound token),
    while that sidecar, which saw it, serves (to confirm it)."""
    node = faulty.spec.node_name
    event = {"source": "sidecar", "labels": alert_payload(ns, node)["alerts"][0]["labels"],
             "annotations": {}, "fingerprint": "x", "startsAt": time.time()}  # fmt: skip
    sender = operator.api.sanitize_for_serialization(faulty)
    with sidecar_that_saw(faulty, monitor_token(operator, tokens.EVENTS, ns, JOB)):
        status, answer = post(
            operator, "/v1/events", event, bound_token(operator.core, sender, EVENTS_AUDIENCE)
        )
        assert status == 200, answer
        yield


def scene(cluster: Cluster, ns: str) -> str:
    """The pods, Jobs, Workloads and Events of `ns`, for a failure's message."""
    pods = [(p.metadata.name, p.spec.node_name, p.status.phase, p.metadata.deletion_timestamp is not None,
             [g.name for g in p.spec.scheduling_gates or []], p.spec.node_selector,
             [(c.type, c.status, c.reason) for c in p.status.conditions or []])
            for p in cluster.core.list_namespaced_pod(ns).items]  # fmt: skip
    jobs = [(j.metadata.name, j.spec.suspend, j.status.active, j.status.failed, [(c.type, c.reason) for c in j.status.conditions or []])
            for j in client.BatchV1Api(cluster.api).list_namespaced_job(ns).items]  # fmt: skip
    events = [(e.involved_object.kind, e.involved_object.name, e.reason, e.message)
              for e in cluster.core.list_namespaced_event(ns).items]  # fmt: skip
    return json.dumps({"pods": pods, "jobs": jobs, "workloads": [w.get("status") for w in workloads(cluster, ns)],
                       "events": events}, indent=1, default=str)  # fmt: skip


def finished(operator: Cluster, ns: str) -> dict[str, Any]:
    """The monitor's newest record once it has finished (all of them in the failure, if it does not)."""
    try:
        done: dict[str, Any] = wait_for("the remediation finished", lambda: (r := records(operator, ns)) and
                                        r[0]["phase"] in ("Succeeded", "Failed", "Skipped") and r[0], timeout=120)  # fmt: skip
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}; the records: {json.dumps(records(operator, ns), indent=1)}\n{scene(operator, ns)}"
        ) from None
    return done


class TestKueueJobSet:
    """On one JobSet controller and one Kueue (JobSet integration on), both for this class."""

    def test_a_node_fault_replaces_the_pod_onto_the_spare_within_what_kueue_admitted(
        self, operator: Cluster, queued: str, clean_nodes: None, spare: str
    ) -> None:
        ns = queued
        monitor_on(operator, ns, {"kind": "JobSet", "name": JOB})
        operator.custom.create_namespaced_custom_object(*JOBSET_API[:2], ns, JOBSET_API[2], queued_jobset())
        before = admitted(operator, ns)
        faulty, healthy = gang(operator, ns)
        assert spare not in {faulty.spec.node_name, healthy.spec.node_name}, (
            "ordinary placement stays off the spare"
        )
        node = faulty.spec.node_name
        assert (
            before["metadata"]["labels"]["kueue.x-k8s.io/job-uid"]
            == (operator.get(JOBSET_API[0] + "/" + JOBSET_API[1], "JobSet", ns, JOB) or {})["metadata"]["uid"]
        )
        wait_for("the owner resolved", lambda: degraded(operator, ns).get("status") == "False", timeout=30)
        wait_for("the ClusterQueue counting the gang", lambda: usage(operator, ns) == (GANG_GPUS, 1, 0))

        w = owner_read(operator, ns)
        assert (w.problem, w.refusal, w.budget_left) == ("", "", 2)
        assert (w.admission.name, w.admission.admitted, w.admission.evicted, w.admission.active) == (
            before["metadata"]["name"],
            True,
            "",
            True,
        )

        jobs_before = child_jobs(operator, ns)
        audit = Audit(operator.audit_log)
        t0 = time.monotonic()
        with post_fast_path_fault(operator, ns, faulty):
            done = finished(operator, ns)
        elapsed = time.monotonic() - t0
        assert done["phase"] == "Succeeded", json.dumps(done, indent=1)
        assert [s["kind"] for s in done["steps"]] == NODE_FAULT_STEPS
        assert spare in done["steps"][-1]["detail"], done["steps"][-1]

        now = gang(operator, ns, attempt=0)
        assert healthy.metadata.uid in {p.metadata.uid for p in now}, "the healthy rank's pod untouched"
        new = next(p for p in now if p.metadata.uid != healthy.metadata.uid)
        assert new.spec.node_name == spare != node, "the replacement landed on the warm spare"
        isolated = operator.core.read_node(node)
        assert isolated.spec.unschedulable is True
        assert FAULTY_TAINT in {t.key for t in isolated.spec.taints or []}
        jobs_after = child_jobs(operator, ns)
        changed = {n for n in jobs_before if jobs_after.get(n) != jobs_before[n]}
        assert len(changed) == 1 and len(jobs_after) == 2, (jobs_before, jobs_after)
        assert not audit.pod_deletions(ns) or set(audit.pod_deletions(ns)) == {faulty.metadata.name}
        status = jobset_status(operator, ns)
        assert (status.get("restarts", 0), status.get("restartsCountTowardsMax", 0)) == (0, 0)

        # Kueue: the same Workload, admitted since before the fault, never evicted nor requeued
        (after,) = workloads(operator, ns)
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert true(after, "Admitted")["lastTransitionTime"] == true(before, "Admitted")["lastTransitionTime"]
        assert not true(after, "Evicted") and not true(after, "Preempted"), after["status"]["conditions"]
        assert "requeueState" not in after["status"], after["status"]
        assert (operator.get("jobset.x-k8s.io/v1alpha2", "JobSet", ns, JOB) or {})["spec"].get(
            "suspend"
        ) is False
        assert usage(operator, ns) == (GANG_GPUS, 1, 0) and GANG_GPUS <= QUOTA_GPUS
        print(
            f"\nfault posted -> the faulty rank's pod replaced onto the spare through the JobSet in {elapsed:.1f}s"
        )

    @pytest.mark.parametrize("how", ["deactivated", "preempted"])
    def test_a_workload_kueue_evicts_during_the_checkpoint_is_isolated_but_not_restarted(
        self, operator: Cluster, queued: str, clean_nodes: None, how: str
    ) -> None:
        """Kueue evicts the Workload while the fault's emergency checkpoint is being saved: deactivated
        (spec.active: false), or preempted by a Job of a higher WorkloadPriorityClass that needs its
        quota. The node stays cordoned and tainted, and the pod replacement is refused naming Kueue;
        trainguard deletes nothing (Kueue's own suspension of the JobSet takes the pods)."""
        ns = queued
        # the checkpoint step waits for the healthy rank's save, which the test reports once Kueue has
        # evicted the Workload; the timeout is only a backstop
        monitor_on(operator, ns, {"kind": "JobSet", "name": JOB}, emergencyCheckpointTimeout="90s")
        operator.custom.create_namespaced_custom_object(*JOBSET_API[:2], ns, JOBSET_API[2], queued_jobset())
        workload = admitted(operator, ns)
        name = workload["metadata"]["name"]
        faulty, healthy = gang(operator, ns)
        node = faulty.spec.node_name
        wait_for("the owner resolved", lambda: degraded(operator, ns).get("status") == "False", timeout=30)
        jobs_before = child_jobs(operator, ns)
        audit = Audit(operator.audit_log)
        token = monitor_token(operator, tokens.EVENTS, ns, JOB)
        batch = client.BatchV1Api(operator.api)
        try:
            with contextlib.ExitStack() as stack:
                rank = stack.enter_context(sidecar_that_saw(healthy, token, cleared=True))
                stack.enter_context(post_fast_path_fault(operator, ns, faulty))
                wait_for("the checkpoint asked of the healthy rank", lambda: (r := records(operator, ns)) and any(
                    s["kind"] == "RequestCheckpoint" and s["phase"] == "InProgress" for s in r[0]["steps"]), timeout=60)  # fmt: skip
                if how == "deactivated":
                    operator.custom.patch_namespaced_custom_object(*KUEUE_WORKLOADS[:2], ns, KUEUE_WORKLOADS[2],
                                                                   name, {"spec": {"active": False}})  # fmt: skip
                else:
                    batch.create_namespaced_job(ns, urgent_job(ns))
                evicted = wait_for("Kueue evicting the Workload", lambda: (w := [x for x in workloads(operator, ns)
                                   if x["metadata"]["name"] == name]) and true(w[0], "Evicted") and w[0], timeout=30)  # fmt: skip
                reason = true(evicted, "Evicted")["reason"]
                assert reason == ("Deactivated" if how == "deactivated" else "Preempted"), evicted["status"]
                wait_for("Kueue's suspension of the JobSet taking its pods", lambda: not [
                    p for p in operator.core.list_namespaced_pod(ns, label_selector=f"jobset.sigs.k8s.io/jobset-name={JOB}").items
                    if p.metadata.deletion_timestamp is None], timeout=30)  # fmt: skip
                rank.training.ingest({"type": "checkpoint", "kind": "full", "step": 100, "path": "/ckpt/100"})
                done = finished(operator, ns)
            phases = [(s["kind"], s["phase"]) for s in done["steps"]]
            assert phases[:5] == [("ConfirmFault", "Succeeded"), ("Cordon", "Succeeded"), ("Taint", "Succeeded"),
                                  ("RequestCheckpoint", "Succeeded"), ("ReplacePod", "Failed")], json.dumps(done, indent=1)  # fmt: skip
            replace = done["steps"][4]
            refusal = (
                f"Kueue's Workload {name} is deactivated (spec.active: false)"
                if how == "deactivated"
                else f"Kueue evicted the workload (Workload {name}, Preempted): it is requeued"
            )
            assert replace["detail"] == f"{refusal}; nothing is restarted", replace
            assert not (replace.get("progress") or {}).get("uids"), (
                "no pod or child Job was named for removal"
            )
            isolated = operator.core.read_node(node)
            assert isolated.spec.unschedulable is True
            assert FAULTY_TAINT in {t.key for t in isolated.spec.taints or []}
            assert not audit.pod_deletions(ns), "trainguard deleted no pod"
            assert child_jobs(operator, ns) == jobs_before, (
                "the child Jobs are Kueue's suspended ones, none deleted"
            )
            js = operator.get("jobset.x-k8s.io/v1alpha2", "JobSet", ns, JOB) or {}
            assert js["spec"].get("suspend") is True and (js.get("status") or {}).get("restarts", 0) == 0
            # the quota went back to Kueue: free, or the preempting Job's
            wait_for("the ClusterQueue's usage", lambda: usage(operator, ns)[:2] == ((0, 0) if how == "deactivated"
                     else (GANG_GPUS, 1)), timeout=30)  # fmt: skip
        finally:
            # the preempting Job's Workload holds the ClusterQueue, which the fixture deletes; the JobSet
            # goes first, or Kueue admits its Workload again into the quota the urgent Job frees
            operator.delete_owners(ns, *JOBSET_API, "jobset.sigs.k8s.io/jobset-name")
            with contextlib.suppress(ApiException):
                batch.delete_namespaced_job(URGENT, ns, propagation_policy="Foreground")
            wait_for("the urgent Job's Workload gone", lambda: not [
                w for w in workloads(operator, ns) if w["metadata"]["name"].startswith(f"job-{URGENT}-")], timeout=60)  # fmt: skip

    def test_kueue_topology_aware_scheduling_places_the_replacement_away_from_the_faulty_node(
        self, operator: Cluster, topology_queued: str, clean_nodes: None
    ) -> None:
        """A JobSet that requires one BLOCK of Kueue's Topology: Kueue assigns each pod a node (the
        pods wait behind its scheduling gate until it does). trainguard's cordon, untolerated taint and
        the faulty pod's removal make Kueue's TAS node controller put the node in the Workload's
        status.unhealthyNodes and its scheduler assign the replacement another node of the block,
        where the JobSet's recreated pod runs; the Workload stays admitted and the JobSet's restarts
        unchanged. A pod ungated before that reassignment goes to the old node, which Kueue then fails
        with condition TerminatedByKueue: the template Ignores that too, so the Job recreates the pod
        (after its back-off) instead of failing and restarting the whole JobSet."""
        ns = topology_queued
        monitor_on(operator, ns, {"kind": "JobSet", "name": JOB})
        js = queued_jobset()
        job = js["spec"]["replicatedJobs"][0]["template"]["spec"]
        job["template"]["metadata"]["annotations"] = {"kueue.x-k8s.io/podset-required-topology": BLOCK}
        job["podFailurePolicy"]["rules"].append(IGNORE_TERMINATED_BY_KUEUE)
        operator.custom.create_namespaced_custom_object(*JOBSET_API[:2], ns, JOBSET_API[2], js)
        before = admitted(operator, ns)
        assert assigned_nodes(before) == {p.spec.node_name for p in gang(operator, ns)}
        faulty, healthy = gang(operator, ns)
        node = faulty.spec.node_name
        (free,) = set(NODES) - assigned_nodes(before)
        wait_for("the owner resolved", lambda: degraded(operator, ns).get("status") == "False", timeout=30)

        t0 = time.monotonic()
        with post_fast_path_fault(operator, ns, faulty):
            done = finished(operator, ns)
        elapsed = time.monotonic() - t0
        assert done["phase"] == "Succeeded", json.dumps(done, indent=1)
        assert [s["kind"] for s in done["steps"]] == NODE_FAULT_STEPS

        now = gang(operator, ns, attempt=0)
        assert healthy.metadata.uid in {p.metadata.uid for p in now}, "the healthy rank's pod untouched"
        new = next(p for p in now if p.metadata.uid != healthy.metadata.uid)
        assert new.spec.node_name == free, f"Kueue placed the replacement on the block's free node, {free}"
        after = wait_for("Kueue's assignment without the faulty node", lambda: (w := workloads(operator, ns))
                         and assigned_nodes(w[0]) == {healthy.spec.node_name, free}
                         and not w[0]["status"].get("unhealthyNodes") and w[0], timeout=30)  # fmt: skip
        assert node not in assigned_nodes(after) and after["metadata"]["uid"] == before["metadata"]["uid"]
        assert true(after, "Admitted")["lastTransitionTime"] == true(before, "Admitted")["lastTransitionTime"]
        assert not true(after, "Evicted"), after["status"]["conditions"]
        status = jobset_status(operator, ns)
        assert (status.get("restarts", 0), status.get("restartsCountTowardsMax", 0)) == (0, 0)
        assert usage(operator, ns) == (GANG_GPUS, 1, 0)
        late = [p.metadata.name for p in operator.core.list_namespaced_pod(ns).items
                if any(c.type == TERMINATED_BY_KUEUE for c in p.status.conditions or [])]  # fmt: skip
        print(f"\nfault posted -> Kueue's TAS placed the replacement on {free} in {elapsed:.1f}s"
              f" (pods Kueue failed on the old assignment first: {late or 'none'})")  # fmt: skip
