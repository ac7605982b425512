"""The straggler: one rank far from its peers by a median/MAD test, named with its rank and node."""

from __future__ import annotations

import pytest

from tests.diagnosis.traces import causes, pod_name, trace
from trainguard.diagnosis import Cause, diagnose
from trainguard.diagnosis import signals as sig
from trainguard.diagnosis.model import Series, Snapshot, labels_of
from trainguard.diagnosis.robust import robust_z
from trainguard.diagnosis.straggler import rank_of, slow_seconds, straggler

SEEDS = range(8)


def test_robust_z_singles_out_one_rank_among_noisy_peers() -> None:
    z = robust_z([0.27, 0.26, 0.28, 0.27, 0.15, 0.26, 0.27, 0.28])
    assert min(range(8), key=lambda i: z[i]) == 4 and z[4] < -3.5
    assert all(abs(v) < 2 for i, v in enumerate(z) if i != 4)


@pytest.mark.parametrize("seed", SEEDS)
def test_names_the_slow_rank_and_its_node(seed: int) -> None:
    t = trace("straggler", seed)
    [finding] = straggler(t.snapshot)
    assert (finding.pod, finding.node) == (t.expected.pod, t.expected.node)
    assert f"rank {rank_of(t.expected.pod)}" in finding.summary
    assert sig.ALLREDUCE in {e.metric for e in finding.evidence}


@pytest.mark.parametrize("seed", SEEDS)
def test_peers_waiting_is_not_reported_as_a_network_problem(seed: int) -> None:
    t = trace("straggler", seed)
    found = diagnose(t.snapshot)
    assert Cause.THROUGHPUT_COMMUNICATION not in {f.cause for f in found}
    assert found[0].cause is Cause.STRAGGLER


@pytest.mark.parametrize(
    "scenario", ["uneven-ranks", "healthy", "noisy", "throughput-gpu", "throughput-comm"]
)
@pytest.mark.parametrize("seed", SEEDS)
def test_quiet_when_no_single_rank_stands_out(scenario: str, seed: int) -> None:
    assert Cause.STRAGGLER not in causes(trace(scenario, seed))


def test_rank_comes_from_the_pod_name() -> None:
    assert rank_of(pod_name(7)) == "7" and rank_of("launcher") == "?"


# ---- StragglerRank's own series: the report names the rank the alert names ----

AT = 1_760_000_000.0
JOB_LABELS = {"namespace": "research", "training_job": "llm"}


def _excess(rank: int, values: list[float]) -> Series:
    """A rank's recorded excess, one sample every 15 s, the last at AT."""
    labels = JOB_LABELS | {"pod": pod_name(rank), "node": f"gpu-node-{rank // 4}"}
    n = len(values)
    return Series(
        sig.OWN_EXCESS, labels_of(labels), tuple((AT - 15.0 * (n - 1 - i), v) for i, v in enumerate(values))
    )


def _spread(value: float, n: int = 41) -> Series:
    return Series(
        sig.OWN_SPREAD, labels_of(JOB_LABELS), tuple((AT - 15.0 * (n - 1 - i), value) for i in range(n))
    )


def _snap(*series: Series) -> Snapshot:
    return Snapshot(AT, series)


def _quiet(rank: int) -> Series:
    return _excess(rank, [0.005 * ((rank + i) % 3 - 1) for i in range(41)])


def test_names_the_rank_slow_for_the_held_time() -> None:
    """Rank 5 was 10% slower for the last 5 minutes (20 samples), pauses (zeros) between: held 300 s."""
    slow = [0.0] * 21 + [0.1 if i % 5 else 0.0 for i in range(20)] + []
    snap = _snap(*(_quiet(r) for r in range(8) if r != 5), _excess(5, slow), _spread(0.01))
    [finding] = straggler(snap)
    assert (finding.pod, finding.node) == (pod_name(5), "gpu-node-1")
    assert finding.evidence[0].metric == sig.OWN_EXCESS
    assert "rank 5 " in finding.summary


def test_quiet_under_the_held_time_or_within_the_gangs_spread() -> None:
    """Two minutes slow (a transient) is under held_seconds; 10% within a spread of 4% is no outlier."""
    transient = [0.0] * 33 + [0.2] * 8
    assert straggler(_snap(*(_quiet(r) for r in range(7)), _excess(7, transient), _spread(0.01))) == []
    held = [0.1] * 41
    assert straggler(_snap(*(_quiet(r) for r in range(7)), _excess(7, held), _spread(0.04))) == []
    assert [f.pod for f in straggler(_snap(*(_quiet(r) for r in range(7)), _excess(7, held)))] == [
        pod_name(7)
    ]


def test_slow_seconds_counts_the_window_only() -> None:
    old_and_new = [0.3] * 40 + [0.0] * 38 + [0.3] * 2  # the window holds the last 40 samples
    assert slow_seconds(_excess(0, old_and_new), {}, AT) == 30.0
