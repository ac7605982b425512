"""spec.remediation.actions.slowNode: per signal, ReplaceAtCheckpoint (GPU signals' default), ReplaceNow or
Notify (StragglerRank's default), nothing else; slowNodeCheckpointWait a duration. In the model and in the
generated CRD the apiserver validates with."""

from __future__ import annotations

import pytest

from tests.api.test_models import problems
from tests.conftest import MONITOR, merged, monitor
from trainguard.api.crd import crds

LEVELS = ["ReplaceAtCheckpoint", "ReplaceNow", "Notify"]


def test_defaults_replace_a_slow_gpu_at_the_next_checkpoint_and_notify_a_straggler() -> None:
    rem = monitor().spec.remediation
    assert (rem.actions.slow_node.gpu, rem.actions.slow_node.straggler) == ("ReplaceAtCheckpoint", "Notify")
    assert rem.slow_node_checkpoint_wait == "2h"
    chosen = monitor(**{"spec.remediation": {"actions": {"slowNode": {"straggler": "ReplaceNow"}}}})
    assert chosen.spec.remediation.actions.slow_node.straggler == "ReplaceNow"
    assert chosen.spec.remediation.actions.slow_node.gpu == "ReplaceAtCheckpoint", (
        "the other keeps its default"
    )


@pytest.mark.parametrize("field", ["gpu", "straggler"])
@pytest.mark.parametrize("action", ["Cordon", "replaceNow", "CordonAfterCheckpoint", ""])
def test_any_other_action_is_refused_naming_the_field_and_the_choices(field: str, action: str) -> None:
    found = problems(merged(MONITOR, **{"spec.remediation": {"actions": {"slowNode": {field: action}}}}))
    path = f"spec.remediation.actions.slowNode.{field}"
    assert path in found, found
    assert all(f"'{level}'" in found[path] for level in LEVELS), found[path]


def test_a_wait_that_is_no_duration_is_refused_naming_the_field() -> None:
    found = problems(merged(MONITOR, **{"spec.remediation": {"slowNodeCheckpointWait": "an hour"}}))
    assert "spec.remediation.slowNodeCheckpointWait" in found, found


def test_the_crd_carries_the_choices_the_defaults_and_why() -> None:
    crd = crds()["trainguard.io_trainingjobmonitors.yaml"]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rem = spec["properties"]["remediation"]["properties"]
    slow = rem["actions"]["properties"]["slowNode"]["properties"]
    assert slow["gpu"]["enum"] == slow["straggler"]["enum"] == LEVELS
    assert (slow["gpu"]["default"], slow["straggler"]["default"]) == ("ReplaceAtCheckpoint", "Notify")
    assert "does not heal by itself" in slow["gpu"]["description"]
    assert "a person decides" in slow["straggler"]["description"]
    wait = rem["slowNodeCheckpointWait"]
    assert wait["default"] == "2h" and "pattern" in wait, wait
