"""Restarts through the owner, carried out (executor.py on tests/remediation/fakes.py's FakeCluster, whose
`as_jobset` makes the gang a JobSet's): ReplacePod replaces only the faulty node's pod (its child Job
first, then the pod, evicted off a live node or failed and force-deleted off a dead one), a redo after a
crash never touches the replacements, and a JobSet's gang restart deletes its child Jobs."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from tests.clock import T0
from tests.remediation.fakes import (
    CKPT_STEP,
    CKPT_TS,
    Crash,
    Rig,
    job_monitor,
    kinds_and_phases,
    p0_signal,
    step_done,
)
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.alerts import TRAINING_INTERRUPTED
from trainguard.catalog.events import fingerprint
from trainguard.kube.workloads import NO_JOBSET_RESTARTS, Workload
from trainguard.remediation.model import ClusterState, Phase, Signal, Source, StepKind
from trainguard.remediation.plan import plan
from trainguard.remediation.records import new_record


def jobset_monitor() -> TrainingJobMonitor:
    return job_monitor(**{"spec.workloadRef": {"kind": "JobSet", "name": "llama-pretrain"},
                          "spec.remediation": {"emergencyCheckpointTimeout": "2s"}})  # fmt: skip


def planned(rig: Rig, monitor: TrainingJobMonitor, signal: Signal) -> dict[str, Any]:
    """The planner's own plan on the fake's owner (a seam: its params are what the executor reads)."""
    state = ClusterState(now=T0, gpu_nodes=3, job_nodes=frozenset({"gpu-a", "gpu-b"}),
                         unready_nodes=frozenset({"gpu-a"}), workload=rig.cluster.workload("ml", None, None))  # fmt: skip
    return new_record(plan(signal, monitor, state), T0)


def effects(rig: Rig) -> list[tuple[str, ...]]:
    """What changed in the cluster's objects (not the sidecars' checkpoints, not annotations)."""
    kept = ("cordon", "taint", "delete", "delete-job", "evict", "fail", "force-delete")
    return [e for e in rig.cluster.effects if e[0] in kept]


def step(record: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(s for s in record["steps"] if s["kind"] == kind)


def test_a_gpu_fault_evicts_only_the_faulty_nodes_pod_after_deleting_its_child_job() -> None:
    rig = Rig()
    rig.cluster.as_jobset()
    monitor = jobset_monitor()
    done = rig.run(planned(rig, monitor, p0_signal("GPUCriticalXid")), monitor)
    assert done["phase"] == Phase.SUCCEEDED, done
    assert kinds_and_phases(done)[-3:] == [
        ("ReplacePod", Phase.SUCCEEDED),
        ("RestartInPlace", Phase.SKIPPED),  # no launcher: the JobSet's own policy restarts the rest
        ("ConfirmPlacement", Phase.SUCCEEDED),
    ]
    assert effects(rig) == [("cordon", "gpu-a"), ("taint", "gpu-a"), ("delete-job", "llama-pretrain-node-0")]
    assert "job-1" in rig.cluster.pods and not rig.cluster.pods["job-1"]["terminating"], (
        "the healthy rank untouched"
    )
    replaced = step(done, "ReplacePod")
    assert replaced["progress"] == {
        "count": 1,
        "uids": "job-0/job-0/llama-pretrain-node-0/llama-pretrain-node-0-uid",
        # what the webhook gives the replacement (no rejoin here: no generation)
        "resumeFrom": json.dumps(
            {"kind": "full", "path": f"/ckpt/{CKPT_STEP}", "step": CKPT_STEP, "ts": CKPT_TS}, sort_keys=True
        ),
    }
    assert "deleted child Job llama-pretrain-node-0" in replaced["detail"]
    assert "the JobSet recreates its child Job at once" in replaced["detail"]
    placed = step(done, "ConfirmPlacement")["detail"]
    assert placed.startswith("placed job-0-r1->gpu-c"), placed
    assert ("annotate", "JobSet", "llama-pretrain") in rig.cluster.effects, (
        "resume-from for the new pod's sidecar"
    )


def test_a_dead_nodes_pod_is_failed_with_disruption_target_and_force_deleted() -> None:
    rig = Rig()
    rig.cluster.as_jobset()
    monitor = jobset_monitor()
    done = rig.run(planned(rig, monitor, p0_signal("GPUNodeDown")), monitor)
    assert done["phase"] == Phase.SUCCEEDED, done
    assert effects(rig) == [
        ("cordon", "gpu-a"),
        ("taint", "gpu-a"),
        ("delete-job", "llama-pretrain-node-0"),
        ("fail", "job-0"),
        ("force-delete", "job-0"),
    ]


def test_a_rank_whose_child_job_holds_another_is_restarted_with_the_gang_through_the_jobset() -> None:
    """One child Job holds both ranks (a TrainJob's nodes): not replaced alone (its Job would recreate
    the index after its back-off, once the pod is terminal); the JobSet's gang restart, counting nothing."""
    rig = Rig()
    rig.cluster.as_jobset(parallelism=2)
    monitor = jobset_monitor()
    done = rig.run(planned(rig, monitor, p0_signal("GPUNodeDown")), monitor)
    assert done["phase"] == Phase.SUCCEEDED, done
    assert [k for k, _ in kinds_and_phases(done)][-2:] == ["RestartGang", "ConfirmPlacement"]
    assert rig.cluster.jobs_deleted == ["llama-pretrain-node-0"], (
        "the shared child Job, recreated by the JobSet"
    )


def test_a_pytorchjobs_pod_on_a_dead_node_is_force_deleted_without_being_marked_failed() -> None:
    """The training-operator counts a Running pod turned Failed as a new failure against backoffLimit, and
    recreates a deleted one at once, counting nothing (e2e/test_training_controllers.py)."""
    rig = Rig()
    rig.cluster.owner_ref = ("PyTorchJob", "llama-pretrain")
    rig.cluster.owner = Workload("PyTorchJob", "llama-pretrain", budget_left=2)
    monitor = job_monitor(**{"spec.workloadRef": {"kind": "PyTorchJob", "name": "llama-pretrain"},
                             "spec.remediation": {"emergencyCheckpointTimeout": "2s"}})  # fmt: skip
    done = rig.run(planned(rig, monitor, p0_signal("GPUNodeDown")), monitor)
    assert done["phase"] == Phase.SUCCEEDED, done
    assert effects(rig) == [("cordon", "gpu-a"), ("taint", "gpu-a"), ("force-delete", "job-0")]
    assert "the training-operator recreates it at once" in step(done, "ReplacePod")["detail"]
    assert not rig.cluster.pods["job-1"]["terminating"], "the healthy rank untouched"


def test_a_pod_disruption_budget_that_refuses_the_eviction_fails_the_step_and_says_so() -> None:
    """A PyTorchJob's pod (no child Job to delete first): the refused eviction leaves it where it is."""
    rig = Rig()
    rig.cluster.owner_ref = ("PyTorchJob", "llama-pretrain")
    rig.cluster.owner = Workload("PyTorchJob", "llama-pretrain", budget_left=2)
    rig.cluster.pdb_blocks.add("job-0")
    monitor = job_monitor(**{"spec.workloadRef": {"kind": "PyTorchJob", "name": "llama-pretrain"},
                             "spec.remediation": {"emergencyCheckpointTimeout": "2s"}})  # fmt: skip
    done = rig.run(planned(rig, monitor, p0_signal("GPUCriticalXid")), monitor)
    assert done["phase"] == Phase.FAILED
    assert "a PodDisruptionBudget" in step(done, "ReplacePod")["detail"]
    assert step(done, "ConfirmPlacement")["phase"] == Phase.PLANNED, "nothing after a failed step"


def test_a_redo_after_a_crash_acts_on_the_pods_it_named_never_on_their_replacements() -> None:
    rig = Rig()
    rig.cluster.as_jobset()
    monitor = jobset_monitor()
    record = planned(rig, monitor, p0_signal("GPUCriticalXid"))
    real = rig.cluster.delete_child_job

    def then_killed(*args: Any) -> bool:
        real(*args)
        raise Crash("killed right after deleting the child Job")

    rig.cluster.delete_child_job = then_killed  # type: ignore[method-assign]
    with pytest.raises(Crash):
        rig.run(record, monitor)
    rig.cluster.delete_child_job = real  # type: ignore[method-assign]
    left = rig.store.last
    assert step(left, "ReplacePod")["phase"] == Phase.IN_PROGRESS
    assert rig.cluster.owner.children[0].uid != "llama-pretrain-node-0-uid", "the JobSet recreated it"
    done = rig.executor().run(left, monitor)
    assert done["phase"] == Phase.SUCCEEDED, done
    assert rig.cluster.jobs_deleted == ["llama-pretrain-node-0"], "the recreated child Job is left alone"
    assert [e for e in effects(rig) if e[0] in ("evict", "delete-job")] == [
        ("delete-job", "llama-pretrain-node-0")
    ]


def test_an_owner_that_stopped_allowing_restarts_fails_the_step() -> None:
    rig = Rig()
    rig.cluster.as_jobset()
    monitor = jobset_monitor()
    record = planned(rig, monitor, p0_signal("GPUCriticalXid"))
    rig.cluster.owner = rig.cluster.owner.__class__(
        **{**rig.cluster.owner.__dict__, "refusal": NO_JOBSET_RESTARTS}
    )
    done = rig.run(record, monitor)
    assert done["phase"] == Phase.FAILED
    assert step(done, "ReplacePod")["detail"] == f"{NO_JOBSET_RESTARTS}; nothing is restarted"
    assert rig.cluster.jobs_deleted == []


def test_a_jobsets_gang_restart_deletes_its_child_jobs_and_the_jobset_recreates_them() -> None:
    rig = Rig()
    rig.cluster.as_jobset()
    monitor = jobset_monitor()
    labels = {
        "alertname": TRAINING_INTERRUPTED,
        "severity": "P0",
        "namespace": "ml",
        "training_job": "llama-pretrain",
    }
    signal = Signal(TRAINING_INTERRUPTED, "P0", labels, fingerprint(labels), Source.OPERATOR, T0 - 5)
    done = rig.run(planned(rig, monitor, signal), monitor)
    assert done["phase"] == Phase.SUCCEEDED, done
    assert [(s["kind"], s["phase"]) for s in done["steps"]] == [
        (StepKind.RESTART_IN_PLACE, Phase.SKIPPED),  # no trainguard launch in these pods
        (StepKind.RESTART_GANG, Phase.SUCCEEDED),
        (StepKind.CONFIRM_PLACEMENT, Phase.SUCCEEDED),
    ]
    assert rig.cluster.jobs_deleted == ["llama-pretrain-node-0", "llama-pretrain-node-1"]
    assert not any(e[0] == "delete" for e in rig.cluster.effects), "no pod deleted behind the JobSet's back"
    restart = step(done, StepKind.RESTART_GANG)
    assert restart["progress"]["count"] == 2
    assert "of restart attempt 0: the JobSet recreates them (2 pod(s))" in restart["detail"]


def test_a_jobset_that_restarted_the_gang_itself_meanwhile_is_left_to_it() -> None:
    """The same fault failed a child Job and the JobSet's own failure policy restarted the gang (attempt 1)
    after the plan saw attempt 0: its new pods are the replacement; nothing is deleted again."""
    rig = Rig()
    rig.cluster.as_jobset()
    monitor = jobset_monitor()
    record = planned(rig, monitor, p0_signal("GPUCriticalXid"))
    assert step(record, "ReplacePod")["params"]["attempt"] == "0"
    rig.cluster.owner = replace(rig.cluster.owner, attempt=1)
    done = rig.run(record, monitor)
    assert step(done, "ReplacePod")["detail"].startswith(
        "the JobSet llama-pretrain restarted the gang itself (restart attempt 1, planned at 0)"
    )
    assert rig.cluster.jobs_deleted == [] and not [e for e in effects(rig) if e[0] in ("evict", "fail")]


def test_a_jobset_that_restarted_the_gang_itself_meanwhile_is_named_in_the_placement() -> None:
    """A pod of the replacement failed (one Kueue's TAS ungated onto the old node and then terminated)
    and the JobSet's failure policy restarted every pod: the record says so, not just "placed"."""
    rig = Rig()
    rig.cluster.as_jobset()
    monitor = jobset_monitor()
    rig.store.when(
        step_done("ReplacePod"),
        lambda _: setattr(rig.cluster, "owner", replace(rig.cluster.owner, attempt=1)),
    )
    done = rig.run(planned(rig, monitor, p0_signal("GPUCriticalXid")), monitor)
    assert done["phase"] == Phase.SUCCEEDED, done
    assert (
        "; the JobSet restarted the gang itself meanwhile (restart attempt 1, planned at 0), counted against"
        " its maxRestarts" in step(done, "ConfirmPlacement")["detail"]
    )
