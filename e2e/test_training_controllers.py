"""The real training controllers on the local control plane (e2e/controlplane/controllers.py): each one
reconciles its own kind into Jobs and pods that the kube-controller-manager, the scheduler and the fake
kubelet carry on with, and the apiserver calls its admission webhooks on loopback (a defaulted field,
an invalid object refused by name of the webhook).

The fake kubelet starts no container: `run_containers` does what a kubelet does when a pod's
containers exit, running each container's command here (plain `sh -c` commands; the image is not
pulled) and reporting its exit code in the pod's status."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.cluster import Cluster, load_all
from e2e.controlplane.controllers import Controller, manifests_dir
from tests.processes import wait_for
from trainguard.remediation.cluster import failed_status

IMAGE = "busybox:1.36"


def container(name: str, command: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": IMAGE, "command": ["sh", "-c", command], **extra}


def run_containers(core: client.CoreV1Api, namespace: str, selector: str) -> list[str]:
    """Run each Running pod's containers' commands here, and report them exited as a kubelet does: the
    phase Succeeded (or Failed) and each container terminated with its exit code. The pods' names."""
    done = []
    for pod in core.list_namespaced_pod(namespace, label_selector=selector).items:
        if pod.status.phase != "Running" or pod.metadata.deletion_timestamp is not None:
            continue
        statuses, failed = [], False
        for c in pod.spec.containers:
            env = {"PATH": "/usr/bin:/bin"} | {e.name: e.value for e in c.env or [] if e.value is not None}
            rc = subprocess.run(
                [*c.command, *(c.args or [])], check=False, env=env, capture_output=True, timeout=30
            ).returncode
            failed |= rc != 0
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            statuses.append({"name": c.name, "image": c.image, "imageID": f"fake://{c.image}", "ready": False,
                             "restartCount": 0, "state": {"terminated": {"exitCode": rc, "reason": "Error" if rc else "Completed",
                                                                         "startedAt": now, "finishedAt": now}}})  # fmt: skip
        core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": {
            "phase": "Failed" if failed else "Succeeded", "containerStatuses": statuses,
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
        }})  # fmt: skip
        done.append(pod.metadata.name)
    return done


def condition(obj: dict[str, Any] | None, kind: str) -> bool:
    return any(
        c["type"] == kind and c["status"] == "True"
        for c in ((obj or {}).get("status") or {}).get("conditions") or []
    )


def refused(exc: pytest.ExceptionInfo[ApiException], webhook: str) -> str:
    """The apiserver's message for an object a validating webhook denied, checked to name that webhook."""
    body = exc.value.body.decode() if isinstance(exc.value.body, bytes) else str(exc.value.body)
    message = str(json.loads(body)["message"])
    assert message.startswith(f'admission webhook "{webhook}" denied the request'), message
    return message


def report(ctl: Controller) -> None:
    """What each controller costs, in the test's output (pytest -s, or the log on a failure)."""
    print(f"\n{ctl.name}: ready in {ctl.ready_seconds:.1f}s, {ctl.rss_mib():.0f} MiB resident now; "
          f"webhooks served {ctl.served_paths}, not registered (not served) {ctl.dropped_paths}")  # fmt: skip


# ---- JobSet ---------------------------------------------------------------------------------------------

JOBSET_API = "jobset.x-k8s.io/v1alpha2"


def jobset(name: str, **spec: Any) -> dict[str, Any]:
    def replicated(rname: str) -> dict[str, Any]:
        return {"name": rname, "replicas": 1, "template": {"spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                "template": {"spec": {"containers": [container("main", f"echo {rname} $JOB_COMPLETION_INDEX")]}}}}}  # fmt: skip

    return {"apiVersion": JOBSET_API, "kind": "JobSet", "metadata": {"name": name},
            "spec": {"replicatedJobs": [replicated("leader"), replicated("workers")], **spec}}  # fmt: skip


class TestJobSet:
    """The JobSet controller: a JobSet of two replicated Jobs run to completion, and its webhooks."""

    def test_jobset_runs_its_jobs_to_completion(
        self, cluster: Cluster, jobset_controller: Controller, ns: str
    ) -> None:
        report(jobset_controller)
        cluster.custom.create_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", ns, "jobsets", jobset("train")
        )
        # the mutating webhook's defaults, which the CRD's schema does not give
        js = cluster.get(JOBSET_API, "JobSet", ns, "train")
        assert js is not None
        assert js["spec"]["successPolicy"]["operator"] == "All"
        assert js["spec"]["network"]["enableDNSHostnames"] is True
        assert js["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"] == "Indexed"

        batch = client.BatchV1Api(cluster.api)
        selector = "jobset.sigs.k8s.io/jobset-name=train"
        wait_for(
            "the JobSet's 2 Jobs",
            lambda: len(batch.list_namespaced_job(ns, label_selector=selector).items) == 2,
        )

        def running() -> bool:
            pods = cluster.core.list_namespaced_pod(ns, label_selector=selector).items
            return len(pods) == 2 and all(p.status.phase == "Running" for p in pods)

        wait_for("its 2 pods Running on the fake nodes", running, timeout=60)
        wait_for("the JobSet counting 1 active Job in each replicated job", lambda: sorted(
            (r["name"], r["active"]) for r in (cluster.get(JOBSET_API, "JobSet", ns, "train") or {})["status"]["replicatedJobsStatus"]
        ) == [("leader", 1), ("workers", 1)])  # fmt: skip

        assert len(run_containers(cluster.core, ns, selector)) == 2
        wait_for(
            "the JobSet Completed",
            lambda: condition(cluster.get(JOBSET_API, "JobSet", ns, "train"), "Completed"),
            timeout=60,
        )

    def test_jobset_webhook_refuses_an_invalid_jobset(
        self, cluster: Cluster, jobset_controller: Controller, ns: str
    ) -> None:
        bad = jobset("bad", successPolicy={"operator": "All", "targetReplicatedJobs": ["nowhere"]})
        with pytest.raises(ApiException) as exc:
            cluster.custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets", bad)
        assert "invalid replicatedJob name 'nowhere'" in refused(exc, "vjobset.kb.io")


# ---- Kueue ----------------------------------------------------------------------------------------------

KUEUE_API = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def queued_job(name: str, queue: str, *, suspend: bool) -> dict[str, Any]:
    resources = {"requests": {"cpu": "1", "memory": "100Mi"}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
            "spec": {"suspend": suspend, "parallelism": 2, "completions": 2, "backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "containers": [container("main", "echo admitted", resources=resources)]}}}}  # fmt: skip


class TestKueue:
    """Kueue: a queued Job admitted through a LocalQueue and a ClusterQueue, and its webhooks."""

    def test_kueue_admits_a_queued_job(self, cluster: Cluster, kueue_controller: Controller, ns: str) -> None:
        report(kueue_controller)
        cq = f"cq-{ns}"
        cluster.apply([
            {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}},
            {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": {
                "namespaceSelector": {}, "cohortName": "e2e", "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [
                    {"name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": "4"},
                                                             {"name": "memory", "nominalQuota": "4Gi"}]}]}]}},
            {"apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns},
             "spec": {"clusterQueue": cq}},
        ])  # fmt: skip
        wait_for(
            "the ClusterQueue Active",
            lambda: condition(cluster.get(KUEUE_API, "ClusterQueue", "", cq), "Active"),
        )
        # stored as v1beta2; read as v1beta1 through Kueue's conversion webhook, which renames cohortName
        old = cluster.get("kueue.x-k8s.io/v1beta1", "ClusterQueue", "", cq)
        assert old is not None and old["apiVersion"] == "kueue.x-k8s.io/v1beta1"
        assert old["spec"].get("cohort") == "e2e" and "cohortName" not in old["spec"], old["spec"]
        batch = client.BatchV1Api(cluster.api)
        batch.create_namespaced_job(ns, queued_job("queued", "lq", suspend=True))

        wait_for(
            "Kueue to admit the Job (unsuspend it)",
            lambda: batch.read_namespaced_job("queued", ns).spec.suspend is False,
            timeout=60,
        )
        workloads = cluster.list(KUEUE_API, "Workload", ns)
        assert len(workloads) == 1 and condition(workloads[0], "Admitted"), workloads
        admission = workloads[0]["status"]["admission"]
        assert admission["clusterQueue"] == cq
        assert admission["podSetAssignments"][0]["flavors"] == {
            "cpu": "default-flavor",
            "memory": "default-flavor",
        }
        wait_for("its 2 pods Running", lambda: sum(p.status.phase == "Running" for p in cluster.core.list_namespaced_pod(
            ns, label_selector="job-name=queued").items) == 2, timeout=60)  # fmt: skip

        # the mutating webhook suspends a queued Job created running; with no such LocalQueue it stays so
        batch.create_namespaced_job(ns, queued_job("held", "no-such-queue", suspend=False))
        assert batch.read_namespaced_job("held", ns).spec.suspend is True
        time.sleep(2)
        assert batch.read_namespaced_job("held", ns).spec.suspend is True

    def test_kueue_webhook_refuses_an_invalid_queue_name(
        self, cluster: Cluster, kueue_controller: Controller, ns: str
    ) -> None:
        with pytest.raises(ApiException) as exc:
            client.BatchV1Api(cluster.api).create_namespaced_job(
                ns, queued_job("bad", "Not_A_Queue", suspend=True)
            )
        assert "Not_A_Queue" in refused(exc, "vjob.kb.io")


# ---- Kubeflow Trainer v2 --------------------------------------------------------------------------------

TRAINER_API = "trainer.kubeflow.org/v1alpha1"


class TestTrainer:
    """Kubeflow Trainer v2, on the JobSet controller: a TrainJob of a ClusterTrainingRuntime becomes a JobSet."""

    def test_trainer_turns_a_trainjob_into_a_jobset(
        self, cluster: Cluster, trainer_controller: Controller, ns: str
    ) -> None:
        report(trainer_controller)
        runtime = next(
            d for d in load_all(manifests_dir("trainer") / "manifests/base/runtimes/torch_distributed.yaml")
        )
        cluster.apply([runtime])
        name = runtime["metadata"]["name"]
        job = {"apiVersion": TRAINER_API, "kind": "TrainJob", "metadata": {"name": "tiny"},
               "spec": {"runtimeRef": {"name": name}, "trainer": {"numNodes": 2, "image": IMAGE,
                                                                   "command": ["sh", "-c", "echo trained"]}}}  # fmt: skip
        cluster.custom.create_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", ns, "trainjobs", job
        )

        js = wait_for(
            "the TrainJob's JobSet", lambda: cluster.get(JOBSET_API, "JobSet", ns, "tiny"), timeout=60
        )
        owner = js["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("TrainJob", "tiny")
        node = next(r for r in js["spec"]["replicatedJobs"] if r["name"] == "node")
        assert node["template"]["spec"]["parallelism"] == 2  # numNodes, through the torch plugin
        selector = "jobset.sigs.k8s.io/jobset-name=tiny"
        wait_for("its 2 node pods Running", lambda: sum(p.status.phase == "Running" for p in cluster.core.list_namespaced_pod(
            ns, label_selector=selector).items) == 2, timeout=90)  # fmt: skip
        assert len(run_containers(cluster.core, ns, selector)) == 2
        wait_for("the TrainJob Complete", lambda: condition(cluster.get(TRAINER_API, "TrainJob", ns, "tiny"), "Complete"),
                 timeout=60)  # fmt: skip

    def test_trainer_webhook_refuses_a_trainjob_without_its_runtime(
        self, cluster: Cluster, trainer_controller: Controller, ns: str
    ) -> None:
        job = {"apiVersion": TRAINER_API, "kind": "TrainJob", "metadata": {"name": "orphan"},
               "spec": {"runtimeRef": {"name": "no-such-runtime"}}}  # fmt: skip
        with pytest.raises(ApiException) as exc:
            cluster.custom.create_namespaced_custom_object(
                "trainer.kubeflow.org", "v1alpha1", ns, "trainjobs", job
            )
        assert "specified clusterTrainingRuntime must be created before the TrainJob" in refused(
            exc, "validator.trainjob.trainer.kubeflow.org"
        )


# ---- Kubeflow training-operator (PyTorchJob) ------------------------------------------------------------


def pytorchjob(name: str, container_name: str = "pytorch") -> dict[str, Any]:
    def replica(n: int) -> dict[str, Any]:
        return {"replicas": n, "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [container(container_name, "echo $RANK of $WORLD_SIZE")]}}}  # fmt: skip

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(1)}}}  # fmt: skip


class TestTrainingOperator:
    """The Kubeflow training-operator: a PyTorchJob's master and worker pods run to success, and its webhook."""

    def test_training_operator_runs_a_pytorchjob(
        self, cluster: Cluster, training_operator_controller: Controller, ns: str
    ) -> None:
        report(training_operator_controller)
        cluster.custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", ns, "pytorchjobs", pytorchjob("ddp")
        )
        selector = "training.kubeflow.org/job-name=ddp"

        def running() -> bool:
            pods = cluster.core.list_namespaced_pod(ns, label_selector=selector).items
            return len(pods) == 2 and all(p.status.phase == "Running" for p in pods)

        wait_for("the PyTorchJob's master and worker pods Running", running, timeout=60)
        master = cluster.core.read_namespaced_pod("ddp-master-0", ns)
        env = {e.name: e.value for e in master.spec.containers[0].env or []}
        assert env["WORLD_SIZE"] == "2" and env["RANK"] == "0" and env["MASTER_ADDR"] == "ddp-master-0"
        wait_for(
            "the PyTorchJob Running",
            lambda: condition(cluster.get("kubeflow.org/v1", "PyTorchJob", ns, "ddp"), "Running"),
        )
        run_containers(cluster.core, ns, selector)
        wait_for(
            "the PyTorchJob Succeeded",
            lambda: condition(cluster.get("kubeflow.org/v1", "PyTorchJob", ns, "ddp"), "Succeeded"),
            timeout=60,
        )

    def test_training_operator_webhook_refuses_a_pytorchjob_without_its_container(
        self, cluster: Cluster, training_operator_controller: Controller, ns: str
    ) -> None:
        with pytest.raises(ApiException) as exc:
            cluster.custom.create_namespaced_custom_object(
                "kubeflow.org", "v1", ns, "pytorchjobs", pytorchjob("bad", "trainer")
            )
        assert "must have at least one container with name pytorch" in refused(
            exc, "validator.pytorchjob.training-operator.kubeflow.org"
        )


# ---- PyTorchJob: one pod replaced ----------------------------------------------------------------------


def pytorchjob_status(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return (cluster.get("kubeflow.org/v1", "PyTorchJob", ns, name) or {}).get("status") or {}


def said(status: dict[str, Any]) -> list[tuple[str, str]]:
    """The conditions that hold (type, reason), and each replica type's failed count where it has one."""
    conds = [
        (c["type"], c.get("reason", "")) for c in status.get("conditions") or [] if c["status"] == "True"
    ]
    failed = [(f"{k} failed", str(v["failed"])) for k, v in (status.get("replicaStatuses") or {}).items()
              if v.get("failed")]  # fmt: skip
    return conds + failed


class TestPyTorchJobPodReplacement:
    """What the training-operator v1.9.3 does when one pod of a running PyTorchJob (restartPolicy
    OnFailure, runPolicy.backoffLimit 0: any failure it counts fails the job) goes, the ways trainguard's
    ReplacePod removes it: the pod is recreated under its name at once, and the job never fails (it may
    say Restarting for a moment: nothing that backoffLimit counts), unless the pod was Failed first. A
    Running pod turned Failed is a new failure against backoffLimit (with 0 the job fails), so trainguard
    never marks a PyTorchJob's pod Failed (kube/workloads.py: Workload.marks_failed)."""

    @pytest.fixture
    def job(self, cluster: Cluster, training_operator_controller: Controller, ns: str) -> str:
        body = pytorchjob("ddp")
        body["spec"]["runPolicy"] = {"backoffLimit": 0}
        for replica in body["spec"]["pytorchReplicaSpecs"].values():
            replica["template"]["spec"]["containers"][0]["command"] = ["sleep", "1000"]
        cluster.custom.create_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", body)
        wait_for("the PyTorchJob's pods Running", lambda: len(self.running(cluster, ns)) == 2, timeout=60)
        wait_for("the PyTorchJob Running", lambda: ("Running", "PyTorchJobRunning") in said(
            pytorchjob_status(cluster, ns, "ddp")))  # fmt: skip
        return ns

    @staticmethod
    def running(cluster: Cluster, ns: str) -> dict[str, str]:
        """Name -> uid of the job's Running pods that are not being deleted."""
        pods = cluster.core.list_namespaced_pod(ns, label_selector="training.kubeflow.org/job-name=ddp").items
        return {p.metadata.name: p.metadata.uid for p in pods
                if p.status.phase == "Running" and p.metadata.deletion_timestamp is None}  # fmt: skip

    def replaced(
        self, cluster: Cluster, ns: str, name: str, uid: str
    ) -> tuple[float, list[list[tuple[str, str]]]]:
        """Seconds until `name` runs again under another uid, and what the job's status said meanwhile
        (read every 0.1 s, and for 3 s after)."""
        t0, seen = time.monotonic(), []
        deadline = t0 + 30
        while self.running(cluster, ns).get(name) in (None, uid):
            seen.append(said(pytorchjob_status(cluster, ns, "ddp")))
            assert time.monotonic() < deadline, f"{name} not recreated in 30 s; the job said {seen[-3:]}"
            time.sleep(0.1)
        took = time.monotonic() - t0
        for _ in range(30):
            seen.append(said(pytorchjob_status(cluster, ns, "ddp")))
            time.sleep(0.1)
        return took, seen

    def evict(self, cluster: Cluster, ns: str, name: str, uid: str) -> None:
        cluster.core.create_namespaced_pod_eviction(name, ns, client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace=ns),
            delete_options=client.V1DeleteOptions(grace_period_seconds=5, preconditions=client.V1Preconditions(uid=uid))))  # fmt: skip

    def test_an_evicted_pod_is_recreated_at_once_and_no_failure_is_counted(
        self, cluster: Cluster, job: str
    ) -> None:
        """The eviction off a live node, as a real kubelet ends it: the pod terminating (its deletion held by
        a finalizer while the kubelet stops it), then Failed with the launcher's exit status on SIGTERM
        (143), then gone. The fake kubelet ends a deleted pod at once; the finalizer and the status patch
        do what a kubelet does in between."""
        ns = job
        for name in ("ddp-worker-0", "ddp-master-0"):
            uid = self.running(cluster, ns)[name]
            cluster.core.patch_namespaced_pod(
                name, ns, {"metadata": {"finalizers": ["e2e.trainguard.io/hold"]}}
            )
            self.evict(cluster, ns, name, uid)
            time.sleep(1)
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            cluster.core.patch_namespaced_pod_status(name, ns, {"status": {"phase": "Failed", "containerStatuses": [
                {"name": "pytorch", "image": IMAGE, "imageID": f"fake://{IMAGE}", "ready": False, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 143, "reason": "Error", "startedAt": now, "finishedAt": now}}}]}})  # fmt: skip
            time.sleep(1)
            cluster.core.patch_namespaced_pod(name, ns, [{"op": "remove", "path": "/metadata/finalizers"}],
                                              _content_type="application/json-patch+json")  # fmt: skip
            took, seen = self.replaced(cluster, ns, name, uid)
            print(
                f"\n{name} evicted: recreated in {took:.2f}s after its deletion; the job said {sorted({x for s in seen for x in s})}"
            )
            assert took < 5 and not any(c == "Failed" for s in seen for c, _ in s), (took, seen)
            assert ("Running", "PyTorchJobRunning") in seen[-1], seen[-1]

    def test_a_force_deleted_pod_is_recreated_at_once_and_no_failure_is_counted(
        self, cluster: Cluster, job: str
    ) -> None:
        """A dead node's pod, force-deleted by trainguard without a Failed phase (what it does for a
        PyTorchJob): the training-operator recreates it under its name, and the job never fails (in some
        runs it says Restarting for a moment, and counts the pod failed in replicaStatuses while it goes)."""
        ns = job
        for name in ("ddp-master-0", "ddp-worker-0"):
            uid = self.running(cluster, ns)[name]
            cluster.core.delete_namespaced_pod(name, ns, body=client.V1DeleteOptions(
                grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)))  # fmt: skip
            took, seen = self.replaced(cluster, ns, name, uid)
            print(
                f"\n{name} force-deleted: recreated in {took:.2f}s; the job said {sorted({x for s in seen for x in s})}"
            )
            assert took < 5 and not any(c == "Failed" for s in seen for c, _ in s), (took, seen)
            assert ("Running", "PyTorchJobRunning") in seen[-1], seen[-1]

    def test_a_pod_marked_failed_fails_a_job_without_backoff_left(self, cluster: Cluster, job: str) -> None:
        """A Running pod marked Failed (as trainguard marks a Job's pod on a dead node, DisruptionTarget
        and all, before it force-deletes it) is a new failure: with backoffLimit 0 the job fails. So
        trainguard does not mark a PyTorchJob's pod. (Whether the pod is recreated too depends on which
        of the operator's passes comes first: under load it was, once.)"""
        ns = job
        assert "ddp-master-0" in self.running(cluster, ns)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        cluster.core.patch_namespaced_pod_status("ddp-master-0", ns, failed_status("node down", now))
        wait_for("the PyTorchJob Failed", lambda: ("Failed", "PyTorchJobFailed") in said(
            pytorchjob_status(cluster, ns, "ddp")), timeout=30)  # fmt: skip
