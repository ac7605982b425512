"""The name of a P2's report ConfigMap is derived twice, apart: by Prometheus, expanding the rule's
`report_configmap` annotation into every notification, and by the operator (diagnosis/configmap.py
report_name), which creates the ConfigMap from the alert's labels in ALERTS. `promtool test rules`
expands the rendered annotation; the two must agree for every P2 alert of the catalogue, on the label
sets the exporter produces, and on odd ones (upper case, underscores, an absent label, a long name)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import monitor, policy
from tests.render.alert_cases import CASES, Case, only_alert
from tests.toolchains import promtool_test_rules
from trainguard.catalog import ALERTS_BY_NAME, Scope
from trainguard.diagnosis.configmap import REPORT_SEVERITY, report_name
from trainguard.render import dump_yaml
from trainguard.render.policy import effective_policy
from trainguard.render.prometheus import report_configmap_template, rule_group

pytestmark = pytest.mark.tools

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
P2_ALERTS = sorted(n for n, a in ALERTS_BY_NAME.items() if a.severity == REPORT_SEVERITY)


def _report_rules(changes: dict[str, Any]) -> dict[str, Any]:
    """The rendered rules with only the annotation under test (promtool compares all of them)."""
    m = monitor(**changes)
    group = rule_group(m, effective_policy(m, [policy()]))
    for rule in group["rules"]:
        if "alert" in rule:
            rule["annotations"] = {k: v for k, v in rule["annotations"].items() if k == "report_configmap"}
    return {"groups": [group]}


def _promtool(promtool: str, tmp: Path, rules: dict[str, Any], tests: list[dict[str, Any]]) -> None:
    (tmp / "rules.yml").write_text(dump_yaml(rules))
    (tmp / "test.yml").write_text(
        dump_yaml({"rule_files": ["rules.yml"], "evaluation_interval": "15s", "tests": tests})
    )
    promtool_test_rules(promtool, tmp)


def _expected(alertname: str, labels: dict[str, str]) -> dict[str, str]:
    name = report_name(labels["training_job"], labels | {"alertname": alertname})
    assert len(name) <= 253 and DNS_SUBDOMAIN.fullmatch(name), name
    return {"report_configmap": name}


def test_the_catalogue_has_p2_alerts_at_several_scopes() -> None:
    assert len({ALERTS_BY_NAME[n].scope for n in P2_ALERTS}) >= 3, P2_ALERTS


@pytest.mark.parametrize("alertname", P2_ALERTS)
def test_prometheus_and_the_operator_name_the_same_configmap(
    promtool: str, tmp_path: Path, alertname: str
) -> None:
    by_monitor: dict[str, list[Case]] = {}
    for case in CASES[alertname]:
        if case.fires:
            by_monitor.setdefault(json.dumps(case.monitor, sort_keys=True), []).append(case)
    assert by_monitor, f"{alertname} has no must-fire case"
    for i, (changes, cases) in enumerate(by_monitor.items()):
        tests = [
            {"name": c.why, "interval": c.interval, "input_series": c.input, "alert_rule_test": [{
                "eval_time": c.at, "alertname": alertname,
                "exp_alerts": [{"exp_labels": labels, "exp_annotations": _expected(alertname, labels)}
                               for labels in c.fires]}]}
            for c in cases
        ]  # fmt: skip
        d = tmp_path / str(i)
        d.mkdir()
        _promtool(promtool, d, only_alert(_report_rules(json.loads(changes)), alertname), tests)


ODD: list[dict[str, str]] = [
    {"training_job": "LLaMA_Pretrain.v2", "pod": "llama-0", "node": "GPU_Node_1", "gpu": "0"},
    {"training_job": "llama-pretrain", "node": "gpu-node-1", "gpu": "7"},  # no pod label at all
    {"training_job": "x" * 300, "pod": "p", "node": "n", "gpu": "1"},  # cut to 253
    {"training_job": "job", "pod": "p", "node": "n", "gpu": "__"},  # nothing but separators at the end
]


@pytest.mark.parametrize("labels", ODD, ids=["case-and-underscores", "absent-label", "long", "trailing"])
def test_odd_label_values_give_the_same_valid_name(
    promtool: str, tmp_path: Path, labels: dict[str, str]
) -> None:
    alertname = "GPUMemoryPressure"  # GPU-scoped
    expr = "vector(1)"
    for k, v in (labels | {"namespace": "ml"}).items():
        expr = f'label_replace({expr}, "{k}", "{v}", "", "")'
    template = report_configmap_template(alertname, ALERTS_BY_NAME[alertname].scope.labels)
    rules = {"groups": [{"name": "odd", "rules": [
        {"alert": alertname, "expr": expr, "labels": {"severity": "P2"},
         "annotations": {"report_configmap": template}}]}]}  # fmt: skip
    tests = [{"interval": "1m", "input_series": [], "alert_rule_test": [{
        "eval_time": "1m", "alertname": alertname,
        "exp_alerts": [{"exp_labels": labels | {"namespace": "ml", "severity": "P2"},
                        "exp_annotations": _expected(alertname, labels)}]}]}]  # fmt: skip
    _promtool(promtool, tmp_path, rules, tests)


def test_the_name_is_the_alerts_identity_not_its_other_labels() -> None:
    gpu = {
        "alertname": "GPUMemoryHigh",
        "namespace": "ml",
        "training_job": "j",
        "pod": "p",
        "node": "n",
        "gpu": "3",
    }
    assert ALERTS_BY_NAME["GPUMemoryHigh"].scope is Scope.GPU
    name = report_name("j", gpu)
    assert name == "trainguard-report-j-gpumemoryhigh-p-n-3"
    assert report_name("j", gpu | {"severity": "P2", "alertstate": "firing", "UUID": "GPU-1"}) == name
    assert report_name("j", gpu | {"gpu": "4"}) != name
