"""The executor carries a record out against tests/remediation/fakes.py's FakeCluster, which behaves like
the real cluster and sidecars (its docstring says how): the order of steps and saves, a resume after a
crash at any call, dry runs, failures, pins and the resume-from pointer."""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

import pytest

from tests.clock import T0
from tests.conftest import monitor as make_monitor
from tests.remediation.fakes import (
    CKPT_STEP,
    CKPT_TS,
    PORT,
    TOKEN,
    Crash,
    Rig,
    job_monitor,
    kinds_and_phases,
    p0_signal,
    sign,
    step_done,
)
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.kubernetes import CORDON_REASON, CORDONED_BY, FAULTY_TAINT, RESUME_FROM
from trainguard.exporter.checkpoints import checkpoint_ref
from trainguard.remediation import records
from trainguard.remediation.executor import STOPPING, STUCK_MIN_S, choose_checkpoint, gang_checkpoint
from trainguard.remediation.model import ClusterState, Phase, Plan, Step, StepKind
from trainguard.remediation.plan import plan
from trainguard.remediation.records import new_record


def node_fault_record(monitor: TrainingJobMonitor, timeout_s: int = 30) -> dict[str, Any]:
    """The planner's own node-fault plan (a seam: its params are what the executor reads)."""
    p = plan(
        p0_signal("GPUCriticalXid"),
        monitor,
        ClusterState(now=T0, gpu_nodes=3, job_nodes=frozenset({"gpu-a", "gpu-b"})),
    )
    steps = tuple(
        Step(s.kind, {**s.params, "timeout_s": str(timeout_s)})
        if s.kind == StepKind.REQUEST_CHECKPOINT
        else s
        for s in p.steps
    )
    return new_record(Plan(**{**p.__dict__, "steps": steps}), T0)


def record_of(*steps: Step, dry_run: bool = False, node: str = "") -> dict[str, Any]:
    return new_record(Plan("rec-1", "fp", "X", "nodeFault", steps, node=node, dry_run=dry_run), T0)


# ---- the node fault, in order -----------------------------------------------------------------------


def test_node_fault_runs_confirm_cordon_taint_checkpoint_restart_placement_in_order() -> None:
    rig = Rig()
    m = job_monitor()
    done = rig.run(node_fault_record(m), m)

    assert done["phase"] == Phase.SUCCEEDED
    assert [k for k, _ in kinds_and_phases(done)] == [
        "ConfirmFault", "Cordon", "Taint", "RequestCheckpoint", "RestartGang", "ConfirmPlacement",
    ]  # fmt: skip
    assert all(p == Phase.SUCCEEDED for _, p in kinds_and_phases(done))
    effects = [e[0] for e in rig.cluster.effects]
    assert effects == [
        "cordon", "taint",  # first: no new pod lands on the faulty node while the checkpoint is taken
        "checkpoint-request", "checkpoint-saved",  # the healthy rank on gpu-b only
        "annotate", "delete", "delete", "unannotate",
    ]  # fmt: skip
    assert rig.cluster.effects[2] == ("checkpoint-request", "job-1"), (
        "the rank on the faulty node is not asked"
    )
    detail = {s["kind"]: s["detail"] for s in done["steps"]}
    assert detail["ConfirmFault"] == "confirmed by the sidecar of job-0 on gpu-a: it saw GPUCriticalXid"
    assert detail["RequestCheckpoint"] == f"checkpoint step {CKPT_STEP + 100} saved on job-1"
    node = rig.cluster.nodes["gpu-a"]
    assert node["unschedulable"] and node["annotations"][CORDONED_BY] == done["id"]
    assert node["annotations"][CORDON_REASON] == "GPUCriticalXid"
    assert node["taints"] == [{"key": FAULTY_TAINT, "value": "GPUCriticalXid", "effect": "NoSchedule"}]
    # the pointer is the newest checkpoint every rank has, the faulty node's rank included (its
    # replacement loads its shard), with its kind and time: not the emergency one only job-1 saved
    pointer = json.loads(str(rig.cluster.annotations_written[0][RESUME_FROM]))
    assert pointer == {"step": 1000, "kind": "full", "path": "/ckpt/1000", "ts": pointer["ts"]}
    assert pointer["ts"] < T0
    assert detail["RestartGang"].startswith("deleted 2 pod(s): job-0, job-1; resume-from step 1000 on Job/")
    assert "step 1100 is not on every rank" in detail["RestartGang"]
    # the new sidecars were created holding it; the replacements landed on the healthy nodes
    assert [s["resume_from"] for s in rig.cluster.sidecar.values()] == [checkpoint_ref(pointer)] * 2
    assert all(s["pinned"] for s in rig.cluster.sidecar.values())
    assert detail["ConfirmPlacement"] == (
        "placed job-0-r1->gpu-b, job-1-r2->gpu-c; resume-from cleared on Job/llama-pretrain"
    )


def test_records_are_saved_before_each_action() -> None:
    rig = Rig()
    m = job_monitor()
    rig.run(node_fault_record(m), m)

    saves = [t[1:] for t in rig.timeline if t[0] == "save"]
    assert saves == [
        (),  # the claim: this executor's owner written before any step
        ("ConfirmFault", "InProgress"),
        ("ConfirmFault", "Succeeded"),
        ("Cordon", "InProgress"),
        ("Cordon", "Succeeded"),
        ("Taint", "InProgress"),
        ("Taint", "Succeeded"),
        ("RequestCheckpoint", "InProgress"),
        ("RequestCheckpoint", "InProgress"),  # "asking ... past step 1000", before asking
        ("RequestCheckpoint", "Succeeded"),
        ("RestartGang", "InProgress"),
        ("RestartGang", "InProgress"),  # "deleting 2 pod(s) created up to ...", before deleting
        ("RestartGang", "Succeeded"),
        ("ConfirmPlacement", "InProgress"),
        ("ConfirmPlacement", "Succeeded"),
    ]
    owner = {"checkpoint-request": "RequestCheckpoint", "cordon": "Cordon", "taint": "Taint"}
    owner |= {"annotate": "RestartGang", "delete": "RestartGang"}
    for i, event in enumerate(rig.timeline):
        if event[0] in owner:
            last_save = next(t for t in reversed(rig.timeline[:i]) if t[0] == "save")
            assert last_save[1:] == (owner[event[0]], "InProgress"), f"{event} acted before its record"
    assert rig.store.saved[0]["owner"] == rig.store.saved[-1]["owner"] != ""
    assert rig.store.saved[11]["steps"][4]["detail"].startswith("deleting 2 pod(s) created up to ")


# ---- a crash anywhere, then a new operator ------------------------------------------------------------


def _clean_run() -> tuple[list[tuple[str, ...]], int]:
    rig = Rig()
    m = job_monitor()
    rig.run(node_fault_record(m), m)
    return rig.cluster.effects, rig.cluster.calls


CLEAN_EFFECTS, CLEAN_CALLS = _clean_run()


@pytest.mark.parametrize("crash_after", range(1, CLEAN_CALLS + 1))
def test_an_operator_killed_after_any_call_resumes_and_every_effect_happens_once(crash_after: int) -> None:
    rig = Rig()
    m = job_monitor()
    rig.cluster.crash_after = crash_after
    with pytest.raises(Crash):
        rig.run(node_fault_record(m), m)
    rig.cluster.crash_after = None
    assert rig.store.saved, "the record is saved before the first call"

    done = rig.run(rig.store.last, m)  # a new operator, from the record in the status

    assert done["phase"] == Phase.SUCCEEDED, done
    assert rig.cluster.effects == CLEAN_EFFECTS


def test_a_resumed_restart_does_not_delete_the_replacements() -> None:
    rig = Rig()
    m = job_monitor()
    record = node_fault_record(m)
    calls_before_delete = next(
        n for n in range(1, CLEAN_CALLS + 1) if _effects_after(n)[-1:] == [("delete", "job-1")]
    )
    rig.cluster.crash_after = calls_before_delete
    with pytest.raises(Crash):
        rig.run(record, m)
    rig.cluster.crash_after = None
    interrupted = rig.store.last
    assert interrupted["steps"][4]["phase"] == Phase.IN_PROGRESS
    done = rig.run(interrupted, m)
    assert [e for e in rig.cluster.effects if e[0] == "delete"] == [("delete", "job-0"), ("delete", "job-1")]
    assert done["steps"][4]["detail"].startswith("deleted the gang's pods created up to ")
    assert done["steps"][4]["detail"].endswith("; 2 new pod(s) awaited")
    assert "(0 of them after the operator restarted)" in done["steps"][4]["detail"]
    assert done["steps"][4]["progress"]["count"] == 2


def _reworded(record: dict[str, Any]) -> dict[str, Any]:
    """The record with every step's detail and the record's message in other words: what a new version of
    the operator would find in the status after its messages changed."""
    out = copy.deepcopy(record)
    for step in out["steps"]:
        step["detail"] = f"(reworded) {step['kind']} was at {step['phase']}" if step["detail"] else ""
    out["message"] = "(reworded)" if out.get("message") else ""
    return out


@pytest.mark.parametrize("crash_after", range(1, CLEAN_CALLS + 1))
def test_a_resume_reads_the_progress_fields_not_the_messages(crash_after: int) -> None:
    """Killed after any call, then resumed by an operator whose every message reads differently: every
    effect still happens once (the replacements are not deleted, the checkpoint mark is the same, the
    new gang's size is the old one's), because the redo reads the steps' progress fields."""
    rig = Rig()
    m = job_monitor()
    rig.cluster.crash_after = crash_after
    with pytest.raises(Crash):
        rig.run(node_fault_record(m), m)
    rig.cluster.crash_after = None

    done = rig.run(_reworded(rig.store.last), m)

    assert done["phase"] == Phase.SUCCEEDED, done
    assert rig.cluster.effects == CLEAN_EFFECTS
    restart = next(s for s in done["steps"] if s["kind"] == "RestartGang")
    assert restart["progress"]["count"] == 2 and restart["progress"]["createdUpTo"] > 0
    ask = next(s for s in done["steps"] if s["kind"] == "RequestCheckpoint")
    assert ask["progress"] == {"asked": 1, "pastStep": 1000}, ask  # the one rank off the faulty node


def _effects_after(calls: int) -> list[tuple[str, ...]]:
    rig = Rig()
    m = job_monitor()
    rig.cluster.crash_after = calls
    with contextlib.suppress(Crash):
        rig.run(node_fault_record(m), m)
    return rig.cluster.effects


# ---- dry run, failures, timeouts -----------------------------------------------------------------------


def test_dry_run_says_what_it_would_do_and_calls_nothing() -> None:
    rig = Rig()
    m = job_monitor()
    p = plan(
        p0_signal("GPUCriticalXid"),
        job_monitor(**{"spec.remediation": {"dryRun": True}}),
        ClusterState(T0, 3, job_nodes=frozenset({"gpu-a", "gpu-b"})),
    )
    record = new_record(p, T0)

    done = rig.run(record, m)

    assert rig.cluster.calls == 0 and rig.cluster.effects == []
    assert done["phase"] == Phase.DRY_RUN
    assert all(s["phase"] == Phase.DRY_RUN for s in done["steps"])
    details = [s["detail"] for s in done["steps"]]
    assert (
        details[0] == "would ask the sidecars of app=llama-pretrain on node gpu-a to confirm GPUCriticalXid"
    )
    assert details[1] == "would cordon node gpu-a (GPUCriticalXid)"
    assert details[2] == f"would taint node gpu-a {FAULTY_TAINT}=GPUCriticalXid:NoSchedule"
    assert details[3].startswith("would ask the sidecars not on gpu-a for a full checkpoint")
    assert details[4].startswith("would delete the pods of app=llama-pretrain")
    pin = record_of(Step(StepKind.PIN_CHECKPOINT, {"before_ts": repr(T0)}), dry_run=True)
    assert rig.run(pin, m)["steps"][0]["detail"] == (
        "would pin the newest checkpoint saved before 2023-11-14T22:13:20.000Z"
    )
    assert rig.run(done, m) == done, "recorded once"
    assert rig.cluster.calls == 0 and len(rig.store.saved) == 2


def test_a_failing_step_is_recorded_failed_and_nothing_after_it_runs() -> None:
    rig = Rig()
    m = job_monitor()
    record = node_fault_record(m)
    boom = rig.cluster.taint

    def refused(node: str, reason: str) -> str:
        raise RuntimeError('nodes "gpu-a" is forbidden')

    rig.cluster.taint = refused  # type: ignore[method-assign]
    done = rig.run(record, m)
    rig.cluster.taint = boom  # type: ignore[method-assign]

    assert kinds_and_phases(done) == [
        ("ConfirmFault", "Succeeded"),
        ("Cordon", "Succeeded"),
        ("Taint", "Failed"),
        ("RequestCheckpoint", "Planned"),
        ("RestartGang", "Planned"),
        ("ConfirmPlacement", "Planned"),
    ]
    assert done["phase"] == Phase.FAILED
    assert done["steps"][2]["detail"] == 'RuntimeError: nodes "gpu-a" is forbidden'
    assert [e[0] for e in rig.cluster.effects] == ["cordon"], "no checkpoint asked, no pod deleted"
    assert rig.run(done, m) == done, "a failed record is not carried on"


def test_a_checkpoint_that_does_not_come_is_recorded_and_the_cordon_goes_on() -> None:
    rig = Rig(save_after_reads=None)  # the trainer never saves
    m = job_monitor()
    done = rig.run(node_fault_record(m, timeout_s=30), m)

    step = done["steps"][3]
    assert step["phase"] == Phase.SUCCEEDED
    assert step["detail"] == (
        f"timed out after 30s waiting for job-1 to save past step {CKPT_STEP}; every rank has step {CKPT_STEP}"
    )
    assert rig.clock() - T0 >= 30
    assert done["phase"] == Phase.SUCCEEDED
    assert rig.cluster.nodes["gpu-a"]["unschedulable"]
    # the pointer is the newest checkpoint before the fault
    assert rig.cluster.annotations_written[0] == {
        RESUME_FROM: json.dumps(
            {"kind": "full", "path": "/ckpt/1000", "step": 1000, "ts": CKPT_TS}, sort_keys=True
        )
    }


def test_an_unreachable_healthy_sidecar_does_not_block_the_cordon() -> None:
    rig = Rig()
    rig.cluster.unreachable = {"job-1"}
    m = job_monitor()
    done = rig.run(node_fault_record(m), m)
    assert done["steps"][3]["detail"].startswith("no sidecar answered the checkpoint request; failed: job-1")
    assert done["phase"] == Phase.SUCCEEDED and rig.cluster.nodes["gpu-a"]["unschedulable"]


def test_placement_that_never_comes_fails_the_confirmation() -> None:
    rig = Rig(nodes=("gpu-a", "gpu-b"))  # no room for the second pod once gpu-a is cordoned
    m = job_monitor()
    done = rig.run(node_fault_record(m), m)
    assert kinds_and_phases(done)[-1] == ("ConfirmPlacement", "Failed")
    assert done["steps"][-1]["detail"].startswith(
        "the new pods were not all placed away from gpu-a within 120s"
    )


def test_a_spare_that_takes_a_pod_is_recorded() -> None:
    rig = Rig(nodes=("gpu-a", "gpu-b", "spare-0"))
    rig.cluster.nodes["spare-0"]["labels"]["trainguard.io/spare"] = "true"
    m = job_monitor()
    done = rig.run(node_fault_record(m), m)
    assert done["steps"][-1]["detail"] == (
        "placed job-0-r1->gpu-b, job-1-r2->spare-0; spare used: spare-0; resume-from cleared on Job/llama-pretrain"
    )
    assert done["steps"][4]["detail"].endswith("; spares available: spare-0")


def test_a_node_cordoned_by_a_person_is_left_as_it_is() -> None:
    rig = Rig()
    rig.cluster.nodes["gpu-a"]["unschedulable"] = True
    m = job_monitor()
    done = rig.run(record_of(Step(StepKind.CORDON, {"node": "gpu-a", "reason": "XID"})), m)
    assert done["steps"][0]["detail"] == "already cordoned, not by trainguard: left as is"
    assert rig.cluster.nodes["gpu-a"]["annotations"] == {}


def test_taint_merges_with_existing_taints_once() -> None:
    rig = Rig()
    other = {"key": "example.com/maintenance", "value": "x", "effect": "NoExecute"}
    rig.cluster.nodes["gpu-a"]["taints"] = [other]
    m = job_monitor()
    taint = Step(StepKind.TAINT, {"node": "gpu-a", "reason": "GPULost"})
    rig.run(record_of(taint, taint), m)
    assert rig.cluster.nodes["gpu-a"]["taints"] == [
        other,
        {"key": FAULTY_TAINT, "value": "GPULost", "effect": "NoSchedule"},
    ]


def test_an_interrupted_gang_restarts_its_live_pods_and_leaves_the_finished_one() -> None:
    """An OOMKilled rank: its pod Failed (the Job already made a replacement), the others run. The
    Failed pod is not deleted (nothing would replace it) and placement waits for the 2 live ones."""
    rig = Rig(pods={"job-0": "gpu-a", "job-1": "gpu-b", "job-1-r0": "gpu-c"})
    rig.cluster.pods["job-1"]["phase"] = "Failed"
    rig.cluster.pods["job-1-r0"]["index"] = 1
    m = job_monitor()
    restart = (Step(StepKind.RESTART_GANG, {"avoid": ""}), Step(StepKind.CONFIRM_PLACEMENT, {"avoid": ""}))
    done = rig.run(record_of(*restart), m)

    assert done["phase"] == Phase.SUCCEEDED, done
    assert [e for e in rig.cluster.effects if e[0] == "delete"] == [
        ("delete", "job-0"),
        ("delete", "job-1-r0"),
    ]
    assert done["steps"][0]["detail"].startswith("deleted 2 pod(s): job-0, job-1-r0")
    assert done["steps"][1]["detail"].startswith("placed job-0-r1->gpu-a, job-1-r2->gpu-b; ")


@pytest.mark.parametrize("indexed", [True, False], ids=["indexed", "not-indexed"])
def test_a_rank_lost_before_the_restart_is_awaited_with_the_ranks_it_deletes(indexed: bool) -> None:
    """An OOM-killed rank: its pod Failed, and the Job controller replaces it only after its back-off,
    later than the live rank the restart deletes. The restart waits for both: counting only the pod it
    deleted, the placement took the first new pod for the whole gang and cleared resume-from before the
    other came, and that rank started from fresh weights (seen in e2e/test_pipeline.py)."""
    rig = Rig(indexed=indexed)
    rig.cluster.pods["job-0"]["phase"] = "Failed"
    pods = rig.cluster.gang_pods
    polls = 0

    def back_off(namespace: str, selector: str) -> list[dict[str, Any]]:
        nonlocal polls
        polls += 1
        if polls == 5:  # the restart's read, then the placement's fourth poll
            rig.cluster.replace_failed("job-0")
        return pods(namespace, selector)

    rig.cluster.gang_pods = back_off  # type: ignore[method-assign]
    done = rig.run(restart_record(), job_monitor())

    assert done["phase"] == Phase.SUCCEEDED, done
    assert [e for e in rig.cluster.effects if e[0] == "delete"] == [("delete", "job-1")]
    assert done["steps"][0]["progress"]["count"] == 2
    assert "(the gang lost job-0 already: 2 new pod(s) awaited)" in done["steps"][0]["detail"]
    assert polls >= 6, "the placement was confirmed before the lost rank's replacement existed"
    placed = done["steps"][1]["detail"]
    assert placed.startswith("placed job-0-r2->") and ", job-1-r1->" in placed, placed
    # both replacements were admitted while the pointer stood: neither starts from fresh weights
    assert {rig.cluster.sidecar[p]["resume_from"]["step"] for p in ("job-0-r2", "job-1-r1")} == {CKPT_STEP}


# ---- the checkpoint every rank has ---------------------------------------------------------------------


def restart_record() -> dict[str, Any]:
    """A gang restart with no faulty node (a stall, an interrupted trainer): every rank counts."""
    return record_of(
        Step(StepKind.RESTART_GANG, {"avoid": ""}), Step(StepKind.CONFIRM_PLACEMENT, {"avoid": ""})
    )


def pointer_step(rig: Rig) -> Any:
    return json.loads(str(rig.cluster.annotations_written[0][RESUME_FROM]))["step"]


def test_the_gang_resumes_from_the_newest_checkpoint_every_rank_saved() -> None:
    """A partial emergency checkpoint: rank 0 saved step 1100, rank 1 is still at 1000. The gang
    resumes from 1000, which both ranks hold, not from 1100."""
    rig = Rig()
    rig.cluster.trainer_saves(rig.cluster.sidecar["job-0"], "full")  # step 1100 on rank 0 only
    done = rig.run(restart_record(), job_monitor())

    assert done["phase"] == Phase.SUCCEEDED
    assert pointer_step(rig) == CKPT_STEP
    assert "resume-from step 1000 on Job/llama-pretrain" in done["steps"][0]["detail"]
    assert all(s["resume_from"]["step"] == CKPT_STEP for s in rig.cluster.sidecar.values())


def test_a_checkpoint_request_one_healthy_rank_missed_is_recorded_and_not_resumed_from() -> None:
    """A node fault with three ranks: the faulty node's is not asked; of the two healthy ones, job-1
    saves 1100 and job-2 never does. The step records the timeout and the step every rank has, and
    the gang resumes from that one."""
    rig = Rig(
        pods={"job-0": "gpu-a", "job-1": "gpu-b", "job-2": "gpu-c"},
        nodes=("gpu-a", "gpu-b", "gpu-c", "gpu-d"),
    )
    stuck = rig.cluster.sidecar["job-2"]
    read = rig.cluster.read_control

    def never_saves(base_url: str, token: str) -> dict[str, Any]:
        stuck["reads"] = -1_000_000  # its trainer never gets round to the request
        return read(base_url, token)

    rig.cluster.read_control = never_saves  # type: ignore[method-assign]
    m = job_monitor()
    done = rig.run(node_fault_record(m, timeout_s=30), m)

    assert done["steps"][3]["detail"] == (
        "timed out after 30s waiting for job-2 to save past step 1000; step 1100 on job-1;"
        " every rank has step 1000"
    )
    assert pointer_step(rig) == CKPT_STEP


def test_the_faulty_nodes_rank_counts_with_what_it_saved_before_the_fault() -> None:
    """The rank on the faulty node was not asked for the emergency checkpoint (its GPU is suspect), and
    its replacement loads its shard of the checkpoint the gang resumes from: so the gang resumes from
    the newest one that rank saved too, before the fault, not from the one only the healthy ranks
    saved (the replacement would find no shard of it and start from fresh weights). What the faulty
    rank saved after the fault does not count."""
    rig = Rig()
    m = job_monitor()
    record = node_fault_record(m)
    rig.cluster.clock.sleep(10)  # past the record's creation: a save now is after the fault
    rig.cluster.trainer_saves(rig.cluster.sidecar["job-0"], "full")  # 1100 on the faulty rank, after it
    rig.run(record, m)
    assert pointer_step(rig) == CKPT_STEP


def test_a_dead_faulty_rank_leaves_the_checkpoints_saved_before_the_fault() -> None:
    """The faulty node's sidecar does not answer (the node is dead): the healthy ranks choose among what
    they saved before the fault, which the gang saved together, not the emergency checkpoint."""
    rig = Rig()
    rig.store.when(step_done("ConfirmFault"), lambda _: rig.cluster.unreachable.add("job-0"))  # then it died
    m = job_monitor()
    done = rig.run(node_fault_record(m), m)
    assert "checkpoint step 1100 saved on job-1" in done["steps"][3]["detail"]
    assert pointer_step(rig) == CKPT_STEP


def dead_rank_after_a_save(history: Any = None) -> tuple[dict[str, Any], Rig]:
    """Both ranks saved step 1100 before the fault (job-0's sidecar said so), then job-0's node died."""
    rig = Rig()
    rig.clock.now = T0 - 30  # before the record's creation, the fault's time
    for pod in ("job-0", "job-1"):
        rig.cluster.trainer_saves(rig.cluster.sidecar[pod], "full")  # 1100 on both
    rig.clock.now = T0
    rig.history = history
    rig.store.when(step_done("ConfirmFault"), lambda _: rig.cluster.unreachable.add("job-0"))
    m = job_monitor()
    return rig.run(node_fault_record(m), m), rig


def test_a_dead_rank_whose_save_is_unknown_resumes_one_save_back() -> None:
    """A node can die between a step's all-reduce and the end of its rank's save: the healthy rank then
    saves that step alone, and a replacement would find no shard of it (fresh weights, broadcast by
    DDP). With no word from the dead rank, the gang goes one save back, which it finished before."""
    done, rig = dead_rank_after_a_save()
    assert pointer_step(rig) == CKPT_STEP
    assert "resume-from step 1000" in done["steps"][4]["detail"], done["steps"][4]["detail"]
    assert "one save back: job-0 did not answer" in done["steps"][4]["detail"]


def test_a_dead_ranks_last_scraped_save_decides() -> None:
    """Prometheus scraped the dead rank's sidecar after its save of 1100: the gang resumes from 1100. When
    its last scrape said 1000, or Prometheus cannot be asked, from 1000."""
    done, rig = dead_rank_after_a_save(SavedSteps({"job-0": CKPT_STEP + 100}))
    assert pointer_step(rig) == CKPT_STEP + 100
    assert "last saved as scraped: job-0 1100" in done["steps"][4]["detail"], done["steps"][4]["detail"]
    assert rig.history.asked == [("ml", "llama-pretrain", "job-0")]
    for history in (SavedSteps({"job-0": CKPT_STEP}), SavedSteps({}), SavedSteps(error="refused")):
        done, rig = dead_rank_after_a_save(history)
        assert pointer_step(rig) == CKPT_STEP, done["steps"][4]["detail"]


def test_a_rank_that_does_not_answer_leaves_the_choice_to_those_that_do() -> None:
    rig = Rig()
    rig.cluster.trainer_saves(rig.cluster.sidecar["job-0"], "full")
    rig.cluster.trainer_saves(rig.cluster.sidecar["job-1"], "full")
    rig.cluster.trainer_saves(rig.cluster.sidecar["job-0"], "full")  # 1200 on rank 0 only
    rig.cluster.unreachable = {"job-1"}
    done = rig.run(record_of(Step(StepKind.RESTART_GANG, {"avoid": ""})), job_monitor())
    assert pointer_step(rig) == CKPT_STEP + 200
    assert "resume-from step 1200 on Job/llama-pretrain" in done["steps"][0]["detail"]


OLDER = {"step": 900.0, "kind": "full", "path": "/ckpt/900"}
"""A checkpoint an older sidecar lists without its time: that rank has a say on every step."""


def test_no_checkpoint_every_rank_has_writes_no_pointer() -> None:
    rig = Rig()
    rig.cluster.sidecar["job-1"]["checkpoints"], rig.cluster.sidecar["job-1"]["resume_from"] = [OLDER], OLDER
    done = rig.run(record_of(Step(StepKind.RESTART_GANG, {"avoid": ""})), job_monitor())
    assert rig.cluster.annotations_written == []
    assert "no checkpoint every rank has for resume-from" in done["steps"][0]["detail"]


def test_a_rank_that_lists_no_checkpoint_does_not_veto_the_pointer() -> None:
    """An OOM-killed trainer's sidecar (or a replacement's) lists nothing: it knows nothing that could make
    the others' common step wrong, so the gang still resumes from it, and the detail names the rank."""
    rig = Rig()
    rig.cluster.sidecar["job-1"]["checkpoints"], rig.cluster.sidecar["job-1"]["resume_from"] = [], None
    done = rig.run(record_of(Step(StepKind.RESTART_GANG, {"avoid": ""})), job_monitor())
    assert json.loads(str(rig.cluster.annotations_written[0][RESUME_FROM]))["step"] == CKPT_STEP
    assert "job-1 list(s) no checkpoint" in done["steps"][0]["detail"]


def test_a_nan_pins_the_newest_checkpoint_every_rank_saved_before_it() -> None:
    """Rank 0 saved step 1100 before the NaN, rank 1 did not: 1000 is pinned on both, and the detail
    says why 1100 was not."""
    rig = Rig()
    rig.cluster.trainer_saves(rig.cluster.sidecar["job-0"], "full")  # at T0, before the NaN at T0 + 5
    done = rig.run(record_of(Step(StepKind.PIN_CHECKPOINT, {"before_ts": repr(T0 + 5)})), job_monitor())
    assert done["steps"][0]["detail"] == "pinned step 1000 (/ckpt/1000); step 1100 is not on every rank"
    assert all(s["resume_from"]["step"] == CKPT_STEP for s in rig.cluster.sidecar.values())


def test_a_nan_pin_fails_when_no_checkpoint_before_it_is_on_every_rank() -> None:
    rig = Rig()
    rig.cluster.sidecar["job-1"]["checkpoints"], rig.cluster.sidecar["job-1"]["resume_from"] = [OLDER], OLDER
    done = rig.run(record_of(Step(StepKind.PIN_CHECKPOINT, {"before_ts": repr(T0)})), job_monitor())
    assert done["phase"] == Phase.FAILED
    assert done["steps"][0]["detail"] == (
        "no checkpoint saved before the fault is on every sidecar that answered (newest: job-0 1000, job-1 900)"
    )
    assert not any(s["pinned"] for s in rig.cluster.sidecar.values())


# ---- the non-finite loss and advice ----------------------------------------------------------------------


def test_non_finite_loss_pauses_every_sidecar_and_pins_the_checkpoint_before_it() -> None:
    rig = Rig()
    m = job_monitor()
    done = rig.run(
        record_of(Step(StepKind.PAUSE), Step(StepKind.PIN_CHECKPOINT, {"before_ts": repr(T0 - 6)})), m
    )
    assert done["phase"] == Phase.SUCCEEDED
    assert all(s["pause"] for s in rig.cluster.sidecar.values())
    assert done["steps"][0]["detail"] == "paused: job-0, job-1"
    assert done["steps"][1]["detail"] == "pinned step 1000 (/ckpt/1000)", "checked against its time"
    pin = {"step": 1000.0, "kind": "full", "path": "/ckpt/1000", "ts": CKPT_TS}
    assert all(s["pinned"] and s["resume_from"] == pin for s in rig.cluster.sidecar.values())
    assert not any(n["unschedulable"] for n in rig.cluster.nodes.values()), "a NaN cordons nothing"


def test_an_older_sidecar_without_times_is_pinned_unchecked_and_its_checkpoint_awaited() -> None:
    """An exporter from before the pin: resume_from without ts, no `checkpoints`, the pin ignored. The
    pin is taken from resume_from and says it could not be checked; the checkpoint request judges
    progress from resume_from."""
    rig = Rig(old_sidecars=True)
    m = job_monitor()
    nan = rig.run(record_of(Step(StepKind.PIN_CHECKPOINT, {"before_ts": repr(T0 - 6)})), m)
    assert nan["steps"][0]["detail"] == (
        "pinned step 1000 (/ckpt/1000) (saved before the fault: not checked, the sidecar reports no "
        "checkpoint time)"
    )
    done = rig.run(node_fault_record(m), m)
    assert done["steps"][3]["detail"] == f"checkpoint step {CKPT_STEP + 100} saved on job-1"


def test_pin_takes_the_listed_checkpoint_when_the_trainer_saved_after_the_nan() -> None:
    """The trainer saved once more between the NaN and the pause: resume_from is that corrupted
    checkpoint; the good one before the NaN is among the sidecar's `checkpoints`."""
    rig = Rig()
    for state in rig.cluster.sidecar.values():
        rig.cluster.trainer_saves(state, "incremental")  # step 1100 at T0, after the NaN at T0 - 6
        assert state["resume_from"]["step"] == CKPT_STEP + 100
    done = rig.run(record_of(Step(StepKind.PIN_CHECKPOINT, {"before_ts": repr(T0 - 6)})), job_monitor())

    assert done["phase"] == Phase.SUCCEEDED, done["steps"][0]["detail"]
    assert done["steps"][0]["detail"] == "pinned step 1000 (/ckpt/1000)"
    for state in rig.cluster.sidecar.values():
        assert state["pinned"] and state["resume_from"]["path"] == "/ckpt/1000"


def test_a_pinned_sidecar_answers_the_checkpoint_request_and_the_pointer_keeps_the_pin() -> None:
    """A node fault after a NaN pin: the pinned resume_from never moves, so progress is the newest
    listed checkpoint; the gang restarts from the pin, not from the checkpoint of the corrupted state."""
    rig = Rig()
    m = job_monitor()
    pin = {"step": CKPT_STEP, "kind": "full", "path": f"/ckpt/{CKPT_STEP}", "ts": CKPT_TS}
    for pod, state in rig.cluster.sidecar.items():
        rig.cluster.control(f"http://{pod}:{PORT}", TOKEN, {"resume_from": pin})  # after a NaN
        rig.cluster.trainer_saves(state, "full")  # step 1100: the trainer went on, the pin holds
        assert state["pinned"] and state["resume_from"]["step"] == CKPT_STEP

    done = rig.run(node_fault_record(m, timeout_s=30), m)

    assert done["steps"][3]["detail"] == "checkpoint step 1200 saved on job-1"
    assert rig.clock() - T0 < 30, "the wait did not run out its timeout"
    pointer = json.loads(str(rig.cluster.annotations_written[0][RESUME_FROM]))
    assert pointer == {"step": 1000, "kind": "full", "path": "/ckpt/1000", "ts": CKPT_TS}


def test_the_pointer_is_cleared_once_the_gang_is_placed_and_a_later_pod_starts_unpinned() -> None:
    rig = Rig()
    m = job_monitor()
    done = rig.run(node_fault_record(m), m)
    assert done["phase"] == Phase.SUCCEEDED
    assert [e for e in rig.cluster.effects if e[0].endswith("annotate")] == [
        ("annotate", "Job", "llama-pretrain"),
        ("unannotate", "Job", "llama-pretrain"),
    ]
    assert rig.cluster.annotations_written[-1] == {RESUME_FROM: None}
    assert RESUME_FROM not in rig.cluster.workloads[("Job", "llama-pretrain")]
    assert all(s["pinned"] for s in rig.cluster.sidecar.values()), "the new gang holds the pointer"

    rig.cluster.delete_pods("ml", ["job-0-r1"])  # later, for another reason
    rig.cluster.sidecars("ml", "app=llama-pretrain", PORT)
    assert rig.cluster.sidecar["job-0-r3"]["pinned"] is False
    assert rig.cluster.sidecar["job-0-r3"]["resume_from"] is None


def test_a_pointer_that_cannot_be_cleared_is_said_and_the_placement_stands() -> None:
    rig = Rig()
    m = job_monitor()
    annotate = rig.cluster.annotate_workload

    def refused(namespace: str, api_version: str, kind: str, name: str, annotations: Any) -> None:
        if all(v is None for v in annotations.values()):
            raise RuntimeError('jobs.batch "llama-pretrain" is forbidden')
        annotate(namespace, api_version, kind, name, annotations)

    rig.cluster.annotate_workload = refused  # type: ignore[method-assign]
    done = rig.run(node_fault_record(m), m)

    assert done["phase"] == Phase.SUCCEEDED
    assert done["steps"][-1]["detail"].endswith(
        '; resume-from not cleared on Job/llama-pretrain: jobs.batch "llama-pretrain" is forbidden'
    )


def test_pause_fails_when_no_sidecar_takes_it() -> None:
    rig = Rig()
    rig.cluster.unreachable = {"job-0", "job-1"}
    done = rig.run(record_of(Step(StepKind.PAUSE), Step(StepKind.PIN_CHECKPOINT)), job_monitor())
    assert kinds_and_phases(done) == [("Pause", "Failed"), ("PinCheckpoint", "Planned")]
    assert done["steps"][0]["detail"].startswith("no sidecar took paused; failed: job-0: GET")


def test_pin_fails_when_no_checkpoint_is_known() -> None:
    rig = Rig()
    for state in rig.cluster.sidecar.values():
        state["resume_from"], state["checkpoints"] = None, []
    done = rig.run(record_of(Step(StepKind.PIN_CHECKPOINT, {"before_ts": repr(T0)})), job_monitor())
    assert done["phase"] == Phase.FAILED
    assert done["steps"][0]["detail"] == "no checkpoint saved before the fault is known to the sidecars"


def test_pin_fails_when_every_checkpoint_followed_the_fault() -> None:
    rig = Rig()
    done = rig.run(record_of(Step(StepKind.PIN_CHECKPOINT, {"before_ts": repr(CKPT_TS - 1)})), job_monitor())
    assert done["phase"] == Phase.FAILED
    assert not any(s["pinned"] for s in rig.cluster.sidecar.values())


def test_advice_is_appended_once_to_each_sidecar() -> None:
    rig = Rig()
    earlier = {"advice": "reduce_lr", "record": "older"}
    for state in rig.cluster.sidecar.values():
        state["advisories"] = [earlier]
    advise = Step(StepKind.ADVISE, {"advice": "clip_gradients"})
    rig.run(record_of(advise, advise), job_monitor())  # the second is a redo of the first
    for state in rig.cluster.sidecar.values():
        assert state["advisories"] == [earlier, {"advice": "clip_gradients", "record": "rec-1"}]
    assert [e[0] for e in rig.cluster.effects] == ["advise", "advise"]


def test_notify_goes_to_the_notifier_and_is_recorded() -> None:
    rig = Rig()
    done = rig.run(record_of(Step(StepKind.NOTIFY, {"reason": "cordon cap reached"})), job_monitor())
    assert rig.notified == ["cordon cap reached"]
    assert done["steps"][0]["detail"] == "notified: cordon cap reached"
    assert rig.cluster.calls == 0


def test_a_wrong_token_reaches_no_sidecar() -> None:
    rig = Rig()
    m = make_monitor(**{"metadata.name": "other-job"})
    done = rig.run(record_of(Step(StepKind.PAUSE)), m)
    assert done["phase"] == Phase.FAILED and "HTTP 401" in done["steps"][0]["detail"]
    assert rig.cluster.effects == []


# ---- pure parts ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("candidates", "before_ts", "before_step", "expected_step"),
    [
        ([{"step": 900}, {"step": 1000}], None, None, 1000),
        ([{"step": 900, "ts": T0 - 60}, {"step": 1000, "ts": T0 + 1}], T0, None, 900),  # saved after the NaN
        ([{"step": 900}, {"step": 1000}], None, 1000, 900),  # at the NaN step is not good
        ([{"step": 1000, "ts": T0}], T0, None, None),
        ([{"path": "/x"}], None, None, None),
        # a pin without a time is the listed checkpoint of the same step and path: saved after the NaN
        ([{"step": 1000, "path": "/c"}, {"step": 1000, "path": "/c", "ts": T0 + 1}], T0, None, None),
        ([{"step": 900, "path": "/b", "ts": T0 - 9}, {"step": 1000, "path": "/c"}], T0, None, 1000),
    ],
)
def test_choose_checkpoint_keeps_the_newest_before_the_fault(
    candidates: list[dict[str, Any]],
    before_ts: float | None,
    before_step: float | None,
    expected_step: int | None,
) -> None:
    chosen, _ = choose_checkpoint(candidates, before_ts, before_step)
    assert (chosen or {}).get("step") == expected_step


@pytest.mark.parametrize(
    ("ranks", "before_ts", "expected_step", "note"),
    [
        # a partial emergency checkpoint: rank 0 at 1100, rank 1 at 1000
        (
            {"r0": [{"step": 1000}, {"step": 1100}], "r1": [{"step": 1000}]},
            None,
            1000,
            "; step 1100 is not on every rank",
        ),
        ({"r0": [{"step": 1000}, {"step": 1100}], "r1": [{"step": 1100}, {"step": 1000}]}, None, 1100, ""),
        ({"r0": [{"step": 1100}], "r1": [{"step": 1000}]}, None, None, "; step 1100 is not on every rank"),
        # a replacement rank whose trainer started after step 600 was saved (its steps counted afresh)
        (
            {
                "r0": [{"step": 20, "ts": T0 + 100}],
                "r1": [{"step": 500, "ts": T0 - 20}, {"step": 600, "ts": T0}],
            },
            None,
            600,
            "",
        ),
        # a rank listing nothing (its trainer OOM-killed, a replacement not saved yet) does not veto
        ({"r0": [{"step": 1000}], "r1": []}, None, 1000, "; r1 list(s) no checkpoint"),
        ({}, None, None, ""),
        # before the fault on every rank: rank 1 saved its part of 1100 after the NaN
        (
            {
                "r0": [{"step": 1000, "ts": T0 - 60}, {"step": 1100, "ts": T0 - 1}],
                "r1": [{"step": 1000, "ts": T0 - 60}, {"step": 1100, "ts": T0 + 1}],
            },
            T0,
            1000,
            "; step 1100 is not on every rank",
        ),
    ],
)
def test_gang_checkpoint_is_the_newest_every_rank_saved_before_the_fault(
    ranks: dict[str, list[dict[str, Any]]], before_ts: float | None, expected_step: int | None, note: str
) -> None:
    chosen, said = gang_checkpoint(ranks, before_ts, None)
    assert (chosen or {}).get("step") == expected_step
    assert said == note


# ---- a GPU fault is confirmed by the node's sidecar ------------------------------------------------------


def test_a_gpu_fault_no_sidecar_on_the_node_saw_is_not_acted_on() -> None:
    """A fatal XID posted into Alertmanager by someone else: the job's sidecar on gpu-a never saw it."""
    rig = Rig()
    rig.cluster.hardware = {}
    m = job_monitor()
    done = rig.run(node_fault_record(m), m)
    assert done["phase"] == Phase.FAILED
    assert kinds_and_phases(done)[:2] == [("ConfirmFault", "Failed"), ("Cordon", "Planned")]
    assert done["steps"][0]["detail"] == (
        "unconfirmed: no sidecar on gpu-a saw GPUCriticalXid; job-0 did not see it; nothing is done"
    )
    assert rig.cluster.effects == [] and not rig.cluster.nodes["gpu-a"]["unschedulable"]


def test_a_claim_about_another_gpu_is_not_confirmed_by_a_fault_on_this_one() -> None:
    rig = Rig()
    rig.cluster.hardware = {"job-0": [{"alertname": "GPUCriticalXid", "gpu": "1", "at": T0}]}
    m = job_monitor()
    step = Step(StepKind.CONFIRM_FAULT, {"node": "gpu-a", "alert": "GPUCriticalXid", "gpu": "3"})
    done = rig.run(record_of(step, Step(StepKind.CORDON, {"node": "gpu-a"})), m)
    assert done["phase"] == Phase.FAILED and rig.cluster.effects == []
    rig.cluster.hardware["job-0"].append({"alertname": "GPUCriticalXid", "gpu": "3", "at": T0})
    again = rig.run(record_of(step, Step(StepKind.CORDON, {"node": "gpu-a"})), m)
    assert again["phase"] == Phase.SUCCEEDED and rig.cluster.effects == [("cordon", "gpu-a")]


def test_a_node_whose_sidecar_does_not_answer_is_not_cordoned_on_an_alerts_word() -> None:
    """A node too dead to answer is GPUNodeDown's, judged from node state; the alert alone is a claim."""
    rig = Rig()
    rig.cluster.unreachable = {"job-0"}
    m = job_monitor()
    done = rig.run(node_fault_record(m), m)
    assert done["phase"] == Phase.FAILED and rig.cluster.effects == []
    assert done["steps"][0]["detail"].startswith(
        "unconfirmed: no sidecar on gpu-a saw GPUCriticalXid; failed: job-0"
    )


class History:
    """Prometheus's ALERTS as FaultHistory: the (alert, namespace, job, node, gpu) the rules fired for."""

    def __init__(self, fired: set[tuple[str, ...]] | None = None, error: str = "") -> None:
        self.fired = fired or set()
        self.error = error
        self.asked: list[tuple[str, ...]] = []

    def saw(self, alert: str, namespace: str, training_job: str, node: str, gpu: str = "") -> bool:
        self.asked.append((alert, namespace, training_job, node, gpu))
        if self.error:
            raise OSError(self.error)
        return (alert, namespace, training_job, node, gpu) in self.fired

    def last_saved_step(self, namespace: str, training_job: str, pod: str) -> float | None:
        return None

    def where(self) -> str:
        return "Prometheus http://prom:9090"


class SavedSteps(History):
    """Prometheus's last scrape of each rank's trainguard_checkpoint_last_step, with no ALERTS."""

    def __init__(self, saved: dict[str, float] | None = None, error: str = "") -> None:
        super().__init__(error=error)
        self.saved = saved or {}

    def saw(self, alert: str, namespace: str, training_job: str, node: str, gpu: str = "") -> bool:
        return False

    def last_saved_step(self, namespace: str, training_job: str, pod: str) -> float | None:
        self.asked.append((namespace, training_job, pod))
        if self.error:
            raise OSError(self.error)
        return self.saved.get(pod)


def test_the_jobs_own_rule_in_prometheus_confirms_what_no_sidecar_can() -> None:
    """gpuBackend dcgm (the sidecar reads no GPU), or a sidecar restarted since: Prometheus's ALERTS,
    labelled from the scrape targets, is the second witness."""
    rig = Rig()
    rig.cluster.hardware = {}
    rig.history = History({("GPUCriticalXid", "ml", "llama-pretrain", "gpu-a", "")})
    m = job_monitor()
    done = rig.run(node_fault_record(m), m)
    assert done["phase"] == Phase.SUCCEEDED, done["steps"][0]
    assert done["steps"][0]["detail"] == (
        "confirmed by Prometheus http://prom:9090: the job's rule fired for GPUCriticalXid on gpu-a"
    )
    assert ("cordon", "gpu-a") in rig.cluster.effects


def test_prometheus_without_the_alert_or_unreachable_confirms_nothing() -> None:
    m = job_monitor()
    for history, why in (
        (History({("GPUCriticalXid", "ml", "llama-pretrain", "gpu-b", "")}), "holds no GPUCriticalXid"),
        (History({("GPUCriticalXid", "ml", "other-job", "gpu-a", "")}), "holds no GPUCriticalXid"),
        (History(error="connection refused"), "failed: Prometheus http://prom:9090: connection refused"),
    ):
        rig = Rig()
        rig.cluster.hardware = {}
        rig.history = history
        done = rig.run(node_fault_record(m), m)
        assert done["phase"] == Phase.FAILED and rig.cluster.effects == []
        assert why in done["steps"][0]["detail"], done["steps"][0]["detail"]
        assert history.asked == [("GPUCriticalXid", "ml", "llama-pretrain", "gpu-a", "")]


def test_a_sidecar_that_saw_it_is_asked_first_and_prometheus_not_at_all() -> None:
    rig = Rig()
    rig.history = History(error="must not be asked")
    m = job_monitor()
    done = rig.run(node_fault_record(m), m)
    assert done["phase"] == Phase.SUCCEEDED
    assert rig.history.asked == []


# ---- exactly once: the gate before every step, claims, signatures -------------------------------------


def effects_of(rig: Rig) -> list[str]:
    return [e[0] for e in rig.cluster.effects]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"spec.remediation.enabled": False}, "spec.remediation.enabled: false"),
        ({"spec.remediation.dryRun": True}, "spec.remediation.dryRun: true"),
    ],
)
def test_a_monitor_turned_off_mid_run_skips_the_remaining_steps(change: dict[str, Any], why: str) -> None:
    rig = Rig()
    m = job_monitor()
    rig.store.when(step_done("Cordon"), lambda store: setattr(store, "monitor", job_monitor(**change)))
    done = rig.run(node_fault_record(m), m)

    assert done["phase"] == Phase.SKIPPED and why in done["message"], done["message"]
    assert kinds_and_phases(done)[:2] == [("ConfirmFault", Phase.SUCCEEDED), ("Cordon", Phase.SUCCEEDED)]
    assert all(p == Phase.SKIPPED for _, p in kinds_and_phases(done)[2:])
    assert all(why in s["detail"] for s in done["steps"][2:])
    assert effects_of(rig) == ["cordon"], "nothing after the change"
    assert rig.store.records[done["id"]] == done, "saved"


@pytest.mark.parametrize("mode", ["off", "dry-run"])
def test_the_operator_mode_turned_off_mid_run_skips_the_remaining_steps(mode: str) -> None:
    rig = Rig()
    m = job_monitor()
    rig.store.when(step_done("Cordon"), lambda store: setattr(rig, "mode", mode))
    done = rig.run(node_fault_record(m), m)

    assert done["phase"] == Phase.SKIPPED and f"mode is {mode}" in done["message"]
    assert [p for _, p in kinds_and_phases(done)] == [Phase.SUCCEEDED] * 2 + [Phase.SKIPPED] * 4
    assert "taint" not in effects_of(rig) and "delete" not in effects_of(rig)


def test_an_operator_off_from_the_start_does_nothing() -> None:
    rig = Rig()
    rig.mode = "off"
    m = job_monitor()
    done = rig.run(node_fault_record(m), m)
    assert done["phase"] == Phase.SKIPPED and rig.cluster.effects == [] and rig.cluster.calls == 0


def test_an_executor_that_loses_the_lead_stops_and_the_new_leader_finishes_once() -> None:
    rig = Rig()
    m = job_monitor()
    rig.store.when(step_done("Cordon"), lambda store: setattr(rig, "leads", False))
    old = rig.run(node_fault_record(m), m)

    assert rig.last is not None and "no longer leads" in rig.last.stopped
    left = rig.store.records[old["id"]]
    assert left == old and left["phase"] == Phase.IN_PROGRESS, "left as it stands for the new leader"
    assert kinds_and_phases(left)[2] == ("Taint", Phase.PLANNED)
    assert effects_of(rig) == ["cordon"]

    rig.leads = True  # the new leader's executor, resuming from the status
    done = rig.executor(owner="new-leader").run(left, m)
    assert done["phase"] == Phase.SUCCEEDED and done["owner"] == "new-leader"
    assert effects_of(rig).count("cordon") == 1 and effects_of(rig).count("taint") == 1
    assert effects_of(rig).count("delete") == 2, "one gang restart"


def test_a_stopping_operator_leaves_the_checkpoint_wait_within_a_poll_and_the_next_leader_finishes_once() -> (
    None
):
    """SIGTERM (a rolling upgrade) while the emergency checkpoint is awaited: the executor stops at its
    next poll, writing nothing, so the process exits in its grace period instead of waiting out
    emergencyCheckpointTimeout; the step left InProgress is the next leader's, which asks no sidecar
    twice and restarts the gang once."""
    rig = Rig(save_after_reads=None)  # the trainer never saves: the wait would run 30 s
    m = job_monitor()
    rig.stopping = lambda: rig.clock() >= T0 + 3
    record = node_fault_record(m, timeout_s=30)
    rig.run(record, m)

    assert rig.last is not None and rig.last.stopped == STOPPING
    assert rig.clock() < T0 + 5, "stopped within a poll, not at the timeout"
    left = rig.store.records[record["id"]]
    assert kinds_and_phases(left)[3] == ("RequestCheckpoint", Phase.IN_PROGRESS)
    assert left["phase"] == Phase.IN_PROGRESS and left["steps"][3]["progress"]["asked"] == 1
    assert effects_of(rig) == ["cordon", "taint", "checkpoint-request"]

    rig.stopping = lambda: False  # the next leader
    done = rig.executor(owner="next-leader").run(left, m)
    assert done["phase"] == Phase.SUCCEEDED and done["owner"] == "next-leader"
    assert done["steps"][3]["detail"].startswith("timed out after 30s"), done["steps"][3]
    assert effects_of(rig).count("checkpoint-request") == 1, "the request still held is not asked again"
    assert effects_of(rig).count("cordon") == 1 and effects_of(rig).count("delete") == 2


def test_a_stopping_operator_leaves_the_placement_wait_and_starts_no_step() -> None:
    rig = Rig(nodes=("gpu-a", "gpu-b"))  # no room for the second new pod: the wait would run 120 s
    m = job_monitor()
    began: list[float] = []
    rig.store.when(step_done("RestartGang"), lambda store: began.append(rig.clock()))
    rig.stopping = lambda: bool(began) and rig.clock() >= began[0] + 2
    record = node_fault_record(m)
    rig.run(record, m)
    assert rig.last is not None and rig.last.stopped == STOPPING
    assert rig.clock() < began[0] + 5, "stopped within a poll, not at the timeout"
    left = rig.store.records[record["id"]]
    assert kinds_and_phases(left)[-1] == ("ConfirmPlacement", Phase.IN_PROGRESS)

    saved = len(rig.store.saved)
    again = rig.executor().run(left, m)  # the resume pass of a replica already stopping
    assert again == left and len(rig.store.saved) == saved, "nothing claimed, nothing written"
    assert rig.last is not None and rig.last.stopped == STOPPING


def test_a_standby_does_not_claim_or_act() -> None:
    rig = Rig()
    rig.leads = False
    m = job_monitor()
    record = node_fault_record(m)
    rig.run(record, m)
    assert rig.store.saved == [] and rig.cluster.calls == 0
    assert rig.store.records[record["id"]].get("owner") is None


def test_a_stale_copy_of_a_record_another_executor_finished_is_not_run_again() -> None:
    rig = Rig()
    m = job_monitor()
    snapshot = node_fault_record(m)
    done = rig.run(snapshot, m)
    effects = list(rig.cluster.effects)

    again = rig.executor().run(snapshot, m)  # a resume from a cache that still shows it Planned
    assert again == done and rig.cluster.effects == effects
    assert rig.last is not None and "already Succeeded" in rig.last.stopped


def test_an_executor_whose_record_another_executor_claimed_stops_without_acting() -> None:
    """An old leader and a new one on the same record: the new one claims it while the old one is in
    the middle; the old one's next save finds the record moved and it stops before its next action."""
    rig = Rig()
    m = job_monitor()

    def other_claims(store: Any) -> None:
        store.put(records.claimed(store.records[record["id"]], "other-executor"))

    record = node_fault_record(m)
    rig.store.when(step_done("Cordon"), other_claims)
    rig.run(record, m)

    assert rig.last is not None and "moved on" in rig.last.stopped
    assert effects_of(rig) == ["cordon"], "no taint, no restart"
    assert rig.store.records[record["id"]]["owner"] == "other-executor", "the other executor's record is kept"


def test_a_record_moved_between_two_writes_of_a_step_stops_its_executor() -> None:
    """Someone else's write lands between this executor's gate and its InProgress save: the conditional
    save refuses, and the step's action is never taken."""
    rig = Rig()
    m = job_monitor()
    record = node_fault_record(m)

    def moved(store: Any) -> None:
        store.put(records.claimed(store.records[record["id"]], "other-executor"))

    rig.store.when(step_done("ConfirmFault"), lambda store: store.interleave.append(moved))
    rig.run(record, m)
    assert "cordon" not in effects_of(rig) and ("superseded",) in rig.timeline


def test_an_altered_record_is_refused_before_any_step() -> None:
    rig = Rig()
    m = job_monitor()
    record = sign(node_fault_record(m), m)
    record["steps"][1]["params"]["node"] = "gpu-c"  # someone with status rights points the cordon elsewhere
    done = rig.run(record, m, signed=False)

    assert done["phase"] == Phase.FAILED and done["message"].startswith("refused")
    assert all(p == Phase.SKIPPED for _, p in kinds_and_phases(done))
    assert rig.cluster.calls == 0 and rig.cluster.effects == []


def test_an_unsigned_record_is_refused_even_one_from_before_signatures() -> None:
    rig = Rig()
    m = job_monitor()
    done = rig.run(node_fault_record(m), m, signed=False)
    assert done["phase"] == Phase.FAILED and "signature" in done["message"]
    assert rig.cluster.calls == 0


def test_a_record_signed_for_another_monitor_is_refused() -> None:
    rig = Rig()
    m = job_monitor()
    other = make_monitor(**{"metadata.name": "other-job"})
    done = rig.run(sign(node_fault_record(m), other), m, signed=False)
    assert done["phase"] == Phase.FAILED and rig.cluster.calls == 0


def test_without_the_operator_key_nothing_is_checked_or_done() -> None:
    rig = Rig()
    m = job_monitor()
    record = node_fault_record(m)
    rig.store.monitor = m
    rig.store.put(sign(record, m))
    executor = rig.executor()
    executor.key = lambda: None
    executor.run(record, m)
    assert "no operator key" in executor.stopped and rig.store.saved == [] and rig.cluster.calls == 0


def test_a_gang_stuck_on_its_lost_peer_is_not_waited_out_for_its_checkpoint() -> None:
    """A synchronous gang whose member died blocks in its next collective: its healthy ranks take no
    step and cannot save. The step stops waiting after STUCK_MIN_S without a step (not the whole
    emergencyCheckpointTimeout, 5 minutes by default) and the cordon and restart go on."""
    rig = Rig(save_after_reads=None)  # the trainer never saves
    rig.cluster.sidecar["job-1"].update(step=4321, step_time_s=0.5)  # and never steps again
    rig.store.when(step_done("ConfirmFault"), lambda _: rig.cluster.unreachable.add("job-0"))  # the peer died
    m = job_monitor()
    done = rig.run(node_fault_record(m, timeout_s=300), m)

    step = done["steps"][3]
    assert step["phase"] == Phase.SUCCEEDED and done["phase"] == Phase.SUCCEEDED
    assert step["detail"] == (
        f"job-1 did not save past step {CKPT_STEP}; no step from job-1 for 10s (a gang stuck on its lost peer"
        f" cannot save): not waiting further; every rank has step {CKPT_STEP}"
    )
    assert STUCK_MIN_S <= rig.clock() - T0 < 30, "not the 300 s timeout"


def test_a_slow_trainer_is_given_three_of_its_steps_before_it_is_called_stuck() -> None:
    rig = Rig(save_after_reads=None)
    rig.cluster.sidecar["job-1"].update(step=4321, step_time_s=20.0)  # a 20 s step: not stuck at 10 s
    rig.store.when(step_done("ConfirmFault"), lambda _: rig.cluster.unreachable.add("job-0"))
    m = job_monitor()
    done = rig.run(node_fault_record(m, timeout_s=300), m)
    assert "no step from job-1 for 60s" in done["steps"][3]["detail"]
    assert 60 <= rig.clock() - T0 < 90


def test_paused_trainers_with_every_rank_there_are_waited_for() -> None:
    """No step, but the faulty node's rank still answers: trainers held (a debugger, SIGSTOP), not a gang
    that lost a member. The step waits its whole timeout, as the e2e tests that hold a record mid-run
    rely on."""
    rig = Rig(save_after_reads=None)
    rig.cluster.sidecar["job-1"].update(step=4321, step_time_s=0.5)
    m = job_monitor()
    done = rig.run(node_fault_record(m, timeout_s=120), m)
    assert done["steps"][3]["detail"].startswith("timed out after 120s"), done["steps"][3]


def test_a_rank_that_steps_is_waited_for_and_one_whose_trainer_exited_is_not() -> None:
    rig = Rig(save_after_reads=None)
    state = rig.cluster.sidecar["job-1"]
    state["step"] = 100
    read = rig.cluster.read_control

    def stepping(base_url: str, token: str) -> dict[str, Any]:
        state["step"] += 1  # training goes on, it just never saves
        return read(base_url, token)

    rig.cluster.read_control = stepping  # type: ignore[method-assign]
    m = job_monitor()
    done = rig.run(node_fault_record(m, timeout_s=30), m)
    assert done["steps"][3]["detail"].startswith("timed out after 30s"), "a rank that steps may yet save"

    rig = Rig(save_after_reads=None, launchers=True)
    rig.cluster.sidecar["job-1"]["launcher"]["state"] = "waiting"  # its trainer failed: nothing to save
    t0 = rig.clock()
    done = rig.run(node_fault_record(m, timeout_s=30), m)
    assert "(a gang stuck on its lost peer cannot save)" in done["steps"][3]["detail"]
    assert rig.clock() - t0 < 5
