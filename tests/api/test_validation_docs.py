"""docs/rendering.md's list of checks the apiserver does not make stays true: every Python-only item
has a validator that rejects an example and no CEL rule at that field, and every CEL rule has a Python
twin."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MONITOR, POLICY, merged
from trainguard.api import InvalidInput, load_documents, parse_object
from trainguard.api.crd import crds
from trainguard.render import dump_yaml

ROOT = Path(__file__).resolve().parents[2]

WINDOW = {"name": "mw", "start": "2026-12-01T02:00:00Z", "end": "2026-12-01T06:00:00Z", "nodes": ["n1"]}
RULE = {"name": "Mine", "expr": "up{$selector} == 0", "severity": "P1"}

# docs/rendering.md item (its field path) -> an object that breaks only that check, and where the model says so
PYTHON_ONLY: dict[str, tuple[dict[str, Any], str]] = {
    "spec.exporter.scrapeInterval": (
        merged(MONITOR, **{"spec.exporter": {"scrapeInterval": "10m"}}),
        "spec.exporter",
    ),
    "spec.exporter.otlp.interval": (
        merged(
            MONITOR, **{"spec.exporter": {"otlp": {"endpoint": "http://vm/v1/metrics", "interval": "2h"}}}
        ),
        "spec.exporter.otlp.interval",
    ),
    "spec.baseline.window": (
        merged(MONITOR, **{"spec.baseline": {"window": "30s", "offset": "10s"}}),
        "spec.baseline",
    ),
    "spec.baseline.offset": (
        merged(MONITOR, **{"spec.baseline": {"window": "1h", "offset": "1h"}}),
        "spec.baseline",
    ),
    "spec.alerts[].params": (
        merged(POLICY, **{"spec.alerts": [{"name": "GPUMemoryHang", "params": {"typo": 1}}]}),
        "spec.alerts[0]",
    ),
    "spec.alerts[].threshold": (
        merged(POLICY, **{"spec.alerts": [{"name": "GradientExplosion", "threshold": 3}]}),
        "spec.alerts[0]",
    ),
    "spec.customRules[].expr": (
        merged(POLICY, **{"spec.customRules": [RULE | {"expr": "up{$selector == 0"}]}),
        "spec.customRules[0].expr",
    ),
    "spec.quietHours.timezone": (
        merged(POLICY, **{"spec.quietHours": {"timezone": "Mars/Olympus"}}),
        "spec.quietHours.timezone",
    ),
    "spec.policyRefs[].name": (
        merged(MONITOR, **{"spec.policyRefs": [{"name": "missing"}]}),
        "spec.policyRefs[0].name",
    ),
}

# CEL rule message -> an object that breaks it, and where the model reports the same problem
CEL_TWINS: dict[str, tuple[dict[str, Any], str]] = {
    "metadata.name must be at most 63 characters: it becomes a label value": (
        merged(MONITOR, **{"metadata.name": "a" * 64}),
        "metadata.name",
    ),
    "metadata.name must be a DNS label": (merged(MONITOR, **{"metadata.name": "a.b"}), "metadata.name"),
    "selector must name at least one label": (merged(MONITOR, **{"spec.selector": {}}), "spec"),
    "policyRefs must not name the same policy twice": (
        merged(MONITOR, **{"spec.policyRefs": [{"name": "default"}, {"name": "default"}]}),
        "spec",
    ),
    "costLabels keys must be Prometheus label names": (
        merged(MONITOR, **{"spec.costLabels": {"node": "x"}}),
        "spec.costLabels",
    ),
    "values must be non-empty for In and NotIn": (
        merged(MONITOR, **{"spec.selector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}),
        "spec.selector.matchExpressions[0]",
    ),
    "a label key is an optional DNS-subdomain prefix": (
        merged(MONITOR, **{"spec.selector": {"matchLabels": {"bad key": "x"}}}),
        "spec.selector.matchLabels",
    ),
    "endpoint must be the full http:// or https:// URL of an OTLP/HTTP metrics endpoint": (
        merged(MONITOR, **{"spec.exporter": {"otlp": {"endpoint": "vm:8428/opentelemetry/v1/metrics"}}}),
        "spec.exporter.otlp.endpoint",
    ),
    "fullEverySteps must be a multiple of incrementalEverySteps": (
        merged(MONITOR, **{"spec.checkpoint": {"incrementalEverySteps": 300}}),
        "spec.checkpoint",
    ),
    "every receiver a route names must be defined under receivers": (
        merged(POLICY, **{"spec.routes": [{"severity": "P0", "receivers": ["pager"]}]}),
        "spec",
    ),
    "receiver names must be unique": (
        merged(POLICY, **{"spec.receivers": [POLICY["spec"]["receivers"][0]] * 2}),
        "spec",
    ),
    "at most one route per severity": (
        merged(POLICY, **{"spec.routes": [{"severity": "P0"}, {"severity": "P0"}]}),
        "spec",
    ),
    "alerts: each alert may be overridden once": (
        merged(POLICY, **{"spec.alerts": [{"name": "GPUNodeDown"}, {"name": "GPUNodeDown"}]}),
        "spec",
    ),
    "labels must not set": (
        merged(POLICY, **{"spec.customRules": [RULE | {"labels": {"training_job": "x"}}]}),
        "spec.customRules[0].labels",
    ),
    "label names must be Prometheus label names": (
        merged(POLICY, **{"spec.customRules": [RULE | {"labels": {"a-b": "x"}}]}),
        "spec.customRules[0].labels",
    ),
    "name is a catalogue alert": (
        merged(POLICY, **{"spec.customRules": [RULE | {"name": "GPUNodeDown"}]}),
        "spec.customRules[0].name",
    ),
    "set url or urlSecretRef, not both": (
        merged(
            POLICY,
            **{
                "spec.receivers": [
                    {
                        "name": "x",
                        "type": "webhook",
                        "url": "http://a",
                        "urlSecretRef": {"name": "s", "key": "k"},
                    }
                ]
            },
        ),
        "spec.receivers[0]",
    ),
    "webhook, dingtalk, feishu and slack receivers need url or urlSecretRef": (
        merged(POLICY, **{"spec.receivers": [{"name": "x", "type": "slack"}]}),
        "spec.receivers[0]",
    ),
    "a pagerduty receiver needs routingKeySecretRef": (
        merged(POLICY, **{"spec.receivers": [{"name": "x", "type": "pagerduty"}]}),
        "spec.receivers[0]",
    ),
    "an email receiver needs to, from and smarthost": (
        merged(POLICY, **{"spec.receivers": [{"name": "x", "type": "email", "to": "a@b.c"}]}),
        "spec.receivers[0]",
    ),
    "a wecom receiver needs corpId and apiSecretSecretRef": (
        merged(POLICY, **{"spec.receivers": [{"name": "x", "type": "wecom"}]}),
        "spec.receivers[0]",
    ),
    "DingTalk and Feishu bots do not accept Alertmanager's webhook payload": (
        merged(
            POLICY,
            **{
                "spec.receivers": [
                    {"name": "x", "type": "dingtalk", "url": "https://oapi.dingtalk.com/robot/send"}
                ]
            },
        ),
        "spec.receivers[0].url",
    ),
    "start and end must differ": (
        merged(POLICY, **{"spec.quietHours": {"start": "01:00", "end": "01:00"}}),
        "spec.quietHours",
    ),
    "end must be after start": (
        merged(POLICY, **{"spec.maintenanceWindows": [WINDOW | {"end": WINDOW["start"]}]}),
        "spec.maintenanceWindows[0]",
    ),
    "name the nodes: set nodes or nodeSelector": (
        merged(POLICY, **{"spec.maintenanceWindows": [WINDOW | {"nodes": [], "nodeSelector": {}}]}),
        "spec.maintenanceWindows[0]",
    ),
}


DOCS = ROOT / "docs" / "rendering.md"


def documented_python_only_fields() -> set[str]:
    """The field paths named by the items of docs/rendering.md's "Checks the apiserver does not make"."""
    text = DOCS.read_text()
    start = text.index("\n## Checks the apiserver does not make\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    items = re.findall(r"^- (.*?):", section, flags=re.MULTILINE)
    return {field for item in items for field in re.findall(r"`([^`]+)`", item)}


def model_problems(obj: dict[str, Any]) -> dict[str, str]:
    """Problems from the model, and from load_documents for checks across objects."""
    try:
        parse_object(obj)
    except InvalidInput as exc:
        return {p.path: p.message for p in exc.problems}
    try:
        load_documents([("in.yaml", dump_yaml(obj))])
    except InvalidInput as exc:
        return {p.path: p.message for p in exc.problems}
    return {}


def cel_rules() -> list[tuple[str, dict[str, Any]]]:
    """(schema path, rule) for every CEL rule in the generated CRDs."""
    out: list[tuple[str, dict[str, Any]]] = []

    def walk(node: dict[str, Any], path: str) -> None:
        out.extend((path, r) for r in node.get("x-kubernetes-validations", []))
        for key, sub in node.get("properties", {}).items():
            walk(sub, f"{path}.{key}")
        if "items" in node:
            walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}{{}}")

    for crd in crds().values():
        walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], "")
    return out


def test_the_docs_list_exactly_the_python_only_checks() -> None:
    assert documented_python_only_fields() == set(PYTHON_ONLY)


@pytest.mark.parametrize("field", sorted(PYTHON_ONLY))
def test_each_python_only_check_rejects_its_example(field: str) -> None:
    obj, path = PYTHON_ONLY[field]
    assert path in model_problems(obj)


@pytest.mark.parametrize("field", sorted(PYTHON_ONLY))
def test_a_python_only_check_has_no_cel_rule(field: str) -> None:
    """A CEL rule that reads the field makes docs/rendering.md wrong: drop the item, add a CEL twin below."""
    name = field.rsplit(".", 1)[-1].removesuffix("[]")
    parent = field.rsplit(".", 1)[0].removeprefix("spec")
    for path, rule in cel_rules():
        if path.endswith(parent) or path.endswith(parent.replace("[]", "") + "[]"):
            assert f"self.{name}" not in rule["rule"], f"{path}: {rule['rule']}"


def test_every_cel_rule_has_a_python_twin() -> None:
    messages = [r["message"] for _, r in cel_rules()]
    for message in messages:
        assert any(message.startswith(prefix) for prefix in CEL_TWINS), (
            f"no Python twin listed for: {message}"
        )
    for prefix in CEL_TWINS:
        assert any(m.startswith(prefix) for m in messages), f"no CEL rule says: {prefix}"


@pytest.mark.parametrize("message", sorted(CEL_TWINS))
def test_the_python_twin_rejects_what_the_cel_rule_rejects(message: str) -> None:
    obj, path = CEL_TWINS[message]
    assert path in model_problems(obj), model_problems(obj)
