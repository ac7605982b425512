"""The workload owner read from its objects (kube/workloads.py): each kind's gang, the restarts it has
left for trainguard, whether it allows a restart at all, how one pod is replaced through it, its Kueue
admission, and a workloadRef that cannot be resolved named as the field to fix."""

from __future__ import annotations

from typing import Any

from tests.kube.owners import (
    NS,
    child_job,
    job,
    job_pod,
    jobset,
    jobset_pod,
    kueue_workload,
    pod,
    pytorchjob,
    trainjob,
)
from trainguard.kube.workloads import (
    NO_JOBSET_RESTARTS,
    OwnerRead,
    Workload,
    ignores_disruption,
    launcher_restart,
    resolve,
)

VERSIONS = {"Job": "batch/v1", "JobSet": "jobset.x-k8s.io/v1alpha2",
            "TrainJob": "trainer.kubeflow.org/v1alpha1", "PyTorchJob": "kubeflow.org/v1"}  # fmt: skip


def read(kind: str, owner: dict[str, Any] | None, name: str = "llama", **kw: Any) -> Workload:
    return resolve(OwnerRead(kind, name, NS, VERSIONS[kind], owner=owner, **kw))


def names(pods: tuple[dict[str, Any], ...]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


# ---- a workloadRef that does not resolve ----


def test_a_kind_the_cluster_does_not_serve_names_the_field_and_the_fix() -> None:
    got = resolve(OwnerRead("JobSet", "llama", NS, "jobset.x-k8s.io/v1alpha2", served=False))
    assert got.problem.startswith("spec.workloadRef: JobSet (jobset.x-k8s.io/v1alpha2) is not served")
    assert "install its controller" in got.problem


def test_an_owner_that_does_not_exist_names_the_field() -> None:
    got = read("Job", None)
    assert got.problem == "spec.workloadRef: Job ml/llama not found: create it, or fix spec.workloadRef.name"
    assert got.pods == () and got.budget_left is None


def test_an_owner_run_elsewhere_by_multikueue_is_unresolved() -> None:
    got = read(
        "JobSet",
        jobset(managedBy="kueue.x-k8s.io/multikueue"),
        jobset=jobset(managedBy="kueue.x-k8s.io/multikueue"),
    )
    assert "is managed by kueue.x-k8s.io/multikueue (spec.managedBy)" in got.problem
    ours = jobset(managedBy="jobset.sigs.k8s.io/jobset-controller")
    assert read("JobSet", ours, jobset=ours).problem == ""


def test_a_selector_wider_than_the_owner_is_unresolved_but_a_narrower_one_is_not() -> None:
    stranger = pod("someone-else")
    got = read("Job", job(), pods=(job_pod("llama-0"), stranger))
    assert got.problem.startswith("spec.selector selects pods that Job llama does not own (someone-else)")
    gone = pod("someone-else", phase="Succeeded")  # a finished pod is nobody's gang
    assert read("Job", job(), pods=(job_pod("llama-0"), gone)).problem == ""


# ---- Job ----


def test_a_job_has_as_many_gang_restarts_left_as_its_backoff_limit_takes_its_pods_failing() -> None:
    pods = (job_pod("llama-0", "gpu-a"), job_pod("llama-1", "gpu-b"))
    fresh = read("Job", job(), pods=pods)  # backoffLimit 6 by default: 3 restarts of 2 pods
    assert (fresh.budget_left, fresh.refusal, names(fresh.pods)) == (3, "", ["llama-0", "llama-1"])
    worn = read("Job", job(backoff=6, failed=5), pods=pods)
    assert worn.budget_left == 0
    assert worn.refusal.startswith("the Job has no restart left (spec.backoffLimit 6 less status.failed 5")


def test_a_job_with_a_backoff_limit_per_index_counts_its_most_failed_index() -> None:
    pods = (job_pod("llama-0", **{"batch.kubernetes.io/job-index-failure-count": "1"}),
            job_pod("llama-1", "gpu-b", **{"batch.kubernetes.io/job-index-failure-count": "2"}))  # fmt: skip
    got = read("Job", job(backoffLimitPerIndex=3), pods=pods)
    assert (got.budget_left, got.refusal) == (1, "")


# ---- JobSet ----


def jobset_gang(attempt: int = 1) -> tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
    """Two child Jobs of parallelism 1 at `attempt`, one left of attempt 0, and their pods."""
    now = [child_job(index=i, attempt=attempt) for i in (0, 1)]
    old = child_job(index=0, attempt=0)
    pods = (jobset_pod(now[0], node="gpu-a"), jobset_pod(now[1], node="gpu-b"),
            jobset_pod(old, node="gpu-c", suffix="-old", deleting=True))  # fmt: skip
    return (*now, old), pods


def test_a_jobsets_gang_is_its_current_restart_attempt_only() -> None:
    jobs, pods = jobset_gang(attempt=1)
    owner = jobset(restarts=1, counted=1, max_restarts=3)
    got = read("JobSet", owner, jobset=owner, jobs=jobs, pods=pods)
    assert names(got.pods) == ["llama-node-0-0", "llama-node-1-0"]
    assert got.older == ("llama-node-0-0-old",)
    assert [c.name for c in got.children] == ["llama-node-0", "llama-node-1"]
    assert all(c.uid.endswith("-a1-uid") for c in got.children), "the attempt-0 Job is history"
    assert (got.attempt, got.budget_left, got.refusal) == (1, 2, "")


def test_a_jobsets_restarts_left_are_max_restarts_less_those_counted_towards_it() -> None:
    jobs, pods = jobset_gang()
    spent = jobset(restarts=4, counted=3, max_restarts=3)  # one RestartJobSetAndIgnoreMaxRestarts
    got = read("JobSet", spent, jobset=spent, jobs=jobs, pods=pods)
    assert got.budget_left == 0
    assert got.refusal == (
        "the JobSet has no restart left: status.restartsCountTowardsMax 3 of spec.failurePolicy.maxRestarts 3"
    )


def test_a_jobset_without_a_failure_policy_or_with_max_restarts_0_allows_no_restart() -> None:
    for owner in (jobset(max_restarts=None), jobset(max_restarts=0)):
        got = read("JobSet", owner, jobset=owner)
        assert (got.budget_left, got.refusal, got.problem) == (0, NO_JOBSET_RESTARTS, "")
    assert NO_JOBSET_RESTARTS == "the JobSet allows no restarts (spec.failurePolicy.maxRestarts)"


def test_a_finished_jobset_is_not_restarted() -> None:
    done = jobset()
    done["status"]["conditions"] = [{"type": "Completed", "status": "True"}]
    assert read("JobSet", done, jobset=done).refusal.startswith(
        "the JobSet has finished (condition Completed)"
    )


def test_one_pod_of_a_jobset_is_replaced_by_deleting_its_child_job_of_parallelism_1() -> None:
    jobs, pods = jobset_gang(attempt=1)
    owner = jobset(restarts=1)
    got = read("JobSet", owner, jobset=owner, jobs=jobs, pods=pods)
    (only,) = got.replacements("gpu-a")
    assert (only.pod, only.uid, only.refusal) == ("llama-node-0-0", "llama-node-0-0-uid", "")
    assert only.child_job is not None and only.child_job.name == "llama-node-0"
    assert got.replacements("gpu-c") == [], "the old attempt's pod is not the gang's"


def test_one_pod_of_a_multi_pod_child_job_is_evicted_unless_that_would_fail_the_job() -> None:
    strict = child_job(parallelism=2, backoff=0)
    pods = (jobset_pod(strict, 0, "gpu-a"), jobset_pod(strict, 1, "gpu-b"))
    owner = jobset()
    (refused,) = read("JobSet", owner, jobset=owner, jobs=(strict,), pods=pods).replacements("gpu-a")
    assert (
        refused.child_job is not None and "would fail Job llama-node-0 and so JobSet llama" in refused.refusal
    )
    assert "Ignore DisruptionTarget" in refused.refusal
    tolerant = child_job(parallelism=2, backoff=0, ignore_disruption=True)
    pods = (jobset_pod(tolerant, 0, "gpu-a"), jobset_pod(tolerant, 1, "gpu-b"))
    (ok,) = read("JobSet", owner, jobset=owner, jobs=(tolerant,), pods=pods).replacements("gpu-a")
    assert (ok.refusal, ok.child_job) == ("", None), "evicted; the Job controller recreates it"
    assert "back-off" in ok.wait


# ---- TrainJob ----


def test_a_trainjob_is_read_through_the_jobset_of_its_name() -> None:
    node = child_job(parallelism=2, backoff=0, ignore_disruption=True, jobset_uid="tjs-uid")
    trainer = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    init = {"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}
    pods = (jobset_pod(node, 0, "gpu-a", labels=trainer), jobset_pod(node, 1, "gpu-b", labels=trainer),
            pod("llama-dataset-initializer-0-0", labels={"jobset.sigs.k8s.io/jobset-name": "llama",
                                                          "jobset.sigs.k8s.io/restart-attempt": "0", **init}))  # fmt: skip
    js = jobset(uid="tjs-uid", owner="tj-uid", max_restarts=1)
    got = read("TrainJob", trainjob(), jobset=js, jobs=(node,), pods=pods)
    assert got.problem == ""
    assert names(got.pods) == ["llama-node-0-0", "llama-node-0-1"], "the initializer is not the gang"
    assert (got.jobset, got.jobset_uid, got.budget_left) == ("llama", "tjs-uid", 1)
    assert [c.name for c in got.children] == ["llama-node-0"]


def test_a_trainjob_without_its_jobset_or_without_jobsets_served_is_unresolved() -> None:
    assert "has no JobSet of its name yet" in read("TrainJob", trainjob(), jobset=None).problem
    unserved = read("TrainJob", trainjob(), jobset=None, jobset_served=False)
    assert "this cluster serves no JobSets" in unserved.problem


def test_a_trainjobs_jobset_without_restarts_is_refused_with_the_jobsets_field() -> None:
    got = read("TrainJob", trainjob(), jobset=jobset(max_restarts=None, owner="tj-uid"))
    assert got.refusal == f"{NO_JOBSET_RESTARTS} (the JobSet llama of TrainJob llama)"


# ---- PyTorchJob ----


def test_a_pytorchjob_counts_the_container_restarts_of_its_running_pods() -> None:
    label = {"training.kubeflow.org/job-name": "llama"}
    pods = (pod("llama-master-0", labels=label, restarts=2), pod("llama-worker-0", "gpu-b", labels=label, restarts=1),
            pod("llama-worker-1", "gpu-c", labels=label, restarts=5, phase="Failed"))  # fmt: skip
    got = read("PyTorchJob", pytorchjob(backoff=4), pods=pods)
    assert (got.budget_left, got.refusal) == (1, ""), "4 less 2 + 1; a Failed pod's restarts are not counted"
    assert read("PyTorchJob", pytorchjob(backoff=3), pods=pods).refusal.startswith(
        "the PyTorchJob has no restart left"
    )
    assert read("PyTorchJob", pytorchjob(), pods=pods).budget_left is None, "no backoffLimit: no limit"
    (replaced,) = read("PyTorchJob", pytorchjob(), pods=pods).replacements("gpu-b")
    assert (replaced.pod, replaced.child_job, replaced.refusal) == ("llama-worker-0", None, "")


# ---- Kueue ----


def test_the_kueue_workload_admitting_the_owner_is_read_by_its_job_uid_label() -> None:
    owner = jobset(labels={"kueue.x-k8s.io/queue-name": "team-a"})
    admitted = read("JobSet", owner, jobset=owner, workloads=(kueue_workload("js-uid", Admitted="True"),))
    assert admitted.admission is not None and admitted.admission.admitted and admitted.refusal == ""
    evicted = read("JobSet", owner, jobset=owner,
                   workloads=(kueue_workload("js-uid", Admitted="False", Evicted="True:Preempted"),))  # fmt: skip
    assert (
        evicted.refusal
        == "Kueue evicted the workload (Workload jobset-llama-1a2b3, Preempted): it is requeued"
    )
    off = kueue_workload("js-uid", Admitted="False", Evicted="True:Deactivated")
    off["spec"]["active"] = False
    assert read("JobSet", owner, jobset=owner, workloads=(off,)).refusal == (
        "Kueue's Workload jobset-llama-1a2b3 is deactivated (spec.active: false)"
    ), "said once: the notice and the failed step each add what trainguard does"
    pending = read(
        "JobSet", owner, jobset=owner, workloads=(kueue_workload("js-uid", QuotaReserved="False"),)
    )
    assert pending.refusal == "Kueue has not admitted the workload (Workload jobset-llama-1a2b3)"
    assert read("JobSet", owner, jobset=owner).admission is None, "no Workload: not queued by Kueue"


def test_a_disruption_ignore_rule_counts_only_when_no_exit_code_rule_comes_first() -> None:
    ignore = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    exit_first = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [137]}}
    assert ignores_disruption({"rules": [ignore]})
    assert not ignores_disruption({"rules": [exit_first, ignore]})
    assert not ignores_disruption({"rules": [{**ignore, "action": "Count"}]})
    assert not ignores_disruption(None)


def test_a_dead_nodes_pod_already_terminating_is_replaced_too_when_asked() -> None:
    stuck = job_pod("llama-0", "gpu-a", deleting=True)
    got = read("Job", job(), pods=(stuck, job_pod("llama-1", "gpu-b")))
    assert got.replacements("gpu-a") == []
    assert [r.pod for r in got.replacements("gpu-a", terminating=True)] == ["llama-0"]


def test_the_hook_for_a_launcher_exit_that_restarts_the_jobset_through_its_failure_policy() -> None:
    """Not acted on yet (the launcher exits with the code): what a JobSet must say for the exit to restart
    it, read from the JobSet alone."""
    fail_on_86 = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [86]}}, IGNORE]}
    owner = jobset(max_restarts=3)
    owner["spec"]["replicatedJobs"] = [
        {"name": "node", "template": {"spec": {"podFailurePolicy": fail_on_86}}}
    ]
    assert launcher_restart(owner) == "", "no rule: RestartJobSet, the default"
    owner["spec"]["failurePolicy"]["rules"] = [
        {"name": "restart-on-86", "action": "RestartJobSet", "onJobFailureReasons": ["PodFailurePolicy"],
         "onJobFailureMessagePatterns": ["exit code 86"]}]  # fmt: skip
    assert launcher_restart(owner) == ""
    owner["spec"]["failurePolicy"]["rules"].insert(0, {"name": "stop", "action": "FailJobSet",
                                                       "onJobFailureReasons": ["PodFailurePolicy"]})  # fmt: skip
    assert launcher_restart(owner) == "the JobSet's failure-policy rule stop FailJobSets on it"
    owner["spec"]["failurePolicy"] = {"maxRestarts": 0}
    assert launcher_restart(owner) == NO_JOBSET_RESTARTS
    owner["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"] = {"rules": [IGNORE]}
    assert launcher_restart(owner).startswith("replicated Job node has no podFailurePolicy rule FailJob")


IGNORE = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
