"""Restarts through the workload's owner, on the local control plane: the edge's writes (an eviction,
a dead node's pod failed and force-deleted, a JobSet's child Job deleted) against the real apiserver, and
the JobSet case against the real JobSet controller v0.11.1 (e2e/controlplane/controllers.py): a monitor
on a JobSet finds its pods (the current restart attempt only) and the restarts it has left, a node fault
replaces only the faulty node's pod through the JobSet (its child Job deleted and recreated, the other
pod untouched, the JobSet's restarts unchanged), and a monitor on a missing JobSet, or on a kind the
cluster does not serve, is Degraded with the reason; and a monitor on a TrainJob of the real Trainer
v2.2.0 finds the JobSet and pods made of it, whose shipped runtime allows no restart (a notice)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.cluster import Cluster, load_all
from e2e.controlplane.controllers import Controller, manifests_dir
from e2e.monitors import MON, condition, quickstart, ready
from e2e.podprocesses import bound_token
from e2e.receiver import alert_payload, finished, monitor_token, post, records
from e2e.sidecars import sidecar_that_saw
from tests.processes import wait_for
from trainguard.api.common import LabelSelector
from trainguard.api.monitor import WorkloadRef
from trainguard.catalog.events import EVENTS_AUDIENCE
from trainguard.kube import ClusterCache, Kube
from trainguard.remediation import tokens
from trainguard.remediation.cluster import NODE_DOWN_REASON
from trainguard.remediation.cluster import Cluster as Edge
from trainguard.remediation.ops import Refused

pytestmark = pytest.mark.e2e

JOB = "llama-pretrain"
JOBSET_API = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
SELECTOR = LabelSelector.model_validate({"matchLabels": {"app": JOB}})
IGNORE_DISRUPTION = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}


@pytest.fixture
def edge(cluster: Cluster) -> Iterator[Edge]:
    cache = ClusterCache(cluster.api).start()
    try:
        yield Edge(Kube(cluster.api, timeout=10), cache)
    finally:
        cache.stop()


@pytest.fixture
def jobsets(cluster: Cluster, jobset_controller: Controller, ns: str) -> Iterator[str]:
    """The namespace, whose JobSets are deleted after the test and their pods waited out: the ns fixture
    deletes Jobs and pods, which a running JobSet would only recreate, holding the fake GPUs the next
    test's gang needs."""
    yield ns
    cluster.delete_owners(ns, *JOBSET_API, "jobset.sigs.k8s.io/jobset-name")


def training_jobset(max_restarts: int | None = 2, replicas: int = 2) -> dict[str, Any]:
    """A gang of `replicas` ranks, one pod of 8 GPUs per child Job, as the README asks the owner to
    allow: restartPolicy Never, a podFailurePolicy that Ignores DisruptionTarget, maxRestarts."""
    pod = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5, "containers": [
        {"name": "trainer", "image": "registry.invalid/llama:1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}  # fmt: skip
    job = {"parallelism": 1, "completions": 1, "backoffLimit": 0, "podFailurePolicy": {"rules": [IGNORE_DISRUPTION]},
           "template": {"metadata": {"labels": {"app": JOB}}, "spec": pod}}  # fmt: skip
    spec: dict[str, Any] = {
        "replicatedJobs": [{"name": "node", "replicas": replicas, "template": {"spec": job}}]
    }
    if max_restarts is not None:
        spec["failurePolicy"] = {"maxRestarts": max_restarts}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": JOB},
        "spec": spec,
    }


def monitor_on(cluster: Cluster, ns: str, ref: dict[str, Any], **remediation: Any) -> None:
    monitor, policy = quickstart(ns)
    monitor["spec"]["workloadRef"] = ref
    monitor["spec"]["remediation"] = {"emergencyCheckpointTimeout": "2s", **remediation}
    cluster.apply([monitor, policy])
    wait_for("monitor Ready", lambda: ready(cluster, ns), timeout=60)


def degraded(cluster: Cluster, ns: str) -> dict[str, Any]:
    return condition(cluster.get(*MON, ns, JOB), "Degraded") or {}


def resolved(cluster: Cluster, ns: str) -> dict[str, Any]:
    return condition(cluster.get(*MON, ns, JOB), "WorkloadResolved") or {}


def gang(cluster: Cluster, ns: str, attempt: int = 0, count: int = 2) -> list[client.V1Pod]:
    """The JobSet's `count` pods of restart attempt `attempt`, Running, once they are."""

    def running() -> list[client.V1Pod] | None:
        pods = cluster.core.list_namespaced_pod(
            ns,
            label_selector=f"jobset.sigs.k8s.io/jobset-name={JOB},jobset.sigs.k8s.io/restart-attempt={attempt}",
        ).items
        live = [p for p in pods if p.metadata.deletion_timestamp is None and p.status.phase == "Running"]
        return sorted(live, key=lambda p: p.metadata.name) if len(live) == count else None

    return wait_for(f"the JobSet's {count} pods of attempt {attempt} Running", running, timeout=90)


def confirmed_node_fault(operator: Cluster, ns: str, faulty: client.V1Pod) -> dict[str, Any]:
    """A fatal XID on the faulty pod's node, posted as Alertmanager would and confirmed by that node's
    sidecar: the monitor's record once it has finished."""
    token = monitor_token(operator, tokens.ALERTS, ns, JOB)
    with sidecar_that_saw(faulty, monitor_token(operator, tokens.EVENTS, ns, JOB)):
        status, answer = post(operator, "/v1/alerts", alert_payload(ns, faulty.spec.node_name), token)
        assert status == 200, answer
        done: dict[str, Any] = wait_for("the remediation finished", lambda: (r := records(operator, ns)) and
                                        r[0]["phase"] in ("Succeeded", "Failed", "Skipped") and r[0],
                                        timeout=120)  # fmt: skip
    return done


def child_jobs(cluster: Cluster, ns: str) -> dict[str, str]:
    """name -> uid of the JobSet's child Jobs."""
    jobs = client.BatchV1Api(cluster.api).list_namespaced_job(
        ns, label_selector=f"jobset.sigs.k8s.io/jobset-name={JOB}"
    )
    return {j.metadata.name: j.metadata.uid for j in jobs.items if j.metadata.deletion_timestamp is None}


def jobset_status(cluster: Cluster, ns: str) -> dict[str, Any]:
    return dict((cluster.get("jobset.x-k8s.io/v1alpha2", "JobSet", ns, JOB) or {}).get("status") or {})


def fail(cluster: Cluster, ns: str, pod: client.V1Pod) -> None:
    """The pod's trainer exited 1, as a kubelet reports it."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cluster.core.patch_namespaced_pod_status(pod.metadata.name, ns, {"status": {"phase": "Failed", "containerStatuses": [
        {"name": "trainer", "image": "registry.invalid/llama:1", "imageID": "", "ready": False, "restartCount": 0,
         "state": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now}}}]}})  # fmt: skip


# ---- the edge's writes, against the real apiserver ----------------------------------------------------


def parked_pod(cluster: Cluster, ns: str, name: str) -> client.V1Pod:
    """A pod bound to a node no kubelet runs: it stays where the test puts it (Pending, or Terminating)."""
    return cluster.core.create_namespaced_pod(ns, {"metadata": {"name": name, "labels": {"app": "parked"}}, "spec": {
        "nodeName": "no-such-node", "terminationGracePeriodSeconds": 30,
        "containers": [{"name": "trainer", "image": "registry.invalid/llama:1"}]}})  # fmt: skip


def test_the_edge_evicts_fails_and_force_deletes_only_the_pod_it_names(
    cluster: Cluster, ns: str, edge: Edge
) -> None:
    evicted = parked_pod(cluster, ns, "evicted")
    assert not edge.evict_pod(ns, "evicted", "not-its-uid", 5), "another incarnation of the name: left alone"
    assert edge.evict_pod(ns, "evicted", evicted.metadata.uid, 5)
    after = cluster.core.read_namespaced_pod("evicted", ns)
    assert after.metadata.deletion_timestamp is not None
    assert [
        (c.type, c.status, c.reason) for c in after.status.conditions or [] if c.type == "DisruptionTarget"
    ] == [("DisruptionTarget", "True", "EvictionByEvictionAPI")], (
        "the Eviction API sets DisruptionTarget: a podFailurePolicy can Ignore it"
    )

    down = parked_pod(cluster, ns, "down")
    assert not edge.fail_pod(ns, "down", "not-its-uid", "node x is down"), "a uid that differs is refused"
    assert cluster.core.read_namespaced_pod("down", ns).status.phase == "Pending"
    assert edge.fail_pod(ns, "down", down.metadata.uid, "node x is down")
    failed = cluster.core.read_namespaced_pod("down", ns)
    assert failed.status.phase == "Failed"
    assert [
        (c.type, c.status, c.reason) for c in failed.status.conditions or [] if c.type == "DisruptionTarget"
    ] == [("DisruptionTarget", "True", NODE_DOWN_REASON)]
    assert not edge.force_delete_pod(ns, "down", "not-its-uid")
    assert edge.force_delete_pod(ns, "down", down.metadata.uid)
    with pytest.raises(ApiException) as gone:
        cluster.core.read_namespaced_pod("down", ns)
    assert gone.value.status == 404, "grace period 0: gone at once, no kubelet asked"
    assert not edge.force_delete_pod(ns, "down", down.metadata.uid), "already gone"


def test_the_edge_deletes_a_child_job_only_when_the_jobset_controls_it(
    cluster: Cluster, ns: str, edge: Edge
) -> None:
    batch = client.BatchV1Api(cluster.api)
    job = batch.create_namespaced_job(ns, {"metadata": {"name": "not-a-child"}, "spec": {"suspend": True, "template": {
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.invalid/x:1"}]}}}})  # fmt: skip
    wait_for("the Job in the cache", lambda: edge.reads.job(ns, "not-a-child") is not None)
    with pytest.raises(Refused, match="not controlled by the JobSet"):
        edge.delete_child_job(ns, "not-a-child", job.metadata.uid, "some-jobset-uid")
    assert batch.read_namespaced_job("not-a-child", ns).metadata.uid == job.metadata.uid, "not deleted"
    assert not edge.delete_child_job(ns, "not-a-child", "an-older-uid", "some-jobset-uid"), (
        "another incarnation"
    )


def test_a_workload_ref_the_cluster_does_not_serve_is_degraded_naming_the_field(
    operator: Cluster, ns: str
) -> None:
    monitor_on(operator, ns, {"kind": "JobSet", "name": JOB, "apiVersion": "jobset.x-k8s.io/v9"})
    c = wait_for(
        "Degraded: WorkloadUnresolved", lambda: (d := degraded(operator, ns)).get("status") == "True" and d
    )
    assert c["reason"] == "WorkloadUnresolved"
    assert c["message"].startswith(
        "spec.workloadRef: JobSet (jobset.x-k8s.io/v9) is not served by this cluster"
    )
    assert condition(operator.get(*MON, ns, JOB), "Ready")["status"] == "True", (
        "the rules and routes are in place"
    )
    assert operator.events(ns, JOB, "WorkloadUnresolved"), "a Warning Event says so too"


# ---- a JobSet, on the real JobSet controller ----------------------------------------------------------


class TestJobSet:
    """On one JobSet controller (the harness runs it per test class)."""

    def test_a_monitor_on_a_jobset_finds_its_pods_and_the_restarts_it_has_left(
        self, operator: Cluster, jobsets: str, clean_nodes: None
    ) -> None:
        ns = jobsets
        # a dry run: the JobSet's own restart below is left to the JobSet alone
        monitor_on(operator, ns, {"kind": "JobSet", "name": JOB}, dryRun=True)
        missing = wait_for(
            "WorkloadResolved False: the JobSet not found",
            lambda: (d := resolved(operator, ns)).get("status") == "False" and d,
        )
        assert (missing["reason"], missing["message"]) == (
            "WorkloadNotFound",
            f"spec.workloadRef: JobSet {ns}/{JOB} not found: create it, or fix spec.workloadRef.name",
        )
        assert degraded(operator, ns).get("status") == "False", "waiting for its JobSet, not Degraded"
        operator.custom.create_namespaced_custom_object(
            *JOBSET_API[:2], ns, JOBSET_API[2], training_jobset(max_restarts=2)
        )
        first = gang(operator, ns)
        wait_for(
            "WorkloadResolved by the leader's next pass",
            lambda: resolved(operator, ns).get("status") == "True",
            timeout=30,
        )

        # the operator's own reading of the owner, from real caches
        cache = ClusterCache(operator.api).start()
        try:
            ref = WorkloadRef(kind="JobSet", name=JOB)
            w = wait_for("the owner read", lambda: (r := cache.workload(ns, ref, SELECTOR)).pods and r)
            assert (w.problem, w.refusal, w.attempt, w.budget_left) == ("", "", 0, 2)
            assert sorted(p["metadata"]["name"] for p in w.pods) == [p.metadata.name for p in first]
            assert [(c.name, c.parallelism) for c in w.children] == [
                (f"{JOB}-node-0", 1),
                (f"{JOB}-node-1", 1),
            ]
            (r,) = w.replacements(first[0].spec.node_name)
            assert r.pod == first[0].metadata.name and r.child_job is not None and r.refusal == ""

            # a rank fails for real: its Job (backoffLimit 0) fails and the JobSet restarts the gang itself
            fail(operator, ns, first[0])
            wait_for(
                "the JobSet's own restart",
                lambda: jobset_status(operator, ns).get("restarts") == 1,
                timeout=60,
            )
            second = gang(operator, ns, attempt=1)
            w = wait_for("the owner at attempt 1", lambda: (r := cache.workload(ns, ref, SELECTOR)).attempt == 1
                         and {p["metadata"]["uid"] for p in r.pods} == {p.metadata.uid for p in second} and r)  # fmt: skip
            assert w.budget_left == 1, "maxRestarts 2 less restartsCountTowardsMax 1"
            assert not {p["metadata"]["uid"] for p in w.pods} & {p.metadata.uid for p in first}, (
                "attempt 0 is history"
            )
        finally:
            cache.stop()

    def test_a_node_fault_replaces_only_the_faulty_pod_through_the_jobset(
        self, operator: Cluster, jobsets: str, clean_nodes: None
    ) -> None:
        ns = jobsets
        monitor_on(operator, ns, {"kind": "JobSet", "name": JOB})
        operator.custom.create_namespaced_custom_object(
            *JOBSET_API[:2], ns, JOBSET_API[2], training_jobset(max_restarts=2)
        )
        faulty, healthy = gang(operator, ns)
        node = faulty.spec.node_name
        jobs_before = child_jobs(operator, ns)
        wait_for("the owner resolved", lambda: resolved(operator, ns).get("status") == "True", timeout=30)

        token = monitor_token(operator, tokens.EVENTS, ns, JOB)
        event = {"source": "sidecar", "labels": alert_payload(ns, node)["alerts"][0]["labels"],
                 "annotations": {}, "fingerprint": "x", "startsAt": time.time()}  # fmt: skip
        sender = operator.api.sanitize_for_serialization(faulty)
        t0 = time.monotonic()
        with sidecar_that_saw(faulty, token):
            assert (
                post(operator, "/v1/events", event, bound_token(operator.core, sender, EVENTS_AUDIENCE))[0]
                == 200
            )
            done = finished(operator, ns, "the remediation finished", timeout=120)
        elapsed = time.monotonic() - t0
        assert done["phase"] == "Succeeded", json.dumps(done, indent=1)
        assert [(s["kind"], s["phase"]) for s in done["steps"]] == [
            ("ConfirmFault", "Succeeded"), ("Cordon", "Succeeded"), ("Taint", "Succeeded"),
            ("RequestCheckpoint", "Succeeded"), ("ReplacePod", "Succeeded"),
            ("RestartInPlace", "Skipped"),  # no sidecar runs here (sidecar_that_saw stands in for one)
            ("ConfirmPlacement", "Succeeded"),
        ], json.dumps(done, indent=1)  # fmt: skip
        replaced = next(s for s in done["steps"] if s["kind"] == "ReplacePod")
        assert (
            f"deleted child Job {JOB}-node-0" in replaced["detail"]
            or f"deleted child Job {JOB}-node-1" in replaced["detail"]
        )

        jobs_after = wait_for(
            "the JobSet's 2 child Jobs", lambda: (j := child_jobs(operator, ns)) and len(j) == 2 and j
        )
        faulty_job = next(
            n
            for n, uid in jobs_before.items()
            if faulty.metadata.labels["batch.kubernetes.io/controller-uid"] == uid
        )
        assert jobs_after[faulty_job] != jobs_before[faulty_job], "the faulty pod's child Job was recreated"
        others = {n: u for n, u in jobs_before.items() if n != faulty_job}
        assert {n: jobs_after[n] for n in others} == others, "the healthy rank's Job untouched"

        now = gang(operator, ns, attempt=0)
        assert healthy.metadata.uid in {p.metadata.uid for p in now}, "the healthy rank's pod untouched"
        new = next(p for p in now if p.metadata.uid != healthy.metadata.uid)
        assert new.metadata.uid != faulty.metadata.uid and new.spec.node_name != node, (
            "replaced away from the faulty node"
        )
        status = jobset_status(operator, ns)
        assert (status.get("restarts", 0), status.get("restartsCountTowardsMax", 0)) == (0, 0), (
            "nothing counted against the JobSet's maxRestarts"
        )
        with pytest.raises(ApiException) as gone:
            operator.core.read_namespaced_pod(faulty.metadata.name, ns)
        assert gone.value.status == 404
        print(f"\nfault posted -> the faulty rank's pod replaced through the JobSet in {elapsed:.1f}s")

    def test_a_jobset_without_restarts_gets_a_notice_after_its_node_is_isolated(
        self, operator: Cluster, jobsets: str, clean_nodes: None
    ) -> None:
        ns = jobsets
        monitor_on(operator, ns, {"kind": "JobSet", "name": JOB})
        operator.custom.create_namespaced_custom_object(
            *JOBSET_API[:2], ns, JOBSET_API[2], training_jobset(max_restarts=None)
        )
        faulty, _ = gang(operator, ns)
        jobs_before = child_jobs(operator, ns)
        done = confirmed_node_fault(operator, ns, faulty)
        assert [s["kind"] for s in done["steps"]] == [
            "ConfirmFault",
            "Cordon",
            "Taint",
            "RequestCheckpoint",
            "Notify",
        ]
        notice = done["steps"][-1]["params"]["reason"]
        assert (
            notice
            == "the owner allows no restart: the JobSet allows no restarts (spec.failurePolicy.maxRestarts)"
        )
        assert operator.core.read_node(faulty.spec.node_name).spec.unschedulable is True
        assert child_jobs(operator, ns) == jobs_before, "nothing restarted"


# ---- a TrainJob, on the real Trainer v2.2.0 and its JobSet -----------------------------------------------

TRAINJOB_API = ("trainer.kubeflow.org", "v1alpha1", "trainjobs")


@pytest.fixture
def trainjobs(cluster: Cluster, trainer_controller: Controller, ns: str) -> Iterator[str]:
    """The namespace, with the shipped torch-distributed ClusterTrainingRuntime applied; its TrainJobs are
    deleted after the test and their pods waited out (as `jobsets`)."""
    runtime = next(
        iter(load_all(manifests_dir("trainer") / "manifests/base/runtimes/torch_distributed.yaml"))
    )
    cluster.apply([runtime])
    yield ns
    cluster.delete_owners(ns, *TRAINJOB_API, "jobset.sigs.k8s.io/jobset-name")


class TestTrainJob:
    """A monitor on a TrainJob reads it through the JobSet the Trainer made of it."""

    def test_a_monitor_on_a_trainjob_finds_its_jobset_and_pods_and_a_restart_is_a_notice(
        self, operator: Cluster, trainjobs: str, clean_nodes: None
    ) -> None:
        ns = trainjobs
        monitor, policy = quickstart(ns)
        monitor["spec"]["selector"] = {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": JOB}}
        monitor["spec"]["workloadRef"] = {"kind": "TrainJob", "name": JOB}
        monitor["spec"]["remediation"] = {"emergencyCheckpointTimeout": "2s"}
        operator.apply([monitor, policy])
        wait_for("monitor Ready", lambda: ready(operator, ns), timeout=60)
        job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": JOB},
               "spec": {"runtimeRef": {"name": "torch-distributed"},
                        "trainer": {"numNodes": 2, "image": "busybox:1.36", "command": ["sh", "-c", "sleep 600"]}}}  # fmt: skip
        operator.custom.create_namespaced_custom_object(*TRAINJOB_API[:2], ns, TRAINJOB_API[2], job)
        pods = gang(operator, ns)
        wait_for("the owner resolved", lambda: resolved(operator, ns).get("status") == "True", timeout=30)

        cache = ClusterCache(operator.api).start()
        try:
            ref = WorkloadRef(kind="TrainJob", name=JOB)
            selector = LabelSelector.model_validate(monitor["spec"]["selector"])
            w = wait_for("the owner read", lambda: (r := cache.workload(ns, ref, selector)).pods and r)
        finally:
            cache.stop()
        assert (w.problem, w.jobset, w.attempt) == ("", JOB, 0), "the JobSet of the TrainJob's name"
        assert sorted(p["metadata"]["uid"] for p in w.pods) == sorted(p.metadata.uid for p in pods)
        assert [(c.name, c.parallelism) for c in w.children] == [(f"{JOB}-node-0", 2)], (
            "every rank in one Job"
        )
        # the shipped torch-distributed runtime sets no failure policy: its JobSet allows no restart
        assert (
            w.refusal
            == f"the JobSet allows no restarts (spec.failurePolicy.maxRestarts) (the JobSet {JOB} of TrainJob {JOB})"
        )

        faulty = pods[0]
        done = confirmed_node_fault(operator, ns, faulty)
        assert [s["kind"] for s in done["steps"]] == [
            "ConfirmFault",
            "Cordon",
            "Taint",
            "RequestCheckpoint",
            "Notify",
        ]
        assert (
            "the JobSet allows no restarts (spec.failurePolicy.maxRestarts)"
            in done["steps"][-1]["params"]["reason"]
        )
        assert {p.metadata.uid for p in gang(operator, ns)} == {p.metadata.uid for p in pods}, (
            "nothing restarted"
        )
