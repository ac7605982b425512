"""The throughput drop split into data, communication, GPU and host shares of the lost step time."""

from __future__ import annotations

import pytest

from tests.diagnosis.traces import AT, causes, trace
from trainguard.diagnosis import Cause, Series, Snapshot, labels_of
from trainguard.diagnosis import signals as sig
from trainguard.diagnosis.throughput import split, throughput_drop

SEEDS = range(6)


def _flat(metric: str, before: float, now: float, **labels: str) -> Series:
    pts = tuple((AT - 1800 + 15 * i, before if AT - 1800 + 15 * i < AT - 600 else now) for i in range(121))
    return Series(metric, labels_of({"pod": "p-0", "node": "n", **labels}), pts)


def test_the_split_is_exact_arithmetic_on_the_step_time() -> None:
    # T0 = 1 s (data 0.05, collectives 0.15); T1 = 2 s with data 0.55 and collectives 0.65 s:
    # of the 1 s gained, 0.5 went to data and 0.5 to collectives
    snap = Snapshot(
        AT,
        (
            _flat(sig.THROUGHPUT, 4000, 2000),
            _flat(sig.DATA_WAIT, 0.05, 0.55 / 2),
            _flat(sig.ALLREDUCE, 0.15, 0.65 / 2),
        ),
    )
    result = split(snap)
    assert result is not None
    assert result.drop == pytest.approx(0.5)
    assert result.shares[Cause.THROUGHPUT_DATA] == pytest.approx(0.5)
    assert result.shares[Cause.THROUGHPUT_COMMUNICATION] == pytest.approx(0.5)


def test_compute_goes_to_the_gpu_only_on_the_gpu_s_own_signals() -> None:
    base = (
        _flat(sig.THROUGHPUT, 4000, 2500),
        _flat(sig.DATA_WAIT, 0.05, 0.05 / 1.6),
        _flat(sig.ALLREDUCE, 0.15, 0.15 / 1.6),
    )
    assert throughput_drop(Snapshot(AT, base)) == []  # compute grew, but nothing says where
    clock = _flat(sig.SM_CLOCK, 1980, 1300, gpu="0")
    [finding] = throughput_drop(Snapshot(AT, (*base, clock)))
    assert finding.cause is Cause.THROUGHPUT_GPU and finding.share == pytest.approx(1.0)
    assert any(e.metric == sig.SM_CLOCK and e.value == 1300 for e in finding.evidence)


@pytest.mark.parametrize(
    ("scenario", "cause"),
    [
        ("throughput-data", Cause.THROUGHPUT_DATA),
        ("throughput-comm", Cause.THROUGHPUT_COMMUNICATION),
        ("throughput-gpu", Cause.THROUGHPUT_GPU),
        ("throughput-host", Cause.THROUGHPUT_HOST),
    ],
)
@pytest.mark.parametrize("seed", SEEDS)
def test_the_dominant_share_is_the_injected_cause(scenario: str, cause: Cause, seed: int) -> None:
    findings = throughput_drop(trace(scenario, seed).snapshot)
    assert [f.cause for f in findings] == [cause]
    assert findings[0].share is not None and findings[0].share > 0.6
    assert findings[0].evidence[0].metric == sig.THROUGHPUT


@pytest.mark.parametrize("seed", SEEDS)
def test_network_evidence_names_nic_loss_or_ecn(seed: int) -> None:
    [finding] = throughput_drop(trace("throughput-comm", seed).snapshot)
    assert {sig.PACKET_LOSS, sig.ECN_MARKED} & {e.metric for e in finding.evidence}
    assert sig.COLLECTIVE_P99 in {e.metric for e in finding.evidence}


@pytest.mark.parametrize("seed", SEEDS)
def test_two_causes_at_once_are_both_named(seed: int) -> None:
    assert causes(trace("mixed-data-gpu", seed)) == {Cause.THROUGHPUT_DATA, Cause.THROUGHPUT_GPU}


@pytest.mark.parametrize("scenario", ["small-slowdown", "healthy", "noisy", "hardware", "uneven-ranks"])
@pytest.mark.parametrize("seed", SEEDS)
def test_no_split_without_a_drop_past_the_deviation_threshold(scenario: str, seed: int) -> None:
    assert throughput_drop(trace(scenario, seed).snapshot) == []
