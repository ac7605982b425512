"""--rule-form shared end to end: the operator, run with it against the real apiserver, applies the one
shared PrometheusRule and publishes each monitor's numbers on its metrics port; the real
prometheus-operator turns the rule into Prometheus's rule files, and the real Prometheus scrapes the
job's exporters and the operator (a static scrape job, as the chart's ServiceMonitor would). A monitor
whose policy lowers GPUMemoryCritical's threshold below the simulated GPUs' memory use is alerted by the
shared group at that threshold (the catalogue's would not fire), and a second monitor changes series,
not rules. The resync puts a deleted shared rule back (docs/rendering.md, the shared form). Both as one
group and split in three (--shared-rule-groups 3), where the alert's group reads the published
thresholds recorded by another group on its own schedule. As one group the alert's annotations look
nothing up (the default); split, they are run with --shared-annotation-lookups and carry the run's trace
id and the log window around the activation, looked up by the real Prometheus.
"""

from __future__ import annotations

import copy
import json
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster import OPERATOR_NS, Cluster
from e2e.monitors import ready
from e2e.pipeline import JOB, Monitoring, Sink, diagnostics, objects, operator_stack, start
from tests.processes import free_port, wait_for
from trainguard.render.shared import SHARED_GROUP, SHARED_RULE_NAME

pytestmark = pytest.mark.e2e

RULES = ("monitoring.coreos.com/v1", "PrometheusRule")
THRESHOLD = 0.5
"""GPUMemoryCritical's ratio for the monitor: the simulated GPUs use 55 to 68% of their memory, so the
alert fires at it and never at the catalogue's 95%."""
SCRAPE = "15s"
"""The default scrape interval: a monitor on another keeps a group of its own."""


@pytest.fixture(scope="module", params=[1, 3], ids=["one-group", "three-groups-lookups"])
def shared_stack(
    request: pytest.FixtureRequest, cluster: Cluster
) -> Iterator[tuple[Cluster, Monitoring, Sink]]:
    """The pipeline's stack (e2e/pipeline.py) with an operator run with --rule-form shared (and
    --shared-rule-groups at the param), its metrics port scraped by the stack's Prometheus. The shared
    rule is deleted after the operator stops, so that the other modules' Prometheus (which select every
    namespace's rules) never load it."""
    split = (
        ("--shared-rule-groups", str(request.param), "--shared-annotation-lookups")
        if request.param > 1
        else ()
    )
    port = free_port()
    scrape = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "operator-scrape", "namespace": "monitoring"},
              "stringData": {"operator.yaml": yaml.safe_dump([{"job_name": "trainguard-operator", "scrape_interval": "1s",
                                                                "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}])}}  # fmt: skip
    monitoring = {"objects": (scrape,), "prometheus_spec": {
        "additionalScrapeConfigs": {"name": "operator-scrape", "key": "operator.yaml"}}}  # fmt: skip
    try:
        with operator_stack(cluster, flags=("--rule-form", "shared", *split, "--metrics-addr", f"127.0.0.1:{port}"),
                            monitoring=monitoring) as stack:  # fmt: skip
            yield stack
    finally:
        cluster.delete({"apiVersion": RULES[0], "kind": RULES[1],
                        "metadata": {"name": SHARED_RULE_NAME, "namespace": OPERATOR_NS}})  # fmt: skip


def versions(cluster: Cluster) -> dict[tuple[str, str], str]:
    """Every PrometheusRule in the cluster by namespace and name, with its resourceVersion."""
    return {(r["metadata"]["namespace"], r["metadata"]["name"]): r["metadata"]["resourceVersion"]
            for r in cluster.list(*RULES, None)}  # type: ignore[arg-type]  # fmt: skip


def rule(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    found = cluster.get(*RULES, ns, name)
    assert found is not None, f"no PrometheusRule {ns}/{name}"
    return dict(found)


def values(mon: Monitoring, promql: str) -> list[float]:
    return [float(r["value"][1]) for r in mon.query(promql)]


def loaded_groups(mon: Monitoring) -> dict[str, list[str]]:
    """The shared groups Prometheus has loaded, by name, with their rules' names."""
    with urllib.request.urlopen(f"{mon.prometheus}/api/v1/rules", timeout=10) as resp:
        groups = json.loads(resp.read())["data"]["groups"]
    return {g["name"]: [r["name"] for r in g["rules"]] for g in groups if g["name"].startswith(SHARED_GROUP)}


def test_a_threshold_published_as_a_series_fires_at_the_monitors_value_and_a_new_monitor_changes_no_rule(
    shared_stack: tuple[Cluster, Monitoring, Sink],
    ns: str,
    clean_nodes: None,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    cluster, mon, sink = shared_stack
    parts = request.node.callspec.params["shared_stack"]
    policy = {"alerts": [{"name": "GPUMemoryCritical", "threshold": THRESHOLD}]}
    with start(shared_stack, ns, tmp_path, policy=policy, completions=1, scrape_interval=SCRAPE) as pods:
        try:
            monitor = ready(cluster, ns)
            assert monitor is not None, "Ready"
            rules = monitor["status"]["rules"]  # the CRD's defaults fill in customRules and moreReasons
            assert (rules["form"], rules["reasons"]) == ("shared", []), rules
            own = rule(cluster, ns, f"trainguard-{JOB}")
            assert [g["name"] for g in own["spec"]["groups"]] == [f"trainguard.{ns}.{JOB}.longterm"], (
                "the monitor's own rule holds its aggregates only: the shared group judges it"
            )
            shared = rule(cluster, OPERATOR_NS, SHARED_RULE_NAME)
            names = [g["name"] for g in shared["spec"]["groups"]]
            # the groups Prometheus loaded through prometheus-operator are the operator's
            loaded = wait_for("Prometheus loads the shared groups", lambda: (got := loaded_groups(mon)) and
                              sorted(got) == sorted(names) and got, timeout=60)  # fmt: skip
            home = [g for g, rules_ in loaded.items() if "GPUMemoryCritical" in rules_]
            inputs = [g for g, rules_ in loaded.items() if "trainguard:monitor_alert_threshold" in rules_]
            assert len(names) == parts and len(home) == 1 and len(inputs) == 1, loaded
            assert (home == inputs) == (parts == 1), (
                "split, the alert's group reads the thresholds another group records"
            )
            published = f'trainguard:monitor_alert_threshold{{namespace="{ns}",training_job="{JOB}",alertname="GPUMemoryCritical",param="ratio"}}'
            wait_for("the monitor's threshold published and recorded", lambda: values(mon, published) == [THRESHOLD],
                     timeout=60)  # fmt: skip
            used = (f'max(DCGM_FI_DEV_FB_USED{{namespace="{ns}"}} / '
                    f'(DCGM_FI_DEV_FB_USED{{namespace="{ns}"}} + DCGM_FI_DEV_FB_FREE{{namespace="{ns}"}}))')  # fmt: skip
            (ratio,) = values(mon, used)
            assert THRESHOLD < ratio < 0.95, (
                f"the GPUs use {ratio:.2f} of their memory: between the two thresholds"
            )
            (alert, *_) = wait_for("GPUMemoryCritical firing at the monitor's threshold", lambda: mon.firing(
                "GPUMemoryCritical", namespace=ns, training_job=JOB), timeout=75)  # fmt: skip
            assert alert["labels"]["priority"] == "P1", alert
            pod = alert["labels"]["pod"]
            if parts == 1:
                notes = alert["annotations"]
                assert not {"trace_id", "log_window", "logs_command", "nodes"} & set(notes), notes
                assert notes["log_query"] == f'{{namespace="{ns}",pod="{pod}"}}', notes
                assert notes["report_command"].startswith(f"trainguard report --monitor {ns}/{JOB} "), notes
            else:  # looked up: the trace id of the pod's sidecar, the window from ALERTS_FOR_STATE
                (alert, *_) = wait_for("the alert's log window looked up", lambda: [a for a in mon.firing(
                    "GPUMemoryCritical", namespace=ns, training_job=JOB, pod=pod)
                    if a["annotations"].get("log_window", "").startswith("start=1")], timeout=45)  # fmt: skip
                notes = alert["annotations"]
                (info,) = mon.query(f'trainguard_exporter_info{{namespace="{ns}",pod="{pod}"}}')
                assert notes["trace_id"] == info["metric"]["trace_id"] != "", (notes, info)
                active = datetime.fromisoformat(alert["activeAt"].replace("Z", "+00:00")).timestamp()
                start_s, end_s = (int(part.split("=")[1]) for part in notes["log_window"].split())
                assert abs(start_s - (active - 30)) <= 1 and abs(end_s - (active + 30)) <= 1, (notes, active)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{diagnostics(cluster, mon, pods, ns, sink)}") from None

        before = versions(cluster)
        assert (OPERATOR_NS, SHARED_RULE_NAME) in before, before
        second = copy.deepcopy(objects(ns, sink, scrape_interval=SCRAPE)[0])
        second["metadata"]["name"] = "second"
        second["spec"].update(selector={"matchLabels": {"app": "second"}}, workloadRef=None,
                              baseline={"warmupSteps": 100_000_000, "sigma": 4})  # fmt: skip
        second["spec"] = {k: v for k, v in second["spec"].items() if v is not None}
        cluster.apply([second])
        wait_for("the second monitor Ready", lambda: ready(cluster, ns, "second"), timeout=60)
        sigma = f'trainguard:monitor_setting{{namespace="{ns}",training_job="second",setting="sigma"}}'
        wait_for("the second monitor's setting published and recorded", lambda: values(mon, sigma) == [4.0],
                 timeout=60)  # fmt: skip
        after = versions(cluster)
        assert {k: after.get(k) for k in before} == before, "no PrometheusRule changed"
        assert set(after) - set(before) == {(ns, "trainguard-second")}, "only the new monitor's aggregates"
        assert [g["name"] for g in rule(cluster, ns, "trainguard-second")["spec"]["groups"]] == [
            f"trainguard.{ns}.second.longterm"
        ]
        assert (ready(cluster, ns, "second") or {})["status"]["rules"]["form"] == "shared"

        shared = rule(cluster, OPERATOR_NS, SHARED_RULE_NAME)
        cluster.delete(shared)
        back = wait_for("the resync puts the deleted shared rule back", lambda: (r := cluster.get(
            *RULES, OPERATOR_NS, SHARED_RULE_NAME)) and r["metadata"]["uid"] != shared["metadata"]["uid"] and r,
            timeout=30)  # fmt: skip
        assert back["spec"] == shared["spec"]
