"""Hardware signals alongside a job fault name the node and the GPU; either one alone does not."""

from __future__ import annotations

import pytest

from tests.diagnosis.traces import AT, trace
from trainguard.diagnosis import Cause, JobEvent, Series, Snapshot, labels_of
from trainguard.diagnosis import signals as sig
from trainguard.diagnosis.hardware import hardware

SEEDS = range(8)


@pytest.mark.parametrize("seed", SEEDS)
def test_names_the_node_and_gpu_of_the_injected_fault(seed: int) -> None:
    t = trace("hardware", seed)
    [finding] = hardware(t.snapshot)
    assert finding.cause is Cause.HARDWARE
    assert (finding.node, finding.gpu) == (t.expected.node, t.expected.gpu)
    assert finding.confidence >= 0.65
    assert finding.evidence and all(dict(e.labels).get("gpu") == finding.gpu for e in finding.evidence)


@pytest.mark.parametrize(
    "scenario", ["hardware-without-fault", "fault-without-hardware", "benign-xid", "healthy"]
)
@pytest.mark.parametrize("seed", SEEDS)
def test_quiet_without_both_a_hardware_signal_and_a_job_fault(scenario: str, seed: int) -> None:
    assert hardware(trace(scenario, seed).snapshot) == []


def _gpu_series(metric: str, values: list[float]) -> Series:
    labels = labels_of({"node": "gpu-node-3", "gpu": "5", "pod": "w-1", "Hostname": "gpu-node-3"})
    return Series(metric, labels, tuple((AT - 300 + 60 * i, v) for i, v in enumerate(values)))


def test_a_dbe_increase_before_a_failed_pod_on_the_same_node_is_strong() -> None:
    dbe = _gpu_series(sig.ECC_DBE, [0, 0, 2, 2, 2])
    event = JobEvent(AT - 100, "Failed", "w-1", "gpu-node-3")
    [finding] = hardware(Snapshot(AT, (dbe,), (event,)))
    assert (finding.node, finding.gpu) == ("gpu-node-3", "5")
    assert finding.confidence > 0.9
    assert finding.evidence[0].value == 2 and "double-bit" in finding.evidence[0].note


def test_single_bit_errors_count_only_as_a_storm() -> None:
    event = JobEvent(AT - 100, "Failed", "w-1", "gpu-node-3")
    few = _gpu_series(sig.ECC_SBE, [3, 4, 5, 6, 7])
    storm = _gpu_series(sig.ECC_SBE, [3, 4, 50, 60, 70])
    assert hardware(Snapshot(AT, (few,), (event,))) == []
    assert [f.gpu for f in hardware(Snapshot(AT, (storm,), (event,)))] == ["5"]


def test_the_alert_itself_can_be_the_job_fault() -> None:
    lost = _gpu_series(sig.GPU_LOST, [0, 0, 1, 1, 1])
    assert hardware(Snapshot(AT, (lost,))) == []
    assert len(hardware(Snapshot(AT, (lost,), alert="TrainingJobStalled"))) == 1
