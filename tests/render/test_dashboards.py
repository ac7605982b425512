"""The Grafana dashboards: every query is PromQL over series something produces, the committed JSON is
what the catalogue generates today, and the output does not change between runs."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.promql import selected_names
from tests.render.test_rule_inputs_exist import EXTERNAL as RULE_EXTERNAL
from trainguard.api.monitor import COST_LABELS_RESERVED
from trainguard.catalog import METRICS, SEVERITIES
from trainguard.catalog.kubernetes import FAULTY_TAINT
from trainguard.catalog.metrics import GOODPUT_METRICS
from trainguard.cli import main
from trainguard.render.dashboards import (
    COST_LABELS,
    EXTERNAL_SERIES,
    UnknownSeries,
    panel_queries,
    recorded_series,
    render_dashboards,
    series,
    variable_queries,
)
from trainguard.render.longterm import GPU_HOURS, PEAK_MEMORY

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "charts" / "trainguard" / "dashboards"
VARIABLES = {
    "$namespace": "ml",
    "$training_job": "llama-pretrain",
    "$node": "gpu-node-1",
    "$sigma": "3",
    "$cost_label": "team",
    "$__rate_interval": "1m",
    "$__range": "1h",
}
"""What Grafana substitutes before it sends a query: a value of each template variable."""


def substituted(expr: str) -> str:
    for name, value in sorted(VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    assert "$" not in expr, f"a template variable the tests do not substitute: {expr}"
    return expr


def boards() -> dict[str, dict[str, Any]]:
    return {name: json.loads(text) for name, text in render_dashboards().items()}


def all_queries() -> list[tuple[str, str, str]]:
    out = []
    for name, board in boards().items():
        out += [(name, title, expr) for title, expr in panel_queries(board)]
        for var, query in variable_queries(board):
            inner = re.fullmatch(r"label_values\((.*), \w+\)", query)
            assert inner, f"{name}: variable {var} is not a label_values query: {query}"
            out.append((name, f"variable {var}", inner.group(1)))
    return out


@pytest.mark.parametrize(("board", "panel", "expr"), all_queries(), ids=lambda x: str(x)[:60])
def test_every_query_parses_and_reads_only_produced_series(board: str, panel: str, expr: str) -> None:
    names = selected_names(substituted(expr))
    exported = {m.name for m in (*METRICS, *GOODPUT_METRICS)}
    exported |= {f"{m.name}_bucket" for m in METRICS if m.type == "histogram"}
    unknown = names - exported - recorded_series() - set(EXTERNAL_SERIES)
    assert not unknown, f"{board} / {panel} reads series nothing produces: {unknown}"
    assert names, f"{board} / {panel} selects no series at all"


def test_every_query_passes_promtool(tmp_path: Path, promtool: str) -> None:
    """Prometheus' own parser agrees with promql-parser on every query (as rules, which promtool checks)."""
    rules = [
        {"record": f"dashboard:q{i}", "expr": substituted(e)} for i, (_, _, e) in enumerate(all_queries())
    ]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    proc = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_external_series_are_the_rules_own_or_named() -> None:
    """The dashboards read no more outside series than the rules do, plus ALERTS and the cordon taint."""
    assert set(EXTERNAL_SERIES) - set(RULE_EXTERNAL) == {"ALERTS", "kube_node_spec_taint"}


def test_a_name_outside_the_contract_is_refused() -> None:
    with pytest.raises(UnknownSeries, match="trainguard_train_tokens_per_second"):
        series("trainguard_train_tokens_per_second", 'namespace="ml"')
    with pytest.raises(UnknownSeries):
        series("trainguard:train_tokens_per_second_per_gpu:avg:baseline_median")
    assert series("trainguard_train_loss", 'pod="a"') == 'trainguard_train_loss{pod="a"}'


def test_the_baseline_band_reads_the_recorded_baseline() -> None:
    assert {
        "trainguard:train_tokens_per_second_per_gpu:avg:baseline_mean",
        "trainguard:train_tokens_per_second_per_gpu:avg:baseline_stddev",
        "trainguard:train_collective_seconds:p99",
    } <= recorded_series()
    board = boards()["training-job.json"]
    (panel,) = [p for p in board["panels"] if p["title"] == "Throughput and baseline band"]
    legends = {t["legendFormat"] for t in panel["targets"]}
    fill = [
        (o["matcher"]["options"], prop["value"])
        for o in panel["fieldConfig"]["overrides"]
        for prop in o["properties"]
        if prop["id"] == "custom.fillBelowTo"
    ]
    assert fill == [("band upper", "band lower")]
    assert {"band upper", "band lower"} <= legends


def test_active_alerts_show_every_severity_p3_included() -> None:
    exprs = [e for t, e in panel_queries(boards()["cluster-health.json"]) if t == "Firing alerts by severity"]
    assert exprs and all(f"{s}" in exprs[0] for s in SEVERITIES) and "P3" in SEVERITIES


def test_the_cordon_taint_panel_reads_the_operators_taint() -> None:
    exprs = [e for board in boards().values() for _, e in panel_queries(board) if "kube_node_spec_taint" in e]
    assert exprs and all(f'key="{FAULTY_TAINT}"' in e for e in exprs), exprs


def test_panels_use_the_datasource_variable_and_have_distinct_ids() -> None:
    for name, board in boards().items():
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), name
        for p in board["panels"]:
            if p["type"] != "row":
                assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (name, p["title"])


def test_the_per_node_row_repeats_over_the_node_variable() -> None:
    board = boards()["cluster-health.json"]
    rows = [p for p in board["panels"] if p["type"] == "row" and p.get("repeat")]
    assert [r["repeat"] for r in rows] == ["node"]
    after = board["panels"][board["panels"].index(rows[0]) + 1 :][:3]
    assert [p["title"] for p in after] == ["Temperature", "Utilisation", "Power"]


def test_output_is_byte_identical_between_runs() -> None:
    assert render_dashboards() == render_dashboards()


def test_the_committed_dashboards_are_what_the_catalogue_generates() -> None:
    """Like crds/: a metric renamed in the catalogue changes (or breaks) the generated JSON, and this
    fails until `make dashboards` is run and the result committed."""
    expected = render_dashboards()
    committed = {p.name: p.read_text() for p in COMMITTED.glob("*.json")}
    assert committed == expected, "charts/trainguard/dashboards is out of date: run `make dashboards`"


def test_the_cli_writes_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboards", "--out-dir", str(tmp_path)]) == 0
    assert {p.name for p in tmp_path.iterdir()} == set(render_dashboards())
    assert main(["dashboards", "--out-dir", str(tmp_path), "--check"]) == 0
    (tmp_path / "training-job.json").write_text("{}\n")
    with pytest.raises(SystemExit) as exc:
        main(["dashboards", "--out-dir", str(tmp_path), "--check"])
    assert exc.value.code != 0
    assert "make dashboards" in capsys.readouterr().err


def test_the_cost_dashboard_charges_gpu_hours_and_peak_memory_over_its_range() -> None:
    board = boards()["cost.json"]
    queries = dict(panel_queries(board))
    by = {
        "GPU-hours by namespace": "sum by (namespace)",
        "GPU-hours by job": "sum by (namespace, training_job)",
        "GPU-hours by $cost_label": "sum by ($cost_label)",
    }
    for title, grouping in by.items():
        assert f"{grouping} (sum_over_time({GPU_HOURS}[$__range]))" in queries[title], queries[title]
    peak = queries["Peak GPU memory by job"]
    assert f"max by (namespace, training_job) (max_over_time({PEAK_MEMORY.record}[$__range]))" in peak
    (var,) = [v for v in board["templating"]["list"] if v["name"] == "cost_label"]
    offered = var["query"].split(",")
    assert offered == list(COST_LABELS) and not set(offered) & set(COST_LABELS_RESERVED), var
    assert board["time"]["from"] == "now-30d"


def test_the_job_dashboard_shows_its_goodput_from_the_operators_series() -> None:
    queries = dict(panel_queries(boards()["training-job.json"]))
    assert "trainguard_job_ettr_ratio{" in queries["ETTR (last 24 h)"]
    lost = queries["Time lost by cause (per hour)"]
    assert lost.startswith("sum by (cause) (increase(trainguard_job_lost_seconds_total{")
