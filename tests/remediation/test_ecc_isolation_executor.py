"""The executor carries an eccDegraded record out on the fake cluster of test_executor.py: every rank,
the degraded node's included, is asked for a checkpoint and waited for; only then is the node cordoned
and tainted; no pod is deleted. A timeout does not hold the isolation back, a crash anywhere resumes
with every effect once, and a dry run calls nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.clock import T0
from tests.remediation.fakes import CKPT_STEP, Crash, Rig, job_monitor, kinds_and_phases
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.events import fingerprint
from trainguard.catalog.kubernetes import CORDON_REASON, CORDONED_BY, FAULTY_TAINT
from trainguard.remediation.model import ClusterState, Phase, Signal, Source
from trainguard.remediation.plan import ECC_DEGRADED, plan
from trainguard.remediation.records import new_record

SBE = "GPUSingleBitECCErrorsHigh"


def ecc_record(monitor: TrainingJobMonitor, node: str = "gpu-a") -> dict[str, Any]:
    """The planner's own plan for the alert (a seam: its params are what the executor reads)."""
    labels = {"alertname": SBE, "severity": "P1", "namespace": "ml", "training_job": "llama-pretrain",
              "node": node, "gpu": "2"}  # fmt: skip
    signal = Signal(SBE, "P1", labels, fingerprint(labels), Source.ALERTMANAGER, T0 - 30)
    p = plan(signal, monitor, ClusterState(now=T0, gpu_nodes=3, job_nodes=frozenset({"gpu-a", "gpu-b"})))
    assert p.p0_class == ECC_DEGRADED and not p.skipped, p
    return new_record(p, T0)


def test_cordon_and_taint_then_checkpoint_from_every_rank_and_no_pod_is_touched() -> None:
    rig = Rig()
    m = job_monitor(**{"spec.remediation": {"emergencyCheckpointTimeout": "30s"}})
    pods_before = dict(rig.cluster.pods)
    done = rig.run(ecc_record(m), m)

    assert done["phase"] == Phase.SUCCEEDED, done
    assert kinds_and_phases(done) == [
        ("Cordon", "Succeeded"), ("Taint", "Succeeded"), ("RequestCheckpoint", "Succeeded")
    ]  # fmt: skip
    effects = rig.cluster.effects
    asked = [e[1] for e in effects if e[0] == "checkpoint-request"]
    assert asked == ["job-0", "job-1"], "the rank on the degraded node is asked too"
    saved = [i for i, e in enumerate(effects) if e[0] == "checkpoint-saved"]
    assert effects[:2] == [("cordon", "gpu-a"), ("taint", "gpu-a")], "no new pod lands there meanwhile"
    assert len(saved) == 2 and min(saved) > 1, effects
    assert not [e for e in effects if e[0] in ("delete", "annotate", "pause", "pin")], effects
    assert rig.cluster.pods == pods_before, "the job keeps running where it is"
    detail = {s["kind"]: s["detail"] for s in done["steps"]}
    assert detail["RequestCheckpoint"] == f"checkpoint step {CKPT_STEP + 100} saved on job-0, job-1"
    node = rig.cluster.nodes["gpu-a"]
    assert node["unschedulable"] and node["annotations"][CORDONED_BY] == done["id"]
    assert node["annotations"][CORDON_REASON] == SBE
    assert node["taints"] == [{"key": FAULTY_TAINT, "value": SBE, "effect": "NoSchedule"}]
    assert not rig.cluster.nodes["gpu-b"]["unschedulable"]


def test_a_checkpoint_that_does_not_come_is_recorded_and_the_node_is_isolated_anyway() -> None:
    rig = Rig(save_after_reads=None)  # the trainers never save
    m = job_monitor(**{"spec.remediation": {"emergencyCheckpointTimeout": "20s"}})
    done = rig.run(ecc_record(m), m)
    assert done["phase"] == Phase.SUCCEEDED
    assert done["steps"][2]["detail"].startswith("timed out after 20s waiting for job-0, job-1")
    assert rig.clock.now >= T0 + 20, "it waited the whole timeout"
    assert rig.cluster.nodes["gpu-a"]["unschedulable"]


def _clean_calls() -> int:
    rig = Rig()
    m = job_monitor()
    rig.run(ecc_record(m), m)
    return rig.cluster.calls


@pytest.mark.parametrize("crash_after", range(1, _clean_calls() + 1))
def test_an_operator_killed_after_any_call_resumes_and_every_effect_happens_once(crash_after: int) -> None:
    rig = Rig()
    m = job_monitor()
    rig.cluster.crash_after = crash_after
    with pytest.raises(Crash):
        rig.run(ecc_record(m), m)
    rig.cluster.crash_after = None
    done = rig.run(rig.store.last, m)
    assert done["phase"] == Phase.SUCCEEDED, done
    once = [e for e in rig.cluster.effects if e[0] in ("cordon", "taint", "checkpoint-request")]
    assert sorted(once) == sorted(set(once)), rig.cluster.effects
    assert ("cordon", "gpu-a") in once and ("taint", "gpu-a") in once


def test_dry_run_says_what_it_would_do_and_calls_nothing() -> None:
    rig = Rig()
    m = job_monitor(**{"spec.remediation": {"dryRun": True, "emergencyCheckpointTimeout": "45s"}})
    done = rig.run(ecc_record(m), m)
    assert rig.cluster.effects == []
    assert [s["detail"] for s in done["steps"]] == [
        f"would cordon node gpu-a ({SBE})",
        f"would taint node gpu-a {FAULTY_TAINT}={SBE}:NoSchedule",
        "would ask the sidecars for a full checkpoint and wait up to 45s",
    ]
