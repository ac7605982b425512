"""A node fault of a JobSet whose pods run `trainguard launch` (executor.py on tests/remediation/fakes.py's
FakeCluster): ReplacePod replaces the faulty node's pod and puts the generation the gang restarts as in
the replacement's resume-from pointer, RestartInPlace (`rejoin`) restarts the healthy ranks' trainers
in place as that generation and waits until the replacement's launcher runs it too. Where a healthy
rank has no launcher, nothing is posted and the owner's own failure policy restarts the gang."""

from __future__ import annotations

import json
from typing import Any

from tests.remediation.fakes import CKPT_STEP, Rig, kinds_and_phases, p0_signal, step_done
from tests.remediation.test_replace_pod import jobset_monitor, planned, step
from trainguard.api.monitor import StepProgress
from trainguard.catalog.kubernetes import RESUME_FROM
from trainguard.remediation.executor import REJOIN_TIMEOUT_S
from trainguard.remediation.model import Phase


def words(rig: Rig) -> list[tuple[str, ...]]:
    return [e for e in rig.cluster.effects if e[0] in ("word", "restarted")]


def pointers(rig: Rig) -> list[dict[str, Any]]:
    return [json.loads(a[RESUME_FROM]) for a in rig.cluster.annotations_written if a.get(RESUME_FROM)]


def test_the_healthy_rank_restarts_in_place_and_the_replacement_joins_its_generation() -> None:
    rig = Rig(launchers=True)
    rig.cluster.as_jobset()
    monitor = jobset_monitor()
    done = rig.run(planned(rig, monitor, p0_signal("GPUCriticalXid")), monitor)

    assert done["phase"] == Phase.SUCCEEDED, done
    assert kinds_and_phases(done)[-3:] == [
        ("ReplacePod", Phase.SUCCEEDED),
        ("RestartInPlace", Phase.SUCCEEDED),
        ("ConfirmPlacement", Phase.SUCCEEDED),
    ]
    saved = CKPT_STEP  # every rank has it (the healthy rank's emergency 1100 is not the replacement's)
    assert pointers(rig)[0] == {
        "step": saved, "kind": "full", "path": f"/ckpt/{saved}", "ts": pointers(rig)[0]["ts"],
        "generation": 1, "record": done["id"],
    }, "the replacement's sidecar is told the generation before its launcher starts"  # fmt: skip
    assert step(done, "ReplacePod")["progress"]["generation"] == 1
    assert step(done, "RestartInPlace")["progress"] == {"generation": 1, "size": 2}
    assert words(rig) == [("word", "job-1", "1"), ("restarted", "job-1", "1")], (
        "only the healthy rank is told: the replacement's first trainer already runs generation 1"
    )
    replacement = next(p for p in rig.cluster.sidecar if p.startswith("job-0-r"))
    assert rig.cluster.sidecar[replacement]["launcher"]["generation"] == 1
    assert rig.cluster.sidecar["job-1"]["restart"]["resume_from"]["step"] == saved
    assert rig.cluster.sidecar[replacement]["resume_from"]["step"] == saved, "both resume from the same step"
    assert step(done, "RestartInPlace")["detail"] == (
        f"generation 1 runs on {replacement}, job-1 (the replacement joined it), restarted in place from step {saved}"
    )
    assert step(done, "ConfirmPlacement")["detail"].startswith(f"placed {replacement}->gpu-c")


def test_a_replacement_that_started_before_the_word_is_told_too() -> None:
    """A sidecar from before this version ignores the pointer's generation: its launcher starts at 0,
    and the word restarts it as the gang's generation."""
    rig = Rig(launchers=True)
    rig.cluster.as_jobset()
    monitor = jobset_monitor()
    recreate = rig.cluster._recreate

    def older_sidecar(index: int, job: str | None = None) -> None:
        recreate(index, job)
        name = max(rig.cluster.sidecar, key=lambda p: rig.cluster.pods[p]["created"])
        rig.cluster.sidecar[name]["restart"] = None
        rig.cluster.sidecar[name]["launcher"]["generation"] = 0

    rig.cluster._recreate = older_sidecar  # type: ignore[method-assign]
    done = rig.run(planned(rig, monitor, p0_signal("GPUCriticalXid")), monitor)
    assert done["phase"] == Phase.SUCCEEDED, done
    replacement = next(p for p in rig.cluster.sidecar if p.startswith("job-0-r"))
    assert ("word", replacement, "1") in words(rig) and ("restarted", replacement, "1") in words(rig)


def test_a_healthy_rank_without_a_launcher_leaves_the_restart_to_the_owner() -> None:
    rig = Rig(launchers={"job-0"})  # the faulty node's pod has one, the healthy one does not
    rig.cluster.as_jobset()
    monitor = jobset_monitor()
    done = rig.run(planned(rig, monitor, p0_signal("GPUCriticalXid")), monitor)

    assert done["phase"] == Phase.SUCCEEDED, done
    assert step(done, "RestartInPlace")["phase"] == Phase.SKIPPED
    assert step(done, "RestartInPlace")["detail"] == (
        "no live trainguard launch in job-1; the healthy ranks are left to the owner's failure policy"
        " (their pods restart when they fail)"
    )
    assert "generation" not in pointers(rig)[0] and words(rig) == [], "never a partial restart in place"
    assert step(done, "ConfirmPlacement")["phase"] == Phase.SUCCEEDED


def test_a_replacement_that_never_runs_the_generation_fails_the_step_after_the_timeout() -> None:
    rig = Rig(launchers=True)
    rig.cluster.as_jobset()
    rig.cluster.new_launchers = False  # an image without trainguard launch
    monitor = jobset_monitor()
    done = rig.run(planned(rig, monitor, p0_signal("GPUCriticalXid")), monitor)

    assert done["phase"] == Phase.FAILED
    detail = step(done, "RestartInPlace")["detail"]
    assert detail.startswith("generation 1 was posted, then not started by job-0-r"), detail
    assert detail.endswith(f"within {REJOIN_TIMEOUT_S:g}s")
    assert ("restarted", "job-1", "1") in words(rig)


def test_the_healthy_rank_resumes_from_the_checkpoint_the_replacement_was_given() -> None:
    """The faulty rank trains on until its pod is gone (an eviction's grace), and the healthy rank with
    it: it saves past the pointer the replacement was created with. The gang still resumes from one
    step, the pointer's, not the healthy rank's newest (the replacement has no shard of that one)."""
    rig = Rig(launchers=True)
    rig.cluster.as_jobset()
    monitor = jobset_monitor()
    later: list[float] = []
    rig.store.when(
        step_done("ReplacePod"),
        lambda _: later.append(rig.cluster.trainer_saves(rig.cluster.sidecar["job-1"], "incremental")),
    )
    done = rig.run(planned(rig, monitor, p0_signal("GPUCriticalXid")), monitor)

    assert done["phase"] == Phase.SUCCEEDED, done
    given = pointers(rig)[0]["step"]
    assert later and later[0] > given, "the healthy rank saved past the pointer"
    assert rig.cluster.sidecar["job-1"]["restart"]["resume_from"]["step"] == given
    assert step(done, "RestartInPlace")["detail"].endswith(f"restarted in place from step {given:g}")


def test_every_progress_field_the_rejoin_writes_is_in_the_crd_schema() -> None:
    """The apiserver prunes a progress field its schema lacks: a redo would find it gone (`size` and
    ReplacePod's `resumeFrom` were, once)."""
    rig = Rig(launchers=True)
    rig.cluster.as_jobset()
    monitor = jobset_monitor()
    done = rig.run(planned(rig, monitor, p0_signal("GPUCriticalXid")), monitor)
    schema = {f.alias or name for name, f in StepProgress.model_fields.items()}
    written = {k for s in done["steps"] for k in (s.get("progress") or {})}
    assert {"generation", "size", "resumeFrom"} <= written
    assert written <= schema, written - schema
    assert json.loads(step(done, "ReplacePod")["progress"]["resumeFrom"])["step"] == pointers(rig)[0]["step"]


def test_a_replacement_admitted_without_the_pointer_joins_by_the_word_and_is_not_recreated() -> None:
    """The webhook's cache had not seen ReplacePod's progress: the replacement starts holding no pointer
    and no generation. The rejoin's word gives it both, so ConfirmPlacement does not take it for a pod
    started from fresh weights (it deletes such pods of a gang restart: test_pointer_checked_at_placement)."""
    rig = Rig(launchers=True)
    rig.cluster.as_jobset()
    rig.cluster.admitted_pointer = lambda: None
    monitor = jobset_monitor()
    done = rig.run(planned(rig, monitor, p0_signal("GPUCriticalXid")), monitor)

    assert done["phase"] == Phase.SUCCEEDED, done
    replacement = next(p for p in rig.cluster.sidecar if p.startswith("job-0-r"))
    assert ("word", replacement, "1") in words(rig), "told the generation and checkpoint by the word"
    assert not [e for e in rig.cluster.effects if e[0] == "delete" and e[1] == replacement]
    assert step(done, "ConfirmPlacement")["detail"].startswith(f"placed {replacement}->")
