"""trainguard next to a kube-prometheus-stack, out of the box: a prometheus-operator (the real one,
e2e/prometheus_operator.py) whose Prometheus and Alertmanager are configured as kube-prometheus-stack's
chart configures them with its default values, and an operator started with the arguments the trainguard
chart's Deployment gets from its default values. A trainguard alert reaches its receiver, with no edit.

kube-prometheus-stack 88.5 (whose prometheus-operator is v0.93.1, the one run here), default values:
- its Prometheus selects PrometheusRules, PodMonitors and ServiceMonitors labelled
  `release: <release name>` in every namespace (`*SelectorNilUsesHelmValues: true`, namespace selectors
  `{}`); the release here is named kube-prometheus-stack, as its README installs it;
- its Alertmanager selects every AlertmanagerConfig in every namespace (`alertmanagerConfigSelector: {}`,
  `alertmanagerConfigNamespaceSelector: {}`), with no `alertmanagerConfigMatcherStrategy` (so
  OnNamespace: each config's routes get its namespace's matcher);
- its Alertmanager's base configuration (`alertmanager.config`): route by namespace to "null", the Watchdog
  route, and the severity inhibitions (critical over warning|info, warning over info, each with equal
  namespace and alertname, and InfoInhibitor's two).
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster import Cluster
from e2e.pipeline import Monitoring, Sink, diagnostics, inject, operator_stack, start
from tests.packaging.chart import find_helm, objects, template
from tests.processes import http_json, wait_for

pytestmark = pytest.mark.e2e

RELEASE = "kube-prometheus-stack"
SELECTED = {"matchLabels": {"release": RELEASE}}
PROMETHEUS_SPEC = {
    "ruleSelector": SELECTED, "ruleNamespaceSelector": {},
    "podMonitorSelector": SELECTED, "podMonitorNamespaceSelector": {},
    "serviceMonitorSelector": SELECTED, "serviceMonitorNamespaceSelector": {},
}  # fmt: skip
ALERTMANAGER_SPEC = {"alertmanagerConfigSelector": {}, "alertmanagerConfigNamespaceSelector": {}}
BASE_CONFIG = {
    "global": {"resolve_timeout": "5m"},
    "inhibit_rules": [
        {"source_matchers": ["severity = critical"], "target_matchers": ["severity =~ warning|info"],
         "equal": ["namespace", "alertname"]},
        {"source_matchers": ["severity = warning"], "target_matchers": ["severity = info"],
         "equal": ["namespace", "alertname"]},
        {"source_matchers": ["alertname = InfoInhibitor"], "target_matchers": ["severity = info"],
         "equal": ["namespace"]},
        {"target_matchers": ["alertname = InfoInhibitor"]},
    ],
    "route": {"group_by": ["namespace"], "group_wait": "30s", "group_interval": "5m", "repeat_interval": "12h",
              "receiver": "null", "routes": [{"receiver": "null", "matchers": ['alertname = "Watchdog"']}]},
    "receivers": [{"name": "null"}],
    "templates": ["/etc/alertmanager/config/*.tmpl"],
}  # fmt: skip
"""kube-prometheus-stack's default `alertmanager.config`, which its chart writes into the Secret
alertmanager-<name> that prometheus-operator reads as the Alertmanager's base configuration."""


def chart_objects() -> list[dict[str, Any]]:
    """The trainguard chart at its defaults, with its self-monitoring on (a kube-prometheus-stack user turns
    on serviceMonitor and prometheusRule, and sets nothing else)."""
    if find_helm() is None:  # pragma: no cover - CI builds it
        pytest.fail("helm is not built: `make helm` builds it from its Go module")
    helm = find_helm()
    assert helm is not None
    return objects(template(helm, "serviceMonitor.enabled=true", "prometheusRule.enabled=true"))


def operator_flags(objs: list[dict[str, Any]]) -> tuple[str, ...]:
    """The operator's arguments from the Deployment that bear on what its objects are selected by."""
    (deploy,) = (o for o in objs if o["kind"] == "Deployment")
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    return tuple(a for a in args if a.startswith("--object-labels="))


@pytest.fixture(scope="module")
def chart() -> list[dict[str, Any]]:
    return chart_objects()


@pytest.fixture(scope="module")
def kps(cluster: Cluster, chart: list[dict[str, Any]]) -> Iterator[tuple[Cluster, Monitoring, Sink]]:
    flags = operator_flags(chart)
    assert flags == ("--object-labels=release=kube-prometheus-stack",), flags
    base = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "alertmanager-kps", "namespace": "monitoring"},
            "stringData": {"alertmanager.yaml": yaml.safe_dump(BASE_CONFIG)}}  # fmt: skip
    with operator_stack(cluster, "kps-operator", flags=flags, monitoring={
        "name": "kps", "prometheus_spec": PROMETHEUS_SPEC, "alertmanager_spec": ALERTMANAGER_SPEC, "objects": (base,),
    }) as s:  # fmt: skip
        yield s


def rule_groups(mon: Monitoring) -> set[str]:
    body = http_json(f"{mon.prometheus}/api/v1/rules")
    return {g["name"] for g in body["data"]["groups"]}


def test_a_trainguard_alert_reaches_its_receiver_through_kube_prometheus_stacks_defaults(
    kps: tuple[Cluster, Monitoring, Sink], chart: list[dict[str, Any]], ns: str, tmp_path: Path
) -> None:
    cluster, mon, sink = kps
    # the chart's own PrometheusRule is selected; a copy without the release label is not, so the
    # selector is in force
    (own,) = (o for o in chart if o["kind"] == "PrometheusRule")
    own = {**own, "metadata": {**own["metadata"], "namespace": ns}}
    unlabelled = {**own, "metadata": {"name": "unselected", "namespace": ns,
                                      "labels": {k: v for k, v in own["metadata"]["labels"].items() if k != "release"}},
                  "spec": {"groups": [{**own["spec"]["groups"][0], "name": "not-selected"}]}}  # fmt: skip
    cluster.apply([own, unlabelled])
    with start(kps, ns, tmp_path, {"actions": {"nodeFault": "Notify"}}, completions=1, gpus=4) as pods:
        try:
            (pod,) = pods.running()
            inject(pod, "thermal")
            got = wait_for("GPUThermalThrottling (P1) at the im receiver",
                           lambda: sink.received("im", "GPUThermalThrottling", namespace=ns), timeout=60)  # fmt: skip
            assert got[0]["labels"]["training_job"] == "llama-pretrain"
            groups = rule_groups(mon)
            assert "trainguard-operator" in groups, groups
            assert "not-selected" not in groups, "a PrometheusRule without the release label was loaded"
            # what kube-prometheus-stack's Alertmanager routes it through: its own base config, with the
            # monitor's AlertmanagerConfig under it, matched on the namespace (OnNamespace)
            with urllib.request.urlopen(f"{mon.alertmanager}/api/v2/status", timeout=5) as resp:
                running = yaml.safe_load(yaml.safe_load(resp.read())["config"]["original"])
            routes = running["route"]["routes"]
            assert any(f'namespace="{ns}"' in r.get("matchers", []) for r in routes), routes
            kept = [r.get("source_matchers") for r in running.get("inhibit_rules") or []]
            assert ['severity="critical"'] in kept, "kube-prometheus-stack's base configuration is in force"
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{diagnostics(cluster, mon, pods, ns, sink)}") from None
