"""spec.remediation.actions.eccDegraded: CordonAfterCheckpoint by default or Notify, nothing else, in
the model and in the generated CRD the apiserver validates with."""

from __future__ import annotations

import pytest

from tests.api.test_models import problems
from tests.conftest import MONITOR, merged, monitor
from trainguard.api.crd import crds


def test_default_is_cordon_after_checkpoint_and_notify_is_accepted() -> None:
    assert monitor().spec.remediation.actions.ecc_degraded == "CordonAfterCheckpoint"
    chosen = monitor(**{"spec.remediation": {"actions": {"eccDegraded": "Notify"}}})
    assert chosen.spec.remediation.actions.ecc_degraded == "Notify"
    assert chosen.spec.remediation.actions.node_fault == "CheckpointCordonReschedule", "others keep defaults"


@pytest.mark.parametrize("action", ["Cordon", "CheckpointCordonReschedule", "cordonAfterCheckpoint", ""])
def test_any_other_action_is_refused_naming_the_field_and_the_choices(action: str) -> None:
    found = problems(merged(MONITOR, **{"spec.remediation": {"actions": {"eccDegraded": action}}}))
    path = "spec.remediation.actions.eccDegraded"
    assert path in found, found
    assert "'CordonAfterCheckpoint'" in found[path] and "'Notify'" in found[path]


def test_the_crd_carries_the_choices_the_default_and_a_description() -> None:
    crd = crds()["trainguard.io_trainingjobmonitors.yaml"]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    actions = spec["properties"]["remediation"]["properties"]["actions"]
    field = actions["properties"]["eccDegraded"]
    assert field["enum"] == ["CordonAfterCheckpoint", "Notify"]
    assert field["default"] == "CordonAfterCheckpoint"
    assert actions["default"]["eccDegraded"] == "CordonAfterCheckpoint"
    assert "GPUSingleBitECCErrorsHigh" in field["description"] and "not restarted" in field["description"]
