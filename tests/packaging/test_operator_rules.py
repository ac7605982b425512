"""The chart's PrometheusRule for the operator itself, taken from `helm template` as installed and run
through `promtool test rules`: for each alert a case that must fire and cases that must not."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.packaging.chart import CHART, NAMESPACE, REPO, objects, one, template
from tests.toolchains import promtool_test_rules
from trainguard.catalog.severity import GRADE, MAPPED, MAPPED_SEVERITY, STYLES, grade_labels

JOB = {"job": "trainguard-operator", "namespace": NAMESPACE}
SEL = 'job="trainguard-operator", namespace="trainguard-system"'
UNMON = "trainguard_operator_pods_unmonitored"
LLAMA = (("job", "trainguard-operator"), ("namespace", "ml"), ("training_job", "llama"))


def JOB_OF(name: str) -> str:  # noqa: N802  (reads as a selector in the cases)
    """The series' labels: the job's namespace (honorLabels), not the operator's."""
    return f"job='trainguard-operator', namespace='ml', training_job='{name}', pod='a'"


@dataclass(frozen=True)
class Case:
    why: str
    series: list[tuple[str, str]]
    """(series, promtool values) at a 1m interval."""
    at: str
    fires: bool
    labels: tuple[tuple[str, str], ...] = ()
    """The alert's labels besides the grade's, where they are not the operator's job and namespace."""


CASES: dict[str, list[Case]] = {
    "TrainguardOperatorDown": [
        Case("never scraped at all: absent for 5m", [], "6m", True),
        Case("both replicas down for 5m", [(f"up{{{SEL}, pod='a'}}", "0x10"), (f"up{{{SEL}, pod='b'}}", "0x10")], "7m", True),
        Case("down for 4 minutes only", [(f"up{{{SEL}, pod='a'}}", "1 0 0 0 0 1 1 1 1 1")], "6m", False),
        Case("one replica down, the other up", [(f"up{{{SEL}, pod='a'}}", "0x10"), (f"up{{{SEL}, pod='b'}}", "1x10")], "8m", False),
        Case("another release's operator is up, not this one", [("up{job='trainguard-operator', namespace='other'}", "1x10")], "7m", True),
    ],
    "TrainguardReconcileErrors": [
        Case("an error every 2 minutes for half an hour", [(f"trainguard_operator_reconcile_errors_total{{{SEL}, pod='a'}}", "0+0.5x40")], "30m", True),
        Case("one error, then none", [(f"trainguard_operator_reconcile_errors_total{{{SEL}, pod='a'}}", "0 0 1 1x37")], "30m", False),
        Case("errors for 10 minutes, then none", [(f"trainguard_operator_reconcile_errors_total{{{SEL}, pod='a'}}", "0+1x10 10x30")], "30m", False),
        Case("no errors", [(f"trainguard_operator_reconcile_errors_total{{{SEL}, pod='a'}}", "0x40")], "30m", False),
    ],
    "TrainguardInjectionFailing": [
        Case("one pod admitted without the exporter", [(f"trainguard_operator_injection_failures_total{{{SEL}, pod='a'}}", "0x5 1x15")], "8m", True),
        Case("the failure was over 10 minutes ago", [(f"trainguard_operator_injection_failures_total{{{SEL}, pod='a'}}", "0x5 1x30")], "25m", False),
        Case("no failure", [(f"trainguard_operator_injection_failures_total{{{SEL}, pod='a'}}", "0x20")], "15m", False),
    ],
    "TrainguardPodsUnmonitored": [
        Case("7 pods let through without the webhook for 20 minutes", [(f"{UNMON}{{{JOB_OF('llama')}}}", "7x25")], "20m", True, LLAMA),
        Case("recreated with the exporter after 10 minutes", [(f"{UNMON}{{{JOB_OF('llama')}}}", "7x10 0x15")], "20m", False),
        Case("every pod monitored", [(f"{UNMON}{{{JOB_OF('llama')}}}", "0x25")], "20m", False),
        Case("another release's operator says so, not this one", [(f"{UNMON}{{job='other-operator', namespace='ml', training_job='llama', pod='a'}}", "7x25")], "20m", False),
    ],
}  # fmt: skip


def rendered_rules(helm: str, *sets: str) -> dict[str, Any]:
    docs = objects(template(helm, "prometheusRule.enabled=true", *sets))
    return {"groups": one(docs, "PrometheusRule")["spec"]["groups"]}


def test_the_operators_alerts_carry_their_grade_in_priority_and_severity_in_the_style(helm: str) -> None:
    grade = {r["alert"]: r["labels"] for g in rendered_rules(helm)["groups"] for r in g["rules"]}
    mapped = {
        r["alert"]: r["labels"]
        for g in rendered_rules(helm, "alerts.severityStyle=mapped")["groups"]
        for r in g["rules"]
    }
    assert {a: labels["priority"] for a, labels in grade.items()} == {
        "TrainguardOperatorDown": "P1",
        "TrainguardReconcileErrors": "P2",
        "TrainguardInjectionFailing": "P1",
        "TrainguardPodsUnmonitored": "P2",
    }
    for alert, labels in grade.items():
        assert labels == grade_labels(labels["priority"], GRADE), alert
        assert mapped[alert] == grade_labels(labels["priority"], MAPPED), alert


def test_the_charts_mapping_is_the_catalogues() -> None:
    """_helpers.tpl writes the mapping out (the chart renders without trainguard): it must be
    catalog/severity.py's for every grade, not only those the chart's rules use."""
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    (pairs,) = re.findall(r'\$mapped := dict ((?:"[^"]+" ?)+)', helpers)
    words = re.findall(r'"([^"]+)"', pairs)
    assert dict(zip(words[::2], words[1::2], strict=True)) == MAPPED_SEVERITY


def test_the_operator_gets_the_style(helm: str) -> None:
    for style in STYLES:
        docs = objects(template(helm, f"alerts.severityStyle={style}"))
        container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        assert f"--severity-style={style}" in container["args"]


def test_the_rule_and_the_monitor_are_off_by_default(helm: str) -> None:
    kinds = {d["kind"] for d in objects(template(helm))}
    assert not kinds & {"PrometheusRule", "ServiceMonitor"}


def test_every_operator_alert_has_a_firing_and_a_quiet_case(helm: str) -> None:
    alerts = {r["alert"] for g in rendered_rules(helm)["groups"] for r in g["rules"]}
    assert alerts == set(CASES)
    for name, cases in CASES.items():
        assert any(c.fires for c in cases) and any(not c.fires for c in cases), name


def headings(page: str) -> set[str]:
    """The anchors of a docs page's headings, as GitHub and mkdocs make them from a single word."""
    return {m.group(1).lower() for m in re.finditer(r"^#+ (\S+)$", page, re.M)}


def test_every_alert_links_its_runbook_and_says_what_to_run_first(helm: str) -> None:
    """runbook_url is a URL, as Alertmanager templates and on-call tools expect under that name: the
    alert's heading in docs/operator.md; the command to run first is runbook_command."""
    anchors = headings((REPO / "docs" / "operator.md").read_text())
    base = "https://github.com/trainguard/trainguard/blob/main/docs/operator.md"
    for group in rendered_rules(helm)["groups"]:
        for rule in group["rules"]:
            notes = rule["annotations"]
            assert "runbook" not in notes, "a command under runbook reads as a link: runbook_command"
            assert notes["runbook_url"] == f"{base}#{rule['alert'].lower()}"
            assert rule["alert"].lower() in anchors, (
                f"docs/operator.md has no runbook heading for {rule['alert']}"
            )
            assert notes["runbook_command"].startswith("kubectl ")


def test_the_runbooks_can_live_elsewhere(helm: str) -> None:
    docs = objects(template(helm, "prometheusRule.enabled=true",
                            "prometheusRule.runbookBaseUrl=https://wiki.example.com/trainguard/"))  # fmt: skip
    urls = [
        r["annotations"]["runbook_url"]
        for g in one(docs, "PrometheusRule")["spec"]["groups"]
        for r in g["rules"]
    ]
    assert "https://wiki.example.com/trainguard#trainguardoperatordown" in urls
    assert all(u.startswith("https://wiki.example.com/trainguard#") for u in urls)


def test_the_service_monitor_scrapes_the_port_the_operator_serves_metrics_on(helm: str) -> None:
    docs = objects(template(helm, "serviceMonitor.enabled=true", "operator.metricsPort=9100"))
    monitor, service = one(docs, "ServiceMonitor"), one(docs, "Service")
    (endpoint,) = monitor["spec"]["endpoints"]
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert ports[endpoint["port"]]["port"] == 9100
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--metrics-addr=:9100" in container["args"]
    assert {"name": "metrics", "containerPort": 9100, "protocol": "TCP"} in container["ports"]
    # the rule's job is the name of the Service the monitor selects (prometheus-operator's default)
    assert service["metadata"]["name"] == JOB["job"]


@pytest.mark.tools
@pytest.mark.parametrize("alertname", sorted(CASES))
def test_operator_alert_fires_only_when_it_should(
    helm: str, promtool: str, tmp_path: Path, alertname: str
) -> None:
    rules = rendered_rules(helm)
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)  # promtool compares them too; they are plain text here
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
    graded = next(r["labels"] for g in rules["groups"] for r in g["rules"] if r["alert"] == alertname)
    tests = [
        {
            "name": case.why,
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in case.series],
            "alert_rule_test": [
                {
                    "eval_time": case.at,
                    "alertname": alertname,
                    "exp_alerts": [{"exp_labels": {**(dict(case.labels) or JOB), **graded}}]
                    if case.fires
                    else [],
                }
            ],
        }
        for case in CASES[alertname]
    ]
    (tmp_path / "test.yml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "15s", "tests": tests})
    )
    promtool_test_rules(promtool, tmp_path, alertname)
