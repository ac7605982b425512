"""The executor carries a slowNode record out on the fake cluster of test_executor.py: the GPU's claim
confirmed by the node's sidecar (a straggler's by the sidecars' step times, or the job's rule), then
AwaitCheckpoint looks, asking nothing, until every rank has saved the job's next periodic checkpoint
(each look one run: between them the run ends with the step InProgress, for the resume pass to hand it
over again), and only then the node is cordoned and tainted and the gang moved off it, resuming from that
checkpoint. A wait past its timeout fails and touches nothing; a new executor after a crash keeps the
first one's mark and deadline."""

from __future__ import annotations

from typing import Any

import pytest

from tests.clock import T0
from tests.remediation.fakes import CKPT_STEP, Rig, job_monitor, kinds_and_phases
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.events import fingerprint
from trainguard.remediation.executor import would
from trainguard.remediation.model import ClusterState, Phase, Signal, Source
from trainguard.remediation.plan import SLOW_NODE, STRAGGLER_ALERT, plan
from trainguard.remediation.records import new_record
from trainguard.remediation.slow_node import straggler_evidence

THROTTLED = "GPUClocksThrottled"
STEPS = ["ConfirmFault", "AwaitCheckpoint", "Cordon", "Taint", "RestartGang", "ConfirmPlacement"]


def slow_record(monitor: TrainingJobMonitor, alert: str = THROTTLED, **labels: str) -> dict[str, Any]:
    """The planner's own plan for the claim on gpu-a (a seam: its params are what the executor reads)."""
    full = {"alertname": alert, "severity": "P1", "namespace": "ml", "training_job": "llama-pretrain",
            "node": "gpu-a", **labels}  # fmt: skip
    signal = Signal(alert, "P1", full, fingerprint(full), Source.ALERTMANAGER, T0 - 30)
    p = plan(signal, monitor, ClusterState(now=T0, gpu_nodes=3, job_nodes=frozenset({"gpu-a", "gpu-b"})))
    assert p.p0_class == SLOW_NODE and not p.skipped, p
    return new_record(p, T0)


def throttled_rig(**fake: Any) -> Rig:
    rig = Rig(**fake)
    rig.cluster.hardware["job-0"].append({"alertname": THROTTLED, "gpu": "2", "at": T0 - 5})
    return rig


def again(rig: Rig, monitor: TrainingJobMonitor, after_s: float) -> dict[str, Any]:
    """The resume pass's next round: `after_s` later, a new executor hands the stored record over."""
    rig.clock.now += after_s
    return rig.executor().run(rig.store.last, monitor)


def monitor_with(**remediation: Any) -> TrainingJobMonitor:
    return job_monitor(**{"spec.remediation": {"actions": {"slowNode": {"straggler": "ReplaceAtCheckpoint"}},
                                               **remediation}})  # fmt: skip


def test_the_node_is_replaced_only_after_the_jobs_own_next_checkpoint() -> None:
    rig = throttled_rig()
    m = monitor_with()
    first = rig.run(slow_record(m, gpu="2"), m)

    # the first look: no checkpoint past step 1000 yet; the run ends, the step waits InProgress
    assert rig.last is not None and rig.last.stopped.startswith("no checkpoint past step 1000")
    assert kinds_and_phases(first)[:3] == [("ConfirmFault", "Succeeded"), ("AwaitCheckpoint", "InProgress"),
                                           ("Cordon", "Planned")]  # fmt: skip
    waiting = first["steps"][1]
    assert waiting["progress"] == {"pastStep": CKPT_STEP, "since": T0}
    assert (
        first["steps"][0]["detail"]
        == f"confirmed by the sidecar of job-0 on gpu-a: it saw {THROTTLED} on GPU 2"
    )
    assert not [e for e in rig.cluster.effects if e[0] in ("cordon", "checkpoint-request", "delete")]

    # later looks, until the trainers' own checkpoint (nobody asked for it) is on every rank
    rig.cluster.periodic_every = 2
    rounds = 0
    done = first
    while done["phase"] == Phase.IN_PROGRESS and rounds < 5:
        done = again(rig, m, 15)
        rounds += 1
    assert done["phase"] == Phase.SUCCEEDED, done
    assert [k for k, _ in kinds_and_phases(done)] == STEPS
    assert rounds == 2, "one look saw no checkpoint, the next saw it on both ranks"
    effects = rig.cluster.effects
    saved = [i for i, e in enumerate(effects) if e[0] == "periodic-checkpoint"]
    assert [effects[i][1] for i in saved] == ["job-0", "job-1"]
    assert effects[max(saved) + 1] == ("cordon", "gpu-a"), "isolated right after the checkpoint"
    assert not [e for e in effects if e[0] == "checkpoint-request"], "the job's own checkpoint: none asked"
    detail = {s["kind"]: s["detail"] for s in done["steps"]}
    assert (
        detail["AwaitCheckpoint"]
        == f"checkpoint step {CKPT_STEP + 100} on every rank (job-0, job-1) after 30s"
    )
    assert f"resume-from step {CKPT_STEP + 100}" in detail["RestartGang"], detail["RestartGang"]
    assert rig.cluster.nodes["gpu-a"]["unschedulable"] and not rig.cluster.nodes["gpu-b"]["unschedulable"]
    assert all(s["node"] != "gpu-a" for s in rig.cluster.pods.values() if not s["terminating"])


def test_no_checkpoint_within_the_wait_fails_and_touches_nothing() -> None:
    rig = throttled_rig()
    m = monitor_with(slowNodeCheckpointWait="60s")
    done = rig.run(slow_record(m, gpu="2"), m)
    for _ in range(10):
        if done["phase"] != Phase.IN_PROGRESS:
            break
        done = again(rig, m, 15)
    assert done["phase"] == Phase.FAILED, done
    failed = done["steps"][1]
    assert (failed["kind"], failed["phase"]) == ("AwaitCheckpoint", "Failed")
    assert failed["detail"].startswith("no checkpoint past step 1000 on every rank within 60s")
    assert rig.clock.now >= T0 + 60
    assert not [e for e in rig.cluster.effects if e[0] in ("cordon", "taint", "delete")], rig.cluster.effects
    assert [p for _, p in kinds_and_phases(done)[2:]] == ["Planned"] * 4


def test_a_new_executor_after_a_crash_keeps_the_first_ones_mark_and_deadline() -> None:
    """The operator restarted mid-wait: the redo waits for the same step until the same deadline (it
    does not start a new wait from its own start), and a checkpoint saved meanwhile ends the wait."""
    rig = throttled_rig()
    m = monitor_with(slowNodeCheckpointWait="60s")
    rig.run(slow_record(m, gpu="2"), m)
    late = again(rig, m, 61)
    assert late["phase"] == Phase.FAILED and "within 60s" in late["steps"][1]["detail"], late

    rig = throttled_rig()
    rig.run(slow_record(m, gpu="2"), m)
    for pod in ("job-0", "job-1"):  # saved while no operator looked
        rig.cluster.trainer_saves(rig.cluster.sidecar[pod], "incremental")
    done = again(rig, m, 30)
    assert done["phase"] == Phase.SUCCEEDED, done
    assert done["steps"][1]["progress"] == {"pastStep": CKPT_STEP, "since": T0}


def test_an_unconfirmed_gpu_claim_waits_for_nothing_and_touches_nothing() -> None:
    rig = Rig()  # the sidecar on gpu-a saw no throttling
    m = monitor_with()
    done = rig.run(slow_record(m, gpu="2"), m)
    assert done["phase"] == Phase.FAILED
    assert done["steps"][0]["detail"].startswith(f"unconfirmed: no sidecar on gpu-a saw {THROTTLED} on GPU 2")
    assert rig.cluster.effects == []


@pytest.mark.parametrize(
    ("fields", "confirmed"),
    [
        # job-0 computes 1.2 s a step (1.5 s, 20% of it waiting), job-1 0.75 s (half of its 1.5 s waiting)
        ({"job-0": (1.5, 0.2), "job-1": (1.5, 0.5)}, True),
        ({"job-0": (1.5, 0.3), "job-1": (1.5, 0.3)}, False),  # the whole gang alike: no straggler
        ({"job-0": (3.0, 0.3), "job-1": (3.0, 0.3)}, False),  # a whole gang slowed: still no straggler
        ({"job-1": (1.5, 0.5)}, False),  # the claimed rank reports no step time
    ],
)
def test_a_straggler_is_confirmed_by_the_step_times_the_sidecars_report(
    fields: dict[str, tuple[float, float]], confirmed: bool
) -> None:
    rig = Rig()
    for pod, (step_time, ratio) in fields.items():
        rig.cluster.trainer_fields[pod] = {"step_time_s": step_time, "allreduce_time_ratio": ratio}
    rig.cluster.periodic_every = 1
    m = monitor_with()
    done = rig.run(slow_record(m, STRAGGLER_ALERT, pod="job-0", rank="0"), m)
    first = done["steps"][0]
    if confirmed:
        assert first["phase"] == Phase.SUCCEEDED
        assert first["detail"].startswith("confirmed by the sidecars' step times: job-0 computes 1.2s a step")
    else:
        assert first["phase"] == Phase.FAILED and done["phase"] == Phase.FAILED
        assert first["detail"].startswith(f"unconfirmed: {STRAGGLER_ALERT} job-0")
        assert not [e for e in rig.cluster.effects if e[0] in ("cordon", "delete")]


class History:
    def __init__(self, saw: bool) -> None:
        self.seen = saw
        self.asked: list[tuple[str, ...]] = []

    def saw(self, alert: str, namespace: str, training_job: str, node: str, gpu: str = "") -> bool:
        self.asked.append((alert, namespace, training_job, node))
        return self.seen

    def last_saved_step(self, namespace: str, training_job: str, pod: str) -> float | None:
        return None

    def where(self) -> str:
        return "Prometheus http://prom"


@pytest.mark.parametrize("saw", [True, False])
def test_a_straggler_the_views_do_not_show_is_confirmed_by_the_jobs_rule_or_refused(saw: bool) -> None:
    rig = Rig()
    rig.history = History(saw)
    m = monitor_with()
    done = rig.run(slow_record(m, STRAGGLER_ALERT, pod="job-0", rank="0"), m)
    assert rig.history.asked == [(STRAGGLER_ALERT, "ml", "llama-pretrain", "gpu-a")]
    first = done["steps"][0]
    if saw:
        assert first["phase"] == Phase.SUCCEEDED and "confirmed by Prometheus http://prom" in first["detail"]
    else:
        assert done["phase"] == Phase.FAILED and "holds no StragglerRank of the job" in first["detail"]


def test_a_claimed_pod_not_on_the_claimed_node_is_not_confirmed() -> None:
    rig = Rig()
    rig.cluster.trainer_fields = {"job-0": {"step_time_s": 1.0}, "job-1": {"step_time_s": 3.0}}
    m = monitor_with()
    done = rig.run(slow_record(m, STRAGGLER_ALERT, pod="job-1", rank="1"), m)  # job-1 runs on gpu-b
    assert done["phase"] == Phase.FAILED
    assert "no running sidecar of job-1 on gpu-a" in done["steps"][0]["detail"]


def test_dry_run_says_what_it_would_do_and_calls_nothing() -> None:
    rig = Rig()
    m = monitor_with(dryRun=True, slowNodeCheckpointWait="30m")
    done = rig.run(slow_record(m, gpu="2"), m)
    assert rig.cluster.effects == []
    assert done["steps"][1]["detail"] == (
        "would wait up to 1800s for every rank of app=llama-pretrain to save its next periodic checkpoint"
        " (asking for none), and do nothing more if none comes"
    )
    straggler = {
        "kind": "ConfirmFault",
        "params": {"node": "gpu-a", "alert": STRAGGLER_ALERT, "pod": "job-0"},
    }
    assert would(straggler, m, 300).startswith(f"would confirm {STRAGGLER_ALERT} job-0 from the step times")


# ---- the pure decision -------------------------------------------------------------------------------


def view(step_time: Any, ratio: Any = None) -> dict[str, Any]:
    return {"step_time_s": step_time, "allreduce_time_ratio": ratio}


def test_the_gap_is_measured_against_the_median_of_the_peers() -> None:
    peers = {f"p{i}": view(1.0, 0.2) for i in range(7)}  # 0.8 s of own compute each
    assert straggler_evidence({**peers, "s": view(1.0, 0.1)}, ["s"])[0] == "s"  # 0.9: 12.5% slower
    assert straggler_evidence({**peers, "s": view(1.0, 0.15)}, ["s"])[0] == ""  # 0.85: 6%
    one_slow_peer = {**peers, "p0": view(5.0, 0.0)}
    assert straggler_evidence({**one_slow_peer, "s": view(1.0, 0.1)}, ["s"])[0] == "s", (
        "the median, not the mean"
    )


@pytest.mark.parametrize("bad", [None, "1.0", True, -1.0, 0.0, float("nan")])
def test_a_step_time_that_is_no_number_confirms_nothing(bad: Any) -> None:
    assert straggler_evidence({"s": view(bad), "p": view(1.0)}, ["s"])[0] == ""


def test_without_a_collective_share_the_wall_time_counts() -> None:
    assert straggler_evidence({"s": view(1.5, "x"), "p": view(1.0)}, ["s"])[0] == "s"
