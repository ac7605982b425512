"""Where an alert's annotations look things up. A per-monitor group's alerts carry the run's trace id,
the job's pods and nodes and the +-30 s log window, each a query that Prometheus runs for every active
alert at every evaluation (6 to 21 ms an alert together, bench/annotations.py). The shared group serves every job, so
by default its alerts carry what their labels give and `report_command`, which looks the rest up once,
on demand; --shared-annotation-lookups gives them the per-monitor group's annotations."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import monitor, policy
from tests.render.alert_cases import GPU, series
from tests.render.test_alert_rules import publisher_input
from trainguard.catalog import ALERTS_BY_NAME
from trainguard.render import dump_yaml
from trainguard.render.policy import effective_policy
from trainguard.render.prometheus import POD_LOG_QUERY, rule_group
from trainguard.render.shared import shared_group, shared_groups

LOOKED_UP = {"trace_id", "log_window", "logs_command"}
"""What every looked-up alert carries (a job-wide one also `nodes`, and its `log_query` a lookup)."""


def alerts(group: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {r["alert"]: r["annotations"] for r in group["rules"] if "alert" in r}


def queries(annotations: dict[str, str]) -> set[str]:
    return {k for k, v in annotations.items() if "| query" in v}


def per_monitor() -> dict[str, dict[str, str]]:
    m = monitor()
    return alerts(rule_group(m, effective_policy(m, [policy()])))


def test_a_per_monitor_groups_alerts_look_up_the_trace_id_and_the_log_window() -> None:
    for name, notes in per_monitor().items():
        assert queries(notes) >= LOOKED_UP, name


def test_the_shared_groups_alerts_run_no_query_by_default() -> None:
    shared = alerts(shared_group())
    assert set(shared) >= set(ALERTS_BY_NAME)
    for name, notes in shared.items():
        assert not queries(notes), (name, queries(notes))
        assert not LOOKED_UP & set(notes), name
    for group in shared_groups(parts=4):
        assert not any(queries(n) for n in alerts(group).values()), group["name"]


def test_without_lookups_an_alert_keeps_what_its_labels_give() -> None:
    """A pod's log stream from its own labels, and how to build the report that looks up the rest."""
    shared = alerts(shared_group())
    for name, alert in ALERTS_BY_NAME.items():
        notes = shared[name]
        assert notes["report_command"].startswith("trainguard report --monitor") or notes[
            "report_command"
        ].startswith("kubectl get configmap"), name
        assert notes.get("log_query") == (POD_LOG_QUERY if "pod" in alert.scope.labels else None), name
        assert "nodes" not in notes, name


def test_lookups_give_the_shared_group_the_per_monitor_groups_annotations() -> None:
    """The same looked-up annotations as a monitor's own group, but for the pod selector, which the
    shared group does not know (it names the pods it looked up instead)."""
    shared, own = alerts(shared_group(lookups=True)), per_monitor()
    for name, notes in own.items():
        assert queries(shared[name]) == queries(notes), name
        assert shared[name]["log_window"] == notes["log_window"], name
        assert shared[name].get("trace_id") == notes.get("trace_id"), name
    split = {name: n for g in shared_groups(parts=3, lookups=True) for name, n in alerts(g).items()}
    assert all(queries(split[name]) >= LOOKED_UP for name in own)


@pytest.mark.tools
def test_promtool_expands_the_shared_annotations_from_the_labels_alone(promtool: str, tmp_path: Path) -> None:
    """promtool, not us, expands what a firing shared alert carries, and the test names every key it
    expects: an annotation added with a lookup fails it."""
    group = shared_group()
    rule = next(r for r in group["rules"] if r.get("alert") == "GPUThermalThrottling")
    notes = rule["annotations"]
    labels = {k: GPU[k] for k in ("namespace", "training_job", "pod", "node", "gpu")}
    expanded = {
        k: v.replace("{{ $labels.namespace }}", labels["namespace"])
        .replace("{{ $labels.training_job }}", labels["training_job"])
        .replace("{{ $labels.pod }}", labels["pod"])
        .replace("{{ $labels.node }}", labels["node"])
        .replace("{{ $labels.gpu }}", labels["gpu"])
        .replace("{{ $value | humanize }}", "90")
        for k, v in notes.items()
    }
    assert set(expanded) == {"summary", "description", "probable_cause", "runbook_url", "log_query",
                             "report_command"}, sorted(expanded)  # fmt: skip
    assert expanded["log_query"] == f'{{namespace="{labels["namespace"]}",pod="{labels["pod"]}"}}'
    (tmp_path / "rules.yml").write_text(dump_yaml({"groups": [group]}))
    inputs = [
        series("DCGM_FI_DEV_GPU_TEMP", GPU, "90x20"),
        series("up", GPU, "1x20"),
        *publisher_input({}, 20),
    ]
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": inputs,
        "alert_rule_test": [{"eval_time": "5m", "alertname": "GPUThermalThrottling", "exp_alerts": [
            {"exp_labels": {**GPU, **rule["labels"]}, "exp_annotations": expanded}]}]}]}  # fmt: skip
    (tmp_path / "test.yml").write_text(dump_yaml(test))
    result = subprocess.run([promtool, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True,
                            text=True, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
