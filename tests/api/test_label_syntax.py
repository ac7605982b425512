"""Selectors hold Kubernetes label syntax only: a quote or a space would reach a PodMonitor and PromQL."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import MONITOR, POLICY, merged
from trainguard.api import InvalidInput, TrainingJobMonitor, parse_object
from trainguard.api.common import LABEL_KEY_LENGTHS, LABEL_KEY_PATTERN, LABEL_VALUE_PATTERN
from trainguard.api.crd import crds


def problems(obj: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidInput) as exc:
        parse_object(obj)
    return {p.path: p.message for p in exc.value.problems}


def selector(**sel: Any) -> dict[str, Any]:
    return merged(MONITOR, **{"spec.selector": sel})


BAD_VALUES = ['llama"} or up{x="', "two words", "-leading", "trailing.", "a" * 64, "ünïcode", "a/b"]
BAD_KEYS = ["", "two words", "app=", "-app", "Example.com/app", "a" * 64, f"{'a' * 254}/app", "/app", "a/b/c"]
GOOD_KEYS = ["app", "app.kubernetes.io/name", "A_b-c.d", "a" * 63, f"{'a' * 253}/{'b' * 63}", "x/y"]
GOOD_VALUES = ["", "a", "llama-pretrain", "v1.2_3", "a" * 63, "0"]


@pytest.mark.parametrize("value", BAD_VALUES)
def test_bad_match_labels_value_names_the_label(value: str) -> None:
    found = problems(selector(matchLabels={"app": value}))
    assert "not a valid label value" in found["spec.selector.matchLabels.app"]
    assert "starts and ends with a letter or digit" in found["spec.selector.matchLabels.app"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_match_labels_key_is_rejected(key: str) -> None:
    found = problems(selector(matchLabels={key: "x"}))
    assert "not a valid label key" in found["spec.selector.matchLabels"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_match_expressions_key_is_rejected(key: str) -> None:
    found = problems(selector(matchExpressions=[{"key": key, "operator": "Exists"}]))
    assert "not a valid label key" in found["spec.selector.matchExpressions[0].key"]


@pytest.mark.parametrize("value", BAD_VALUES)
def test_bad_match_expressions_value_is_rejected(value: str) -> None:
    found = problems(selector(matchExpressions=[{"key": "app", "operator": "In", "values": ["ok", value]}]))
    assert "not a valid label value" in found["spec.selector.matchExpressions[0].values[1]"]


@pytest.mark.parametrize(("key", "value"), list(zip(GOOD_KEYS, GOOD_VALUES, strict=True)))
def test_kubernetes_label_syntax_is_accepted(key: str, value: str) -> None:
    obj = parse_object(
        selector(
            matchLabels={key: value},
            matchExpressions=[{"key": key, "operator": "NotIn", "values": [value]}],
        )
    )
    assert isinstance(obj, TrainingJobMonitor)
    assert obj.spec.selector.match_labels == {key: value}


def test_node_selector_of_a_maintenance_window_is_checked_too() -> None:
    window = {
        "name": "mw",
        "start": "2026-12-01T02:00:00Z",
        "end": "2026-12-01T06:00:00Z",
        "nodeSelector": {"matchLabels": {"pool": "gpu a"}},
    }
    found = problems(merged(POLICY, **{"spec.maintenanceWindows": [window]}))
    assert "not a valid label value" in found["spec.maintenanceWindows[0].nodeSelector.matchLabels.pool"]


def _selector_schema(crd: dict[str, Any]) -> dict[str, Any]:
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    selector_schema: dict[str, Any] = spec["properties"]["selector"]
    return selector_schema


def test_the_crd_carries_the_same_label_syntax() -> None:
    sel = _selector_schema(crds()["trainguard.io_trainingjobmonitors.yaml"])
    labels = sel["properties"]["matchLabels"]
    assert labels["additionalProperties"]["pattern"] == LABEL_VALUE_PATTERN
    assert labels["additionalProperties"]["maxLength"] == 63
    assert "maxProperties" in labels, "CEL over a map needs a bound to estimate its cost"
    (key_rule,) = sel["x-kubernetes-validations"]
    assert LABEL_KEY_PATTERN in key_rule["rule"] and LABEL_KEY_LENGTHS in key_rule["rule"]
    req = sel["properties"]["matchExpressions"]["items"]
    assert req["properties"]["key"]["pattern"] == LABEL_KEY_PATTERN
    assert req["properties"]["values"]["items"]["pattern"] == LABEL_VALUE_PATTERN
    assert any(LABEL_KEY_LENGTHS in r["rule"] for r in req["x-kubernetes-validations"])


@pytest.mark.parametrize("key", BAD_KEYS + GOOD_KEYS)
def test_the_crd_key_patterns_decide_like_the_model(key: str) -> None:
    """The CEL rule's two patterns (RE2 and Python agree on these constructs) decide as the model does."""
    by_patterns = bool(re.fullmatch(LABEL_KEY_PATTERN, key) and re.fullmatch(LABEL_KEY_LENGTHS, key))
    assert by_patterns == (key in GOOD_KEYS)
