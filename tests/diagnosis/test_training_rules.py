"""The data-pipeline and model/hyper-parameter rules on seeded traces, and where they must stay quiet."""

from __future__ import annotations

import pytest

from tests.diagnosis.traces import causes, trace
from trainguard.diagnosis import Cause, diagnose
from trainguard.diagnosis import signals as sig
from trainguard.diagnosis.training import data_pipeline, model_hyperparameters

SEEDS = range(6)


@pytest.mark.parametrize("seed", SEEDS)
def test_data_pipeline_fires_with_loss_and_data_wait_as_evidence(seed: int) -> None:
    [finding] = data_pipeline(trace("data-pipeline", seed).snapshot)
    assert finding.cause is Cause.DATA_PIPELINE
    metrics = {e.metric: e for e in finding.evidence}
    assert {sig.GRAD_NORM, sig.LOSS, sig.DATA_WAIT} <= set(metrics)
    assert metrics[sig.DATA_WAIT].value > 0.2
    loss = metrics[sig.LOSS]
    assert loss.reference is not None and loss.value > 3 * loss.reference
    assert 0.5 <= finding.confidence <= 1


@pytest.mark.parametrize(
    "scenario", ["loss-oscillation-only", "throughput-data", "model-exploding", "noisy", "healthy"]
)
@pytest.mark.parametrize("seed", SEEDS)
def test_data_pipeline_stays_quiet_without_all_three_signs(scenario: str, seed: int) -> None:
    assert data_pipeline(trace(scenario, seed).snapshot) == []


@pytest.mark.parametrize("scenario", ["model-exploding", "model-vanishing"])
@pytest.mark.parametrize("seed", SEEDS)
def test_model_rule_names_the_gradient_norm(scenario: str, seed: int) -> None:
    [finding] = model_hyperparameters(trace(scenario, seed).snapshot)
    assert finding.cause is Cause.MODEL_HYPERPARAMETERS
    assert ("exploding" if scenario == "model-exploding" else "vanishing") in finding.summary
    grad = next(e for e in finding.evidence if e.metric == sig.GRAD_NORM)
    assert grad.reference is not None
    assert (grad.value > 10 * grad.reference) if scenario == "model-exploding" else (grad.value < 1e-4)


@pytest.mark.parametrize("scenario", ["noisy", "data-pipeline", "loss-oscillation-only", "healthy"])
@pytest.mark.parametrize("seed", SEEDS)
def test_model_rule_ignores_a_single_spike_and_a_data_problem(scenario: str, seed: int) -> None:
    assert model_hyperparameters(trace(scenario, seed).snapshot) == []


@pytest.mark.parametrize("seed", SEEDS)
def test_a_data_problem_is_not_blamed_on_the_model(seed: int) -> None:
    found = causes(trace("data-pipeline", seed))
    assert Cause.DATA_PIPELINE in found and Cause.MODEL_HYPERPARAMETERS not in found
    assert [f.cause for f in diagnose(trace("healthy", seed).snapshot)] == []
