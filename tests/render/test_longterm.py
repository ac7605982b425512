"""The long-term aggregate group and the remote_write keep-list (render/longterm.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import monitor, policy
from tests.promql import selected_names
from trainguard.catalog import METRICS
from trainguard.cli import main
from trainguard.render.longterm import (
    ALERT_HISTORY,
    GPU_HOURS,
    aggregate_group,
    aggregate_names,
    keep_regex,
    remote_write,
)
from trainguard.render.policy import effective_policy
from trainguard.render.prometheus import rule_group

QUICKSTART = str(Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml")


@pytest.mark.parametrize("backend", ["nvml", "simulated", "dcgm"])
def test_every_aggregate_reads_an_exported_or_recorded_series_of_its_own_job(backend: str) -> None:
    m = monitor(**{"spec.exporter.gpuBackend": backend})
    recorded = {r["record"] for r in rule_group(m, effective_policy(m, [policy()]))["rules"] if "record" in r}
    produced = {metric.name for metric in METRICS} | recorded | {ALERT_HISTORY[0]}
    for rule in aggregate_group(m)["rules"]:
        reads = selected_names(rule["expr"])
        assert reads and reads <= produced, (rule["record"], reads - produced)
        assert 'namespace="ml",training_job="llama-pretrain"' in rule["expr"], rule
        if backend == "dcgm" and rule["record"].startswith("node:DCGM_"):
            assert reads == {f"trainguard_dcgm:{rule['record'].split(':')[1]}"}, rule


def test_record_names_follow_level_metric_operation_over_catalogue_names() -> None:
    catalogue = {metric.name for metric in METRICS} | {ALERT_HISTORY[0]}
    for name in aggregate_names():
        level, metric, op = name.split(":")
        # GPU-hours are derived, not a catalogue metric: they count DCGM_FI_DEV_FB_USED series
        assert level in {"job", "node"} and (metric in catalogue or name == GPU_HOURS) and op, name
    assert len(set(aggregate_names())) == len(aggregate_names())


def test_group_is_separate_from_the_alerting_group_and_evaluated_every_five_minutes() -> None:
    m = monitor()
    group = aggregate_group(m)
    assert group["interval"] == "5m"
    assert group["name"] != rule_group(m, effective_policy(m, [policy()]))["name"]
    assert [r["record"] for r in group["rules"]] == list(aggregate_names())
    assert aggregate_group(m, "5s")["interval"] == "5s"
    # a shorter interval does not shorten the window the aggregates read
    assert aggregate_group(m, "5s")["rules"] == group["rules"]


def test_keep_list_ships_the_aggregates_and_alert_history_and_no_raw_series() -> None:
    keep = re.compile(keep_regex())  # Prometheus anchors it: fullmatch
    for name in (*aggregate_names(), *ALERT_HISTORY):
        assert keep.fullmatch(name), name
    for metric in METRICS:
        assert not keep.fullmatch(metric.name), metric.name
    for raw in ("up", "trainguard:train_step:max", "trainguard_dcgm:DCGM_FI_DEV_GPU_TEMP", "ALERTS_X"):
        assert not keep.fullmatch(raw), raw


def test_events_url_splits_the_history_from_the_aggregates() -> None:
    (one,) = remote_write("http://a/w")["remote_write"]
    assert one["write_relabel_configs"] == [
        {"source_labels": ["__name__"], "regex": keep_regex(), "action": "keep"}
    ]
    agg, events = remote_write("http://a/w", "http://b/w")["remote_write"]
    assert (agg["url"], events["url"]) == ("http://a/w", "http://b/w")
    assert re.fullmatch(agg["write_relabel_configs"][0]["regex"], "node:DCGM_FI_DEV_GPU_TEMP:max5m")
    assert not re.fullmatch(agg["write_relabel_configs"][0]["regex"], "ALERTS")
    assert events["write_relabel_configs"][0]["regex"] == "ALERTS|ALERTS_FOR_STATE"


def test_cli_renders_aggregates_and_remote_write_for_a_plain_prometheus(tmp_path: Path) -> None:
    url = "http://127.0.0.1:8428/api/v1/write"
    args = ["render", "-f", QUICKSTART, "--format", "prometheus", "--out-dir", str(tmp_path)]
    assert main([*args, "--remote-write-url", url, "--aggregate-interval", "30s"]) == 0
    (group,) = yaml.safe_load((tmp_path / "aggregates.yml").read_text())["groups"]
    assert (group["name"], group["interval"]) == ("trainguard.ml.llama-pretrain.longterm", "30s")
    assert yaml.safe_load((tmp_path / "remote_write.yml").read_text()) == remote_write(url)
    other = tmp_path / "no-url"
    assert main(["render", "-f", QUICKSTART, "--format", "prometheus", "--out-dir", str(other)]) == 0
    assert not (other / "remote_write.yml").exists()
    assert yaml.safe_load((other / "aggregates.yml").read_text())["groups"][0]["interval"] == "5m"


def test_cli_puts_the_aggregate_group_into_the_prometheus_rule(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", QUICKSTART]) == 0
    (rule,) = [o for o in yaml.safe_load_all(capsys.readouterr().out) if o["kind"] == "PrometheusRule"]
    assert [g["name"] for g in rule["spec"]["groups"]] == [
        "trainguard.ml.llama-pretrain",
        "trainguard.ml.llama-pretrain.longterm",
    ]


def test_rendered_aggregates_pass_promtool(promtool: str, tmp_path: Path) -> None:
    assert main(["render", "-f", QUICKSTART, "--format", "prometheus", "--out-dir", str(tmp_path)]) == 0
    result = subprocess.run(
        [promtool, "check", "rules", "aggregates.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_each_jobs_goodput_goes_to_the_aggregates_store_and_nothing_per_pod_with_it() -> None:
    """A platform reports each job's lost time by cause over months: the recorded shares and the
    operator's counters are a few series per job; the sidecars' per-pod counters they come from are not."""
    keep = re.compile(keep_regex())
    for name in ("trainguard:job_lost:ratio", "trainguard:job_lost_all:ratio", "trainguard:job_ettr:ratio",
                 "trainguard_job_lost_seconds_total", "trainguard_job_productive_seconds_total",
                 "trainguard_job_ettr_ratio", "trainguard_job_restarts_redo_unknown"):  # fmt: skip
        assert keep.fullmatch(name), name
    for raw in ("trainguard_train_stall_seconds_total", "trainguard_checkpoint_save_seconds_total"):
        assert not keep.fullmatch(raw), raw
    agg, events = remote_write("http://a/w", "http://b/w")["remote_write"]
    assert re.fullmatch(agg["write_relabel_configs"][0]["regex"], "trainguard_job_lost_seconds_total")
    assert not re.fullmatch(events["write_relabel_configs"][0]["regex"], "trainguard:job_ettr:ratio")
