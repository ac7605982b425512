"""The straggler: one rank far from its peers by a median/MAD test, named with its rank and node."""

from __future__ import annotations

import pytest

from tests.diagnosis.traces import causes, pod_name, trace
from trainguard.diagnosis import Cause, diagnose
from trainguard.diagnosis import signals as sig
from trainguard.diagnosis.robust import robust_z
from trainguard.diagnosis.straggler import rank_of, straggler

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
