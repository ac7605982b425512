"""An alert's own signal: every catalogue alert maps to the series its rendered rule reads (derived from
render/prometheus.py, so a changed rule changes the map), with the threshold the effective policy gives;
the report plots them first, scoped to the alert's pod, node or GPU, and weighs the catalogue's cause
first unless a finding reads the same signal."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from tests.conftest import monitor, policy
from tests.diagnosis.report_inputs import report_input
from tests.diagnosis.traces import AT, JOB, NS, node_name, pod_name, trace
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog import ALERT_NAMES, ALERTS_BY_NAME, METRICS_BY_NAME
from trainguard.diagnosis import Cause, Series, diagnose, labels_of
from trainguard.diagnosis import signals as sig
from trainguard.diagnosis.fetch import fetch_own
from trainguard.diagnosis.own_signal import NOT_PLOTTED, Signal, alert_signals, own_signal, scope
from trainguard.diagnosis.report import OWN_PLOT_PREFIX, PLOTS, AlertInfo, build
from trainguard.render.policy import effective_policy
from trainguard.render.prometheus import rule_group

SVG = "{http://www.w3.org/2000/svg}"
FORMS: tuple[dict[str, Any], ...] = (
    {},
    {"spec.mode": "inference"},
    {"spec.exporter.gpuBackend": "dcgm"},
    {"spec.mode": "inference", "spec.exporter.gpuBackend": "dcgm"},
)
"""The monitors whose rule groups together hold every catalogue alert: modes enable some alerts, the
GPU backend changes the series GPU alerts read."""


def signals_of(m: TrainingJobMonitor, **policy_changes: Any) -> dict[str, tuple[Signal, ...]]:
    return alert_signals(m, effective_policy(m, [policy(**policy_changes)]))


def mapped() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for form in FORMS:
        for alert, signals in signals_of(monitor(**form)).items():
            out.setdefault(alert, set()).update(s.series for s in signals)
    return out


def test_every_catalogue_alert_maps_to_the_series_its_rule_reads_or_says_why_not() -> None:
    got = mapped()
    missing = [a for a in ALERT_NAMES if a not in got]
    assert not missing, f"alerts in no rendered rule group: {missing}"
    unplotted = sorted(a for a in ALERT_NAMES if not got[a])
    assert unplotted == sorted(NOT_PLOTTED), f"map to no series but are not listed with a reason: {unplotted}"
    assert all(reason.strip() for reason in NOT_PLOTTED.values())


def test_each_series_is_a_catalogue_metric_up_or_a_series_the_group_records() -> None:
    for form in FORMS:
        m = monitor(**form)
        recorded = {
            r["record"] for r in rule_group(m, effective_policy(m, [policy()]))["rules"] if "record" in r
        }
        for alert, signals in signals_of(m).items():
            for s in signals:
                assert s.series in METRICS_BY_NAME or s.series in recorded or s.series == "up", (alert, s)
                # the series is in the rule as rendered
                expr = next(
                    r["expr"]
                    for r in rule_group(m, effective_policy(m, [policy()]))["rules"]
                    if r.get("alert") == alert
                )
                assert re.search(re.escape(s.series) + r"\{", expr), (alert, s.series)


def test_host_swap_pressure_reads_kswapd_and_host_memory_with_the_policys_thresholds() -> None:
    (kswapd, memory) = signals_of(monitor())["HostSwapPressure"]
    assert (kswapd.series, kswapd.op, kswapd.threshold, kswapd.param) == (
        sig.KSWAPD,
        ">",
        0.05,
        "kswapd_ratio",
    )
    assert (memory.series, memory.op, memory.threshold, memory.param) == (
        sig.HOST_MEMORY,
        ">",
        0.8,
        "memory_ratio",
    )
    # a policy's own number is the one drawn: derived from the rendered rule, not a copy of the catalogue
    override = [{"name": "HostSwapPressure", "params": {"kswapd_ratio": 0.12}}]
    tuned = signals_of(monitor(), **{"spec.alerts": override})
    assert tuned["HostSwapPressure"][0].threshold == 0.12


def test_a_recorded_series_is_plotted_as_recorded_and_the_warm_up_gate_is_not() -> None:
    drop = [s.series for s in signals_of(monitor())["TrainingThroughputDrop"]]
    assert drop[0] == "trainguard:train_tokens_per_second_per_gpu:avg"
    assert "trainguard:train_step:max" not in drop  # the warm-up gate says when, not what fired
    first = signals_of(monitor())["TrainingThroughputDrop"][0]
    assert sig.THROUGHPUT in first.made_of  # a finding reading the raw metric names the same cause
    assert first.labels == ("namespace", "training_job")


def test_with_dcgm_exporter_a_gpu_alert_reads_the_joined_series_and_keeps_its_gpu_label() -> None:
    (temp,) = signals_of(monitor(**{"spec.exporter.gpuBackend": "dcgm"}))["GPUThermalThrottling"]
    assert temp.series == f"trainguard_dcgm:{sig.GPU_TEMP}" and "gpu" in temp.labels
    assert temp.threshold == ALERTS_BY_NAME["GPUThermalThrottling"].params[0].default


def test_a_gpu_alerts_signal_is_scoped_to_its_gpu_and_a_job_series_to_nothing() -> None:
    labels = {"alertname": "GPUThermalThrottling", "namespace": NS, "training_job": JOB, "pod": "p-1",
              "node": "n-1", "gpu": "3"}  # fmt: skip
    (temp,) = signals_of(monitor())["GPUThermalThrottling"]
    assert scope(temp, labels) == {"pod": "p-1", "node": "n-1", "gpu": "3"}
    (kswapd, _) = signals_of(monitor())["HostSwapPressure"]
    assert scope(kswapd, labels) == {"pod": "p-1", "node": "n-1"}  # a host series has no gpu label
    first = signals_of(monitor())["TrainingThroughputDrop"][0]
    assert scope(first, labels) == {}


class _Prom:
    """A RangeQuery that answers one series per query and remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any:
        return []

    def custom_query_range(
        self,
        query: str,
        start_time: datetime,
        end_time: datetime,
        step: str,
        params: dict[str, Any] | None = None,
    ) -> Any:
        self.asked.append(query)
        labels = dict(re.findall(r'(\w+)="([^"]*)"', query))
        return [{"metric": {"__name__": "x", **labels}, "values": [[AT - 15, "90"], [AT, "91"]]}]


def test_the_edge_fetches_a_gpu_alerts_series_for_that_gpu_only() -> None:
    prom = _Prom()
    (temp,) = signals_of(monitor())["GPUThermalThrottling"]
    labels = {"namespace": NS, "training_job": JOB, "pod": "p-1", "node": "n-1", "gpu": "3"}
    got = fetch_own(prom, NS, JOB, AT, signals=[temp], labels=labels, before=1800, after=150)
    assert prom.asked == [
        f'{sig.GPU_TEMP}{{namespace="{NS}",training_job="{JOB}",pod="p-1",node="n-1",gpu="3"}}'
    ]
    assert [(s.metric, s.label("gpu")) for s in got] == [(sig.GPU_TEMP, "3")]


def _ramp(metric: str, base: float, high: float, onset: float, *, pod: str, node: str) -> Series:
    pts = tuple((t, high if t >= onset else base) for t in (AT - 1800 + 15 * i for i in range(131)))
    return Series(metric, labels_of({"namespace": NS, "training_job": JOB, "pod": pod, "node": node}), pts)


def swap_report_input(scenario: str = "straggler", seed: int = 0) -> Any:
    """A HostSwapPressure on rank 2's pod over a trace in which the rules find `scenario`."""
    pod, node = pod_name(2), node_name(2)
    snap = trace(scenario, seed).snapshot
    signals = signals_of(monitor())["HostSwapPressure"]
    own = own_signal(
        "HostSwapPressure",
        signals,
        (
            _ramp(sig.KSWAPD, 0.01, 0.31, AT - 200, pod=pod, node=node),
            _ramp(sig.HOST_MEMORY, 0.6, 0.93, AT - 400, pod=pod, node=node),
        ),
    )
    alert = AlertInfo("HostSwapPressure", "P2", AT, NS, JOB, node=node, pod=pod)
    return replace(report_input(scenario, seed), alert=alert, findings=tuple(diagnose(snap)), own=own)


def test_a_swap_report_plots_kswapd_and_host_memory_first_with_their_thresholds() -> None:
    inp = swap_report_input()
    report = build(inp)
    keys = list(report.plots)
    assert keys[:2] == [f"{OWN_PLOT_PREFIX}{sig.KSWAPD}", f"{OWN_PLOT_PREFIX}{sig.HOST_MEMORY}"]
    assert set(keys[2:]) == {p.key for p in PLOTS}
    kswapd = ET.fromstring(report.plots[keys[0]])
    assert "What fired: HostSwapPressure" in (kswapd.findtext(f"{SVG}title") or "")
    line = kswapd.find(f"{SVG}line[@class='threshold']")
    assert line is not None and line.findtext(f"{SVG}title") == "kswapd_ratio > 0.05"
    assert kswapd.findall(f"{SVG}polyline")
    # the same order in every form
    data = json.loads(json.dumps(report.data, allow_nan=False))
    assert data["plots"] == keys
    assert re.findall(r'<figure data-plot="([^"]+)"', report.html) == keys
    assert re.findall(r"!\[([^\]]+)\]\(data:", report.markdown) == keys


def test_a_swap_report_names_swap_pressure_first_with_its_value_at_the_alert() -> None:
    inp = swap_report_input()
    assert any(f.cause is Cause.STRAGGLER for f in inp.findings)  # what the report named alone before
    report = build(inp)
    causes = report.markdown.split("## Probable causes", 1)[1].split("## Series", 1)[0]
    headings = re.findall(r"^### (.+)$", causes, re.M)
    assert headings[0] == "HostSwapPressure: the alert's own cause"
    assert any(h.startswith("straggler") for h in headings[1:])
    assert ALERTS_BY_NAME["HostSwapPressure"].probable_cause in causes
    assert (
        f'{sig.KSWAPD}{{namespace="{NS}",node="{node_name(2)}",pod="{pod_name(2)}",training_job="{JOB}"}} = 0.31'
        in causes
    )
    data = report.data
    assert data["alertCause"]["alert"] == "HostSwapPressure"
    assert [(e["metric"], e["value"], e["reference"]) for e in data["alertCause"]["evidence"]] == [
        (sig.KSWAPD, 0.31, 0.05),
        (sig.HOST_MEMORY, 0.93, 0.8),
    ]
    assert [f["cause"] for f in data["findings"]] == [f.cause.value for f in inp.findings]  # order kept
    assert re.findall(r'<div class="cause[^"]*" data-cause="([^"]+)"', report.html)[0] == "HostSwapPressure"


def test_a_finding_that_reads_the_alerts_own_signal_leads_instead_of_the_catalogues_cause() -> None:
    seed = next(
        s for s in range(20)
        if any(e.metric == sig.KSWAPD for f in diagnose(trace("throughput-host", s).snapshot) for e in f.evidence)
    )  # fmt: skip
    report = build(swap_report_input("throughput-host", seed))
    assert report.data["alertCause"] is None
    first = report.data["findings"][0]
    assert first["cause"] == Cause.THROUGHPUT_HOST.value
    assert sig.KSWAPD in {e["metric"] for e in first["evidence"]}
    assert "the alert's own cause" not in report.markdown


def test_without_its_own_signal_a_report_is_as_before() -> None:
    report = build(report_input())
    assert list(report.plots) == [p.key for p in PLOTS]
    assert report.data["alertCause"] is None


@pytest.mark.parametrize("alert", ["GPUCriticalXid", "TrainingJobStalled"])
def test_a_literal_the_policy_does_not_give_draws_no_threshold(alert: str) -> None:
    assert all(s.threshold is None for s in signals_of(monitor())[alert])
