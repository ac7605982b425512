"""The resume-from pointer the webhook gives a restart's new pods comes from the monitor's status (the
restart step's progress, controller/admission.py restart_of), not from an API read of the workload: it
must be the very pointer the executor writes on the workload, for every kind of restart by new pods, and
none once the new pods are placed (executor.py on tests/remediation/fakes.py's FakeCluster)."""

from __future__ import annotations

from typing import Any

from tests.clock import T0
from tests.remediation.fakes import Rig, job_monitor, p0_signal, status_pointer
from tests.remediation.test_executor import OLDER, record_of
from tests.remediation.test_replace_pod import jobset_monitor, planned
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.alerts import TRAINING_INTERRUPTED
from trainguard.catalog.events import fingerprint
from trainguard.catalog.kubernetes import RESUME_FROM
from trainguard.remediation.model import Phase, Signal, Source, Step, StepKind


def run_watching(
    rig: Rig, record: dict[str, Any], monitor: TrainingJobMonitor
) -> tuple[dict[str, Any], list[Any]]:
    """Carry the record out; returns it done and the pointer each new pod was given, as it was created."""
    given: list[Any] = []
    webhook = rig.cluster.admitted_pointer

    def admitted() -> str | None:
        pointer = webhook()
        given.append(pointer)
        return pointer

    rig.cluster.admitted_pointer = admitted
    return rig.run(record, monitor), given


def written(rig: Rig) -> list[str]:
    return [str(a[RESUME_FROM]) for a in rig.cluster.annotations_written if a.get(RESUME_FROM)]


def after(rig: Rig) -> str | None:
    return status_pointer({"remediations": list(rig.store.records.values())}, rig.clock())


def interrupted() -> Signal:
    labels = {
        "alertname": TRAINING_INTERRUPTED,
        "severity": "P0",
        "namespace": "ml",
        "training_job": "llama-pretrain",
    }
    return Signal(TRAINING_INTERRUPTED, "P0", labels, fingerprint(labels), Source.OPERATOR, T0 - 5)


def test_a_gang_restart_of_a_job_gives_its_new_pods_the_pointer_written_on_the_job() -> None:
    rig = Rig()
    monitor = job_monitor()
    done, given = run_watching(rig, planned(rig, monitor, p0_signal("GPUCriticalXid")), monitor)
    assert done["phase"] == Phase.SUCCEEDED, done
    assert len(written(rig)) == 1 and given == written(rig) * 2, "both new pods, the very JSON on the Job"
    assert after(rig) is None, "placed: a pod recreated later for another reason gets no pointer"


def test_a_jobsets_gang_restart_gives_the_recreated_pods_the_pointer_written_on_the_jobset() -> None:
    rig = Rig()
    rig.cluster.as_jobset()
    monitor = jobset_monitor()
    done, given = run_watching(rig, planned(rig, monitor, interrupted()), monitor)
    assert done["phase"] == Phase.SUCCEEDED, done
    assert len(written(rig)) == 1 and given == written(rig) * 2
    assert after(rig) is None


def test_a_replacement_that_rejoins_is_given_the_pointer_with_its_generation() -> None:
    rig = Rig(launchers=True)
    rig.cluster.as_jobset()
    monitor = jobset_monitor()
    done, given = run_watching(rig, planned(rig, monitor, p0_signal("GPUCriticalXid")), monitor)
    assert done["phase"] == Phase.SUCCEEDED, done
    assert given == written(rig), "the one replacement"
    assert '"generation": 1' in given[0] and f'"record": "{done["id"]}"' in given[0]
    assert after(rig) is None


def test_a_restart_with_no_checkpoint_every_rank_has_gives_no_pointer() -> None:
    rig = Rig()
    rig.cluster.sidecar["job-1"]["checkpoints"], rig.cluster.sidecar["job-1"]["resume_from"] = [OLDER], OLDER
    record = record_of(Step(StepKind.RESTART_GANG, {"avoid": ""}), Step(StepKind.CONFIRM_PLACEMENT))
    done, given = run_watching(rig, record, job_monitor())
    assert written(rig) == [] and given == [None, None], done["steps"]
    assert done["steps"][0]["progress"]["resumeFrom"] == "null", (
        "said, so the webhook asks nothing of the API"
    )
