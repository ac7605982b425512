"""RestartInPlace against tests/remediation/fakes.py's FakeCluster: where every live pod of the gang runs
`trainguard launch` (its sidecar reports a live launcher), the trainers restart as a new generation from
the checkpoint every rank has and no pod is deleted; where one does not, the step is Skipped, saying
why, and the RestartGang after it restarts the gang by new pods (a NaN's plan has none: training stays
paused at the pin). The generation is in the step's progress before the first word, so a redo posts
the same one."""

from __future__ import annotations

from typing import Any

import pytest

from tests.clock import T0
from tests.remediation.fakes import CKPT_STEP, Crash, Rig, job_monitor, kinds_and_phases, p0_signal
from trainguard.remediation.executor import IN_PLACE_DONE, IN_PLACE_TIMEOUT_S
from trainguard.remediation.model import ClusterState, Phase
from trainguard.remediation.plan import plan
from trainguard.remediation.records import new_record

STATE = ClusterState(now=T0, gpu_nodes=3, job_nodes=frozenset({"gpu-a", "gpu-b"}))


def planned(alert: str) -> dict[str, Any]:
    """The planner's own record for `alert` (a job-wide signal of the sidecar on gpu-a)."""
    return new_record(plan(p0_signal(alert), job_monitor(), STATE), T0)


def effects(rig: Rig, kind: str) -> list[tuple[str, ...]]:
    return [e for e in rig.cluster.effects if e[0] == kind]


def test_an_interruption_restarts_every_trainer_in_place_and_replaces_no_pod() -> None:
    rig = Rig(launchers=True)
    rig.cluster.trainer_saves(rig.cluster.sidecar["job-0"], "full")  # 1100 on rank 0 only
    done = rig.run(planned("TrainingInterrupted"), job_monitor())

    assert kinds_and_phases(done) == [
        ("RestartInPlace", Phase.SUCCEEDED),
        ("RestartGang", Phase.SKIPPED),
        ("ConfirmPlacement", Phase.SKIPPED),
    ]
    assert done["phase"] == Phase.SUCCEEDED
    assert effects(rig, "delete") == [] and rig.cluster.annotations_written == []
    assert effects(rig, "word") == [("word", "job-0", "1"), ("word", "job-1", "1")]
    assert sorted(effects(rig, "restarted")) == [("restarted", "job-0", "1"), ("restarted", "job-1", "1")]
    for pod, sidecar in rig.cluster.sidecar.items():
        word = sidecar["restart"]
        assert word["record"] == done["id"] and word["resume_from"]["step"] == CKPT_STEP, (pod, word)
        assert sidecar["pinned"] and sidecar["resume_from"]["step"] == CKPT_STEP, "the SDK answers it too"
    step = done["steps"][0]
    assert step["progress"] == {"generation": 1}
    assert (
        step["detail"]
        == "generation 1 runs on job-0, job-1, restarted in place from step 1000; no pod was replaced"
    )
    assert done["steps"][1]["detail"] == done["steps"][2]["detail"] == IN_PLACE_DONE


def test_the_next_generation_is_above_every_one_a_sidecar_knows() -> None:
    rig = Rig(launchers=True)
    rig.cluster.sidecar["job-1"]["launcher"]["generation"] = 4  # restarted in place before
    done = rig.run(planned("TrainingInterrupted"), job_monitor())
    assert done["steps"][0]["progress"] == {"generation": 5}
    assert {s["launcher"]["generation"] for s in rig.cluster.sidecar.values()} == {5}


def test_a_pod_without_a_launcher_leaves_the_restart_to_new_pods() -> None:
    rig = Rig(launchers={"job-0"})
    done = rig.run(planned("TrainingInterrupted"), job_monitor())

    assert kinds_and_phases(done) == [
        ("RestartInPlace", Phase.SKIPPED),
        ("RestartGang", Phase.SUCCEEDED),
        ("ConfirmPlacement", Phase.SUCCEEDED),
    ]
    assert done["steps"][0]["detail"] == (
        "no live trainguard launch in job-1; the gang is restarted by new pods instead (RestartGang)"
    )
    assert effects(rig, "word") == [], "never a partial restart in place"
    assert [e[1] for e in effects(rig, "delete")] == ["job-0", "job-1"]


def test_a_gang_that_lost_a_member_is_restarted_by_new_pods() -> None:
    """An OOM kill of a whole container (its launcher with it): the pod Failed, the Job made a replacement
    not running yet. The live ones have launchers, but only new pods make the gang whole."""
    rig = Rig(launchers=True)
    rig.cluster.pods["job-1"]["phase"] = "Failed"
    done = rig.run(planned("TrainingInterrupted"), job_monitor())
    assert done["steps"][0]["phase"] == Phase.SKIPPED
    assert done["steps"][0]["detail"].startswith("job-1 of the gang ended or is being deleted")
    assert done["steps"][1]["phase"] == Phase.SUCCEEDED


def test_launchers_that_do_not_start_the_generation_in_time_leave_it_to_new_pods() -> None:
    rig = Rig(launchers=True, launcher_reads=None)
    done = rig.run(planned("TrainingInterrupted"), job_monitor())
    assert done["steps"][0]["phase"] == Phase.SKIPPED
    assert done["steps"][0]["detail"] == (
        f"generation 1 not started by the launchers of job-0, job-1 within {IN_PLACE_TIMEOUT_S:g}s;"
        " the gang is restarted by new pods instead (RestartGang)"
    )
    assert [e[1] for e in effects(rig, "delete")] == ["job-0", "job-1"], "every pod: no half-restarted gang"


def test_a_nan_is_paused_pinned_then_restarted_in_place_from_the_pin() -> None:
    rig = Rig(launchers=True)
    for sidecar in rig.cluster.sidecar.values():
        rig.cluster.clock.sleep(1)
        rig.cluster.trainer_saves(sidecar, "incremental")  # 1100 on both, saved after the NaN
    done = rig.run(planned("TrainingLossNonFinite"), job_monitor())

    assert kinds_and_phases(done) == [
        ("Pause", Phase.SUCCEEDED),
        ("PinCheckpoint", Phase.SUCCEEDED),
        ("RestartInPlace", Phase.SUCCEEDED),
    ]
    for sidecar in rig.cluster.sidecar.values():
        assert sidecar["restart"]["resume_from"]["step"] == CKPT_STEP, "the pin: saved before the NaN"
        assert sidecar["pause"] is False, "the new generation trains"


def test_without_launchers_a_nan_stays_paused_at_the_pin() -> None:
    rig = Rig()
    done = rig.run(planned("TrainingLossNonFinite"), job_monitor())
    assert done["phase"] == Phase.SUCCEEDED
    assert done["steps"][2]["phase"] == Phase.SKIPPED
    assert done["steps"][2]["detail"] == (
        "no live trainguard launch in job-0, job-1; training stays paused at the pin: restart the job by hand"
    )
    assert all(s["pause"] for s in rig.cluster.sidecar.values())


def test_a_nan_whose_launchers_never_start_the_generation_fails_the_step() -> None:
    rig = Rig(launchers=True, launcher_reads=None)
    done = rig.run(planned("TrainingLossNonFinite"), job_monitor())
    assert done["phase"] == Phase.FAILED
    assert "generation 1 was posted, then: generation 1 not started" in done["steps"][2]["detail"]


def test_a_redo_after_a_crash_posts_the_same_generation_once_to_each_sidecar() -> None:
    rig = Rig(launchers=True, launcher_reads=3)
    record = planned("TrainingInterrupted")
    m = job_monitor()
    crashed = False
    post = rig.cluster.control

    def crash_after_first_word(base_url: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
        nonlocal crashed
        answer = post(base_url, token, body)
        if "restart" in body and not crashed:
            crashed = True
            raise Crash("killed after the first word")
        return answer

    rig.cluster.control = crash_after_first_word  # type: ignore[method-assign]
    with pytest.raises(Crash):
        rig.run(record, m)
    left = rig.store.last
    assert left["steps"][0]["phase"] == Phase.IN_PROGRESS and left["steps"][0]["progress"] == {
        "generation": 1
    }
    done = rig.executor().run(left, m)

    assert done["phase"] == Phase.SUCCEEDED, done
    assert effects(rig, "word") == [("word", "job-0", "1"), ("word", "job-1", "1")], "each sidecar once"
    assert done["steps"][0]["progress"] == {"generation": 1}
    assert effects(rig, "delete") == []
