"""How a monitor's mode and its policies combine into the effective thresholds."""

from __future__ import annotations

from tests.conftest import monitor, policy
from trainguard.render.policy import effective_policy
from trainguard.render.prometheus import rule_group


def params(mode: str, *policies_changes: dict[str, object]) -> dict[str, dict[str, float]]:
    m = monitor(**{"spec.mode": mode})
    eff = effective_policy(m, [policy(**c) for c in policies_changes] or [policy()])
    return {a.name: a.params for a in eff.alerts if a.enabled}


def test_inference_profile_raises_memory_thresholds() -> None:
    p = params("inference")
    assert p["GPUMemoryCritical"]["ratio"] == 0.99
    assert p["GPUMemoryPressure"]["ratio"] == 0.97
    assert "TrainingLossNonFinite" not in p and "InferenceLatencyHigh" in p
    training = params("training")
    assert training["GPUMemoryCritical"]["ratio"] == 0.95 and "InferenceLatencyHigh" not in training


def test_policy_overrides_the_mode_profile_and_later_policies_win() -> None:
    first = {"spec.alerts": [{"name": "GPUMemoryCritical", "threshold": 0.9}]}
    second = {"metadata.name": "second", "spec.alerts": [{"name": "GPUMemoryCritical", "threshold": 0.93}]}
    assert params("inference", first)["GPUMemoryCritical"]["ratio"] == 0.9
    assert params("inference", first, second)["GPUMemoryCritical"]["ratio"] == 0.93


def test_finetuning_profile_and_warmup() -> None:
    m = monitor(**{"spec.mode": "finetuning"})
    group = rule_group(m, effective_policy(m, [policy()]))
    stale = next(r for r in group["rules"] if r.get("alert") == "CheckpointStale")
    assert "> on(namespace, training_job) 3000 /" in stale["expr"]
    drop = next(r for r in group["rules"] if r.get("alert") == "TrainingThroughputDrop")
    assert "trainguard:train_step:max{" in drop["expr"] and "> 100" in drop["expr"]


def test_receivers_follow_roles_unless_a_route_names_them() -> None:
    m = monitor()
    eff = effective_policy(m, [policy()])
    assert [r.receiver.name for r in eff.receivers_for("P0")] == ["oncall-phone", "im"]
    assert [r.receiver.name for r in eff.receivers_for("P3")] == []
    routed = effective_policy(m, [policy(**{"spec.routes": [{"severity": "P3", "receivers": ["ticket"]}]})])
    assert [r.receiver.name for r in routed.receivers_for("P3")] == ["ticket"]
