"""How a monitor's mode and its policies combine into the effective thresholds."""

from __future__ import annotations

from tests.conftest import monitor, policy
from trainguard.api import AlertPolicy
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


def test_a_later_policy_as_the_apiserver_stores_it_keeps_an_earlier_policys_quiet_hours() -> None:
    """The CRD carries the defaults, so a stored policy has every section set: defaults must not override."""
    night = {
        "spec.quietHours": {"enabled": True, "timezone": "Asia/Shanghai"},
        "spec.escalation": {"after": "5m"},
    }
    stored = policy(**{"metadata.name": "stored"}).spec.model_dump(by_alias=True)
    later = AlertPolicy.model_validate(
        {"apiVersion": "trainguard.io/v1alpha1", "kind": "AlertPolicy",
         "metadata": {"name": "stored", "namespace": "ml"}, "spec": stored}
    )  # fmt: skip
    assert "quiet_hours" in later.spec.model_fields_set, "the defaults are written out, as the apiserver does"
    eff = effective_policy(monitor(), [policy(**night), later])
    assert eff.quiet_hours.enabled and eff.quiet_hours.timezone == "Asia/Shanghai"
    assert eff.escalation.after == "5m"
    # a later policy that does change a section still wins
    off = policy(**{"metadata.name": "off", "spec.quietHours": {"enabled": True, "timezone": "UTC"}})
    assert effective_policy(monitor(), [policy(**night), off]).quiet_hours.timezone == "UTC"
