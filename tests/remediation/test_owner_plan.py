"""Plans through the workload's owner (plan.py with ClusterState.workload, resolved by kube/workloads.py):
a JobSet's node fault replaces only the faulty node's pod, an owner that allows no restart or cannot be
resolved turns the restart into a notice while the node is still isolated, and the restart budget is
the smaller of trainguard's and the owner's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.conftest import monitor as make_monitor
from tests.kube.owners import NS, child_job, job, job_pod, jobset, jobset_pod, pod, pytorchjob
from tests.remediation.test_plan import JOB_NODES, T0, finished, kinds, signal, state
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.alerts import TRAINING_INTERRUPTED
from trainguard.kube.workloads import OwnerRead, Workload, resolve
from trainguard.remediation.model import ClusterState, StepKind
from trainguard.remediation.plan import plan, quiet
from trainguard.remediation.records import new_record

CONFIRM_FAULT, CORDON, TAINT, CKPT = (StepKind.CONFIRM_FAULT, StepKind.CORDON, StepKind.TAINT,
                                      StepKind.REQUEST_CHECKPOINT)  # fmt: skip
RESTART, REPLACE, CONFIRM, NOTIFY = (StepKind.RESTART_GANG, StepKind.REPLACE_POD, StepKind.CONFIRM_PLACEMENT,
                                     StepKind.NOTIFY)  # fmt: skip
REJOIN = StepKind.RESTART_IN_PLACE


def on(kind: str, name: str = "llama", **remediation: Any) -> TrainingJobMonitor:
    return make_monitor(**{"spec.workloadRef": {"kind": kind, "name": name}, "spec.remediation": remediation})


def owned_by(workload: Workload, **kw: Any) -> ClusterState:
    return replace(state(**kw), workload=workload)


def a_jobset(**kw: Any) -> Workload:
    """A JobSet of two child Jobs of parallelism 1, one pod each on gpu-a and gpu-b."""
    children = tuple(child_job(index=i, **kw.pop("child", {})) for i in (0, 1))
    pods = (jobset_pod(children[0], node="gpu-a"), jobset_pod(children[1], node="gpu-b"))
    owner = jobset(**kw)
    return resolve(OwnerRead("JobSet", "llama", NS, "jobset.x-k8s.io/v1alpha2", owner=owner, jobset=owner,
                             jobs=children, pods=pods))  # fmt: skip


def notice(p: Any) -> str:
    return str(next(s.params["reason"] for s in p.steps if s.kind == NOTIFY))


def test_a_jobsets_node_fault_replaces_only_the_faulty_nodes_pod() -> None:
    p = plan(signal("GPUCriticalXid"), on("JobSet"), owned_by(a_jobset()))
    assert kinds(p) == (CONFIRM_FAULT, CORDON, TAINT, CKPT, REPLACE, REJOIN, CONFIRM)
    assert p.steps[4].params == {"from": "newest-good-checkpoint", "node": "gpu-a", "attempt": "0"}
    assert p.steps[5].params == {"from": "newest-good-checkpoint", "rejoin": "gpu-a", "attempt": "0"}, (
        "the healthy ranks restart in place, and the replacement joins them"
    )
    down = plan(signal("GPUNodeDown", gpu=""), on("JobSet"), owned_by(a_jobset()))
    assert kinds(down) == (CORDON, TAINT, CKPT, REPLACE, REJOIN, CONFIRM)
    assert down.steps[3].params["nodeDown"] == "true", "a node judged down: force its pod off"


def test_a_rank_whose_child_job_holds_other_ranks_is_restarted_with_the_gang_through_the_jobset() -> None:
    """A TrainJob's nodes are the pods of one child Job: only that Job could recreate the faulty pod,
    after its back-off and once the old pod is terminal. The JobSet's gang restart instead (its child
    Jobs recreated at once, nothing counted), with no in-place step."""
    shared = child_job(parallelism=2, ignore_disruption=True, backoff=6)
    pods = (jobset_pod(shared, 0, node="gpu-a"), jobset_pod(shared, 1, node="gpu-b"))
    owner = jobset()
    trainjob = resolve(OwnerRead("TrainJob", "llama", NS, "trainer.kubeflow.org/v1alpha1", owner=owner,
                                 jobset=owner, jobs=(shared,), pods=pods))  # fmt: skip
    p = plan(signal("GPUCriticalXid"), on("TrainJob"), owned_by(trainjob))
    assert kinds(p) == (CONFIRM_FAULT, CORDON, TAINT, CKPT, RESTART, CONFIRM)
    assert p.steps[4].params == {"from": "newest-good-checkpoint", "avoid": "gpu-a", "attempt": "0"}


def test_a_trainjobs_node_fault_replaces_one_pod_and_a_jobs_restarts_the_gang() -> None:
    assert REPLACE in kinds(plan(signal("GPUCriticalXid"), on("TrainJob"), owned_by(a_jobset())))
    job_owner = resolve(OwnerRead("Job", "llama", NS, "batch/v1", owner=job(),
                                  pods=(job_pod("llama-0", "gpu-a"), job_pod("llama-1", "gpu-b"))))  # fmt: skip
    assert kinds(plan(signal("GPUCriticalXid"), on("Job"), owned_by(job_owner)))[-2:] == (RESTART, CONFIRM)


def test_a_pytorchjobs_node_fault_replaces_only_the_faulty_nodes_pod() -> None:
    """The training-operator recreates the removed pod under its name at once and counts no failure against
    runPolicy.backoffLimit (e2e/test_training_controllers.py), so only that pod goes."""
    label = {"training.kubeflow.org/job-name": "llama"}
    pods = (
        pod("llama-master-0", "gpu-a", labels=label, owner="pt-uid"),
        pod("llama-worker-0", "gpu-b", labels=label, owner="pt-uid"),
    )
    owner = resolve(
        OwnerRead("PyTorchJob", "llama", NS, "kubeflow.org/v1", owner=pytorchjob(backoff=3), pods=pods)
    )
    p = plan(signal("GPUCriticalXid"), on("PyTorchJob"), owned_by(owner))
    assert kinds(p) == (CONFIRM_FAULT, CORDON, TAINT, CKPT, REPLACE, REJOIN, CONFIRM)
    assert p.steps[4].params == {"from": "newest-good-checkpoint", "node": "gpu-a"}
    assert p.steps[5].params == {"from": "newest-good-checkpoint", "rejoin": "gpu-a"}
    down = plan(signal("GPUNodeDown", gpu=""), on("PyTorchJob"), owned_by(owner))
    assert kinds(down) == (CORDON, TAINT, CKPT, REPLACE, REJOIN, CONFIRM)
    assert down.steps[3].params["nodeDown"] == "true"
    assert not owner.marks_failed, "its pod is only force-deleted: a Failed one is a failure to the operator"
    stalled = plan(signal(TRAINING_INTERRUPTED, gpu=""), on("PyTorchJob"), owned_by(owner))
    assert kinds(stalled) == (REJOIN, RESTART, CONFIRM), "no node fault: the gang, in place first"


def test_a_jobset_that_allows_no_restart_gets_a_notice_and_its_node_is_still_isolated() -> None:
    for owner in (a_jobset(max_restarts=None), a_jobset(max_restarts=0)):
        fault = plan(signal("GPUCriticalXid"), on("JobSet"), owned_by(owner))
        assert kinds(fault) == (CONFIRM_FAULT, CORDON, TAINT, CKPT, NOTIFY)
        assert notice(fault) == (
            "the owner allows no restart: the JobSet allows no restarts (spec.failurePolicy.maxRestarts)"
        )
        stalled = plan(signal(TRAINING_INTERRUPTED, gpu=""), on("JobSet"), owned_by(owner))
        assert kinds(stalled) == (NOTIFY,) and stalled.skipped == notice(stalled)
        assert not quiet(stalled), "recorded: people see why nothing was restarted"


def test_an_unresolved_workload_turns_every_restart_into_a_notice_naming_the_field() -> None:
    missing = resolve(OwnerRead("JobSet", "llama", NS, "jobset.x-k8s.io/v1alpha2"))
    fault = plan(signal("GPUNodeDown", gpu=""), on("JobSet"), owned_by(missing))
    assert kinds(fault) == (CORDON, TAINT, CKPT, NOTIFY)
    assert notice(fault) == (
        "workload unresolved: spec.workloadRef: JobSet ml/llama not found: create it, or fix "
        "spec.workloadRef.name; nothing is restarted"
    )
    unserved = resolve(OwnerRead("TrainJob", "llama", NS, "trainer.kubeflow.org/v1alpha1", served=False))
    interrupted = plan(signal(TRAINING_INTERRUPTED, gpu=""), on("TrainJob"), owned_by(unserved))
    assert kinds(interrupted) == (
        NOTIFY,
    ) and "TrainJob (trainer.kubeflow.org/v1alpha1) is not served" in notice(interrupted)


def test_a_replacement_that_would_fail_the_jobset_is_a_notice() -> None:
    strict = child_job(parallelism=2, backoff=0)
    pods = (jobset_pod(strict, 0, "gpu-a"), jobset_pod(strict, 1, "gpu-b"))
    owner = jobset()
    workload = resolve(OwnerRead("JobSet", "llama", NS, "jobset.x-k8s.io/v1alpha2", owner=owner, jobset=owner,
                                 jobs=(strict,), pods=pods))  # fmt: skip
    p = plan(signal("GPUCriticalXid"), on("JobSet"), owned_by(workload))
    assert kinds(p) == (CONFIRM_FAULT, CORDON, TAINT, CKPT, NOTIFY)
    assert "removing pod llama-node-0-0 would fail Job llama-node-0 and so JobSet llama" in notice(p)


def test_the_budget_is_the_smaller_of_trainguards_and_the_owners() -> None:
    pods = (job_pod("llama-0", "gpu-a"), job_pod("llama-1", "gpu-b"))
    spent = resolve(OwnerRead("Job", "llama", NS, "batch/v1", owner=job(backoff=6, failed=5), pods=pods))
    p = plan(signal(TRAINING_INTERRUPTED, gpu=""), on("Job", jobRestartBudget=5), owned_by(spent))
    assert kinds(p) == (NOTIFY,) and notice(p).startswith(
        "the owner allows no restart: the Job has no restart left"
    )
    # the owner has plenty; trainguard's own budget, which a pod's replacement spends too, does not
    earlier = finished(
        new_record(plan(signal("GPUCriticalXid"), on("JobSet"), owned_by(a_jobset())), T0 - 60), T0 - 50
    )
    again = plan(signal(TRAINING_INTERRUPTED, gpu="", starts_at=T0 + 700), on("JobSet", jobRestartBudget=1),
                 owned_by(a_jobset(max_restarts=10), records=[earlier], now=T0 + 800))  # fmt: skip
    assert kinds(again) == (NOTIFY,) and again.skipped.startswith("restart budget spent: 1 restart(s)")


def test_an_interruption_of_the_pod_being_replaced_is_the_same_restart() -> None:
    """ReplacePod marks a dead node's pod Failed before deleting it: the detection may see that failure."""
    under_way = new_record(plan(signal("GPUNodeDown", gpu=""), on("JobSet"), owned_by(a_jobset())), T0)
    p = plan(signal(TRAINING_INTERRUPTED, gpu="", starts_at=T0 + 2, pod="llama-node-0-0"), on("JobSet"),
             owned_by(a_jobset(), records=[under_way], job_nodes=JOB_NODES))  # fmt: skip
    assert p.skipped.startswith("duplicate of ") and quiet(p)


def test_a_kueue_eviction_turns_the_restart_into_a_notice() -> None:
    owner = a_jobset()
    evicted = replace(
        owner,
        refusal="Kueue evicted the workload (Workload w, Preempted): it is requeued",
    )
    p = plan(signal("GPUCriticalXid"), on("JobSet"), owned_by(evicted))
    assert kinds(p)[-1] == NOTIFY and "Kueue evicted the workload" in notice(p)
