"""Grafana dashboards built from the catalogue with grafana-foundation-sdk: cluster health, one job,
and cost (GPU-hours and peak GPU memory for charge-back).

Every query names its series through `series()`, which accepts only the metric contract (catalog
METRICS), the series the rule renderers record (render/prometheus.py and the long-term aggregates
of render/longterm.py, asked rather than copied) and
the few external series listed in EXTERNAL_SERIES. A renamed metric therefore fails `make dashboards`
(and the drift test) instead of leaving a panel that silently shows nothing.

Pure and deterministic: the same catalogue gives byte-identical JSON (sorted keys, no ids or times
that change between runs), so the files committed under charts/trainguard/dashboards stay diff-clean.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from typing import Any

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import prometheus as prom_model

from trainguard.api import TrainingJobMonitor, parse_object
from trainguard.api.common import duration_seconds
from trainguard.api.monitor import Baseline
from trainguard.catalog import ALERTS_BY_NAME, METRICS, SEVERITIES, MetricType
from trainguard.catalog.kubernetes import FAULTY_TAINT
from trainguard.catalog.metrics import GOODPUT_METRICS, SLOWING_THROTTLE_REASONS, THROTTLE_REASONS
from trainguard.render.longterm import GPU_HOURS, PEAK_MEMORY, WINDOW, aggregate_names
from trainguard.render.prometheus import (
    ETTR,
    ETTR_WINDOW,
    LOST,
    LOST_ALL,
    OUTLIER_Z,
    OWN_EXCESS,
    OWN_SPREAD,
    STRAGGLER_WINDOW,
    Context,
    recording_rules,
)

EXTERNAL_SERIES: dict[str, str] = {
    "up": "Prometheus' own scrape health of the PodMonitor's targets",
    "ALERTS": "Prometheus' own series of pending and firing alerts (P3 included: shown only here)",
    "kube_node_status_condition": "kube-state-metrics: node Ready condition (what GPUNodeDown reads)",
    "kube_node_spec_taint": "kube-state-metrics: node taints (the operator's cordon taint)",
}
"""Series the dashboards read that trainguard neither exports nor records; each names its source."""

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
JOB_SELECTOR = 'namespace="$namespace",training_job="$training_job"'


class UnknownSeries(ValueError):
    """A query named a series that nothing exports, records or is known to provide."""


@cache
def recorded_series() -> frozenset[str]:
    """Names of the recording rules render/prometheus.py renders, for both GPU backends, and of the
    long-term aggregates (render/longterm.py), the cost records among them."""
    names: set[str] = set()
    for backend in ("simulated", "dcgm"):
        monitor = parse_object(
            {
                "apiVersion": "trainguard.io/v1alpha1",
                "kind": "TrainingJobMonitor",
                "metadata": {"name": "dashboards", "namespace": "dashboards"},
                "spec": {"selector": {"matchLabels": {"app": "x"}}, "exporter": {"gpuBackend": backend}},
            }
        )
        assert isinstance(monitor, TrainingJobMonitor)
        names |= {r["record"] for r in recording_rules(Context(monitor))}
    return frozenset(names | set(aggregate_names()))


@cache
def allowed_series() -> frozenset[str]:
    """Every series name a dashboard query may select."""
    exported = {m.name for m in (*METRICS, *GOODPUT_METRICS)}
    exported |= {
        f"{m.name}{suffix}"
        for m in METRICS
        if m.type == MetricType.HISTOGRAM
        for suffix in ("_bucket", "_sum", "_count")
    }
    return frozenset(exported | recorded_series() | set(EXTERNAL_SERIES))


def series(name: str, *matchers: str) -> str:
    """A selector of `name` with label matchers; refuses a name no producer of the contract has."""
    if name not in allowed_series():
        raise UnknownSeries(f"{name} is not in the metric contract, the recorded series or EXTERNAL_SERIES")
    return f"{name}{{{','.join(matchers)}}}" if matchers else name


def job(name: str, *matchers: str) -> str:
    """A series of the dashboard's selected job."""
    return series(name, JOB_SELECTOR, *matchers)


def job_gpu(metric: str) -> str:
    """A dcgm-exporter-named GPU series of the selected job, whichever the monitor's gpuBackend: the
    sidecar's own, or dcgm-exporter's joined to the job's pods by the rules (`trainguard_dcgm:`)."""
    return f"({job(metric)} or {job(f'trainguard_dcgm:{metric}')})"


# ---- panels -------------------------------------------------------------------------------------


def _target(expr: str, legend: str = "", ref: str = "A", instant: bool = False) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DATASOURCE)
    if legend:
        q = q.legend_format(legend)
    if instant:
        q = q.instant().format(prom_model.PromQueryFormat.TABLE)
    return q


def _graph(title: str, description: str, unit: str, *targets: tuple[str, str]) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .height(8)
        .span(12)
        .line_width(1)
        .fill_opacity(0)
    )
    for i, (expr, legend) in enumerate(targets):
        panel = panel.with_target(_target(expr, legend, ref=chr(ord("A") + i)))
    return panel


def _stat(title: str, description: str, unit: str, expr: str, legend: str = "") -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .height(5)
        .span(6)
        .graph_mode(common.BigValueGraphMode.AREA)
        .with_target(_target(expr, legend))
    )


def _table(title: str, description: str, expr: str, span: int = 24, unit: str = "") -> table.Panel:
    panel = (
        table.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .height(8)
        .span(span)
        .with_target(_target(expr, instant=True))
    )
    return panel.unit(unit) if unit else panel


def _datasource_variable() -> dash.DatasourceVariable:
    return dash.DatasourceVariable("datasource").label("Prometheus").type("prometheus")


def _query_variable(name: str, query: str, *, multi: bool = False) -> dash.QueryVariable:
    return (
        dash.QueryVariable(name)
        .label(name)
        .query(query)
        .datasource(DATASOURCE)
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .multi(multi)
        .include_all(multi)
    )


def _base(title: str, uid: str, description: str) -> dash.Dashboard:
    return (
        dash.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["trainguard"])
        .editable()
        .time("now-6h", "now")
        .refresh("30s")
        .timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .with_variable(_datasource_variable())
    )


FIRING = 'alertstate="firing"'


def cluster_health() -> dash.Dashboard:
    """The fleet: the four core indicators, each node's GPUs, and every firing alert by severity."""
    ready = series("kube_node_status_condition", 'condition="Ready"', 'status="true"')
    jobs = f"count(count by (namespace, training_job) ({series('trainguard_train_step')}))"
    p0 = series("ALERTS", FIRING, 'priority="P0"', 'training_job!=""')
    p0_jobs = f"count(count by (namespace, training_job) (max_over_time({p0}[1h])))"
    node = 'Hostname="$node"'
    d = _base(
        "trainguard / Cluster health",
        "trainguard-cluster-health",
        "GPU fleet health: node offline rate, OOMs, packet loss, job interruptions, each node's GPUs and "
        "every firing alert by severity. Generated by `trainguard dashboards`; do not edit by hand.",
    ).with_variable(
        _query_variable("node", f"label_values({series('DCGM_FI_DEV_GPU_TEMP')}, Hostname)", multi=True)
    )
    d = (
        d.with_row(dash.Row("Core indicators"))
        .with_panel(
            _stat(
                "Node offline rate",
                "Share of nodes whose Ready condition is not true (kube-state-metrics), the state GPUNodeDown "
                "fires on.",
                "percentunit",
                f"sum({ready} == bool 0) / count({ready})",
            )
        )
        .with_panel(
            _stat(
                "OOMs (1h)",
                "CUDA out-of-memory errors the trainers reported through the SDK in the last hour "
                "(trainguard_train_oom_total).",
                "none",
                f"sum(increase({series('trainguard_train_oom_total')}[1h]))",
            )
        )
        .with_panel(
            _stat(
                "Packet loss (worst interface)",
                "The highest share of packets dropped or in error on any node's interface.",
                "percentunit",
                f"max({series('trainguard_network_packet_loss_ratio')})",
            )
        )
        .with_panel(
            _stat(
                "Job interruption rate (1h)",
                "Share of training jobs with a P0 alert firing in the last hour (Prometheus' ALERTS: stalled, "
                "non-finite loss, node down, fatal XID, ECC, GPU lost, OOM). The operator's own "
                "TrainingInterrupted goes straight to Alertmanager, so Prometheus does not see it.",
                "percentunit",
                f"({p0_jobs} or vector(0)) / {jobs}",
            )
        )
    )
    gpu_legend = "GPU {{gpu}}"
    d = (
        d.with_row(dash.Row("Node $node").repeat("node"))
        .with_panel(
            _graph(
                "Temperature",
                "GPU core temperature per GPU of the node.",
                "celsius",
                (series("DCGM_FI_DEV_GPU_TEMP", node), gpu_legend),
            ).span(8)
        )
        .with_panel(
            _graph(
                "Utilisation",
                "GPU utilisation per GPU of the node.",
                "percent",
                (series("DCGM_FI_DEV_GPU_UTIL", node), gpu_legend),
            ).span(8)
        )
        .with_panel(
            _graph(
                "Power",
                "Power draw per GPU of the node, and the limit the driver enforces.",
                "watt",
                (series("DCGM_FI_DEV_POWER_USAGE", node), gpu_legend),
                (series("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", node), "limit GPU {{gpu}}"),
            ).span(8)
        )
    )
    for panel in _node_slow_gpu_panels(node):
        d = d.with_panel(panel)
    # the grade is in `priority` whatever the platform's severity style (catalog/severity.py)
    by_severity = series("ALERTS", FIRING, 'priority=~"' + "|".join(SEVERITIES) + '"')
    return (
        d.with_row(dash.Row("Active alerts"))
        .with_panel(
            _graph(
                "Firing alerts by severity",
                f"Firing alerts per severity ({', '.join(SEVERITIES)}). P3 alerts page no one: this is where "
                "they are seen.",
                "none",
                (f"count by (priority) ({by_severity})", "{{priority}}"),
            ).span(24)
        )
        .with_panel(
            _table(
                "Firing alerts",
                "Every firing alert, with its severity, job and where.",
                f"sort_desc({series('ALERTS', FIRING)})",
            )
        )
    )


def training_job() -> dash.Dashboard:
    """One job: progress against its baseline, numerics, memory, checkpoints, collectives, remediation,
    and last its slow GPUs and stragglers (a row added after the others keeps their panel ids)."""
    throughput = "trainguard:train_tokens_per_second_per_gpu:avg"
    mean, stddev = job(f"{throughput}:baseline_mean"), job(f"{throughput}:baseline_stddev")
    p99 = "trainguard:train_collective_seconds:p99"
    pod_legend = "{{pod}}"
    d = (
        _base(
            "trainguard / Training job",
            "trainguard-training-job",
            "One training job: throughput against its baseline band, loss, gradients, loss scale, GPU memory, "
            "checkpoints, collective latency, remediation and alerts. Generated by `trainguard dashboards`; "
            "do not edit by hand.",
        )
        .with_variable(
            _query_variable("namespace", f"label_values({series('trainguard_train_step')}, namespace)")
        )
        .with_variable(
            _query_variable(
                "training_job",
                "label_values("
                + series("trainguard_train_step", 'namespace="$namespace"')
                + ", training_job)",
            )
        )
        .with_variable(
            dash.CustomVariable("sigma")
            .label("band (sigma)")
            .description("Width of the baseline band in standard deviations (the monitor's baseline.sigma).")
            .values("1,2,3,4,5")
            .current(
                model.VariableOption(selected=True, text=_num(Baseline().sigma), value=_num(Baseline().sigma))
            )
        )
    )
    d = (
        d.with_row(dash.Row("Progress"))
        .with_panel(
            _graph(
                "Throughput and baseline band",
                "Tokens per second per GPU (job average) and its baseline: mean +- sigma x stddev over the "
                "monitor's baseline window, the band TrainingThroughputDeviation and Drop judge against.",
                "none",
                (job(throughput), "throughput"),
                (mean, "baseline mean"),
                (f"{mean} + $sigma * {stddev}", "band upper"),
                (f"{mean} - $sigma * {stddev}", "band lower"),
            )
            .span(24)
            .override_by_name(
                "band upper",
                [
                    model.DynamicConfigValue(id_val="custom.fillBelowTo", value="band lower"),
                    model.DynamicConfigValue(id_val="custom.fillOpacity", value=15),
                    model.DynamicConfigValue(id_val="custom.lineWidth", value=0),
                ],
            )
            .override_by_name("band lower", [model.DynamicConfigValue(id_val="custom.lineWidth", value=0)])
        )
        .with_panel(
            _graph(
                "Loss",
                "Last finite training loss per pod.",
                "none",
                (job("trainguard_train_loss"), pod_legend),
            )
        )
        .with_panel(
            _graph(
                "Gradient norm",
                "Last gradient norm per pod, and the bound GradientExplosion fires above.",
                "none",
                (job("trainguard_train_grad_norm"), pod_legend),
                (job("trainguard:train_grad_norm:max:upper_bound"), "explosion bound"),
            )
        )
        .with_panel(
            _graph(
                "Loss scale",
                "Mixed-precision loss scale per pod (log scale): repeated halving is LossScaleUnstable.",
                "none",
                (job("trainguard_train_loss_scale"), pod_legend),
            ).scale_distribution(common_b.ScaleDistributionConfig().type(common.ScaleDistribution.LOG).log(2))
        )
        .with_panel(
            _graph(
                "Checkpoint age",
                "Seconds since the last successful checkpoint, per kind.",
                "s",
                (
                    f"time() - max by (kind) ({job('trainguard_checkpoint_last_success_timestamp_seconds')})",
                    "{{kind}}",
                ),
            )
        )
    )
    d = (
        d.with_row(dash.Row("Memory and collectives"))
        .with_panel(
            _graph(
                "GPU memory used",
                "Framebuffer used / total per GPU (the ratio the memory alerts read).",
                "percentunit",
                (job("trainguard:gpu_memory_used:ratio"), "{{pod}} GPU {{gpu}}"),
            ).span(8)
        )
        .with_panel(
            _graph(
                "Allocator fragmentation",
                "(reserved - allocated) / reserved of the framework allocator, per GPU.",
                "percentunit",
                (job("trainguard_gpu_memory_fragmentation_ratio"), "{{pod}} GPU {{gpu}}"),
            ).span(8)
        )
        .with_panel(
            _graph(
                "Collective latency p99",
                "p99 of the SDK-timed collectives, and the bound CollectiveLatencyHigh fires above.",
                "s",
                (job(p99), "p99"),
                (job(f"{p99}:upper_bound"), "bound"),
            ).span(8)
        )
    )
    job_nodes = f"group by (node) (present_over_time({job('up')}[1d]))"
    taint = series("kube_node_spec_taint", 'key="' + FAULTY_TAINT + '"')
    lost = job("trainguard_job_lost_seconds_total")
    d = (
        d.with_row(dash.Row("Goodput"))
        .with_panel(
            _stat(
                "ETTR (last 24 h)",
                "Productive over wall time over the last day, from the operator's remediation records "
                "(trainguard_job_ettr_ratio, exported by the leader): time lost to remediations that stop "
                "training and to work redone after a restart. A stall before its alert, checkpoint writes and "
                'slow ranks are in the "Goodput by cause" panel below (docs/diagnosis.md, Goodput).',
                "percentunit",
                f"max({job('trainguard_job_ettr_ratio')})",
            ).span(6)
        )
        .with_panel(
            _graph(
                "Time lost by cause (per hour)",
                "Seconds lost per hour by cause: restart (a remediation that stops training, from the alert "
                "to its last step), maintenance (a planned move off a node a person took out of service) and "
                "redone_work (the work since the checkpoint a restart resumed from). "
                "Summed over the operator's replicas: only the leader exports, and a leader change moves "
                "the series to another target.",
                "s",
                (f"sum by (cause) (increase({lost}[1h]))", "{{cause}}"),
            ).span(18)
        )
    )
    d = _goodput_by_cause(d)
    d = (
        d.with_row(dash.Row("Remediation and alerts"))
        .with_panel(
            _table(
                "Nodes trainguard cordoned",
                f"Nodes of this job (in the last day) that carry the operator's {FAULTY_TAINT} taint "
                "(kube-state-metrics), with the reason as the taint's value. The remediation records "
                "themselves are the monitor's status.remediations and its Events: `kubectl describe "
                "trainingjobmonitor -n <namespace> <monitor>`.",
                f"{taint} * on(node) group_left() {job_nodes}",
                span=12,
            )
        )
        .with_panel(
            _table(
                "P0 alerts (what the operator acts on)",
                "The job's firing P0 alerts: each one starts the monitor's remediation (keep a checkpoint, "
                "cordon, reschedule). The operator's TrainingInterrupted, TrainguardNodeCordoned and "
                "TrainguardRemediationWithheld go straight to Alertmanager and are not in Prometheus.",
                series("ALERTS", JOB_SELECTOR, FIRING, 'priority="P0"'),
                span=12,
            )
        )
        .with_panel(
            _table(
                "Active alerts",
                "Every alert of the job that is pending or firing, P3 included.",
                series("ALERTS", JOB_SELECTOR),
            )
        )
    )
    return _slow_gpus_and_stragglers(d)


# ---- slow, not dead (issue 25) ------------------------------------------------------------------

GPU_LEGEND = "{{pod}} GPU {{gpu}}"
DASHED = model.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]})


def _param(alert: str, name: str) -> float:
    """An alert's default parameter, for the panels' descriptions (a policy may set another)."""
    return next(p.default for p in ALERTS_BY_NAME[alert].params if p.name == name)


def _pcie_share(width: str, max_width: str, gen: str, max_gen: str) -> str:
    """The PCIe link's share of its full bandwidth, as GPUPCIeLinkDegraded judges it: each generation
    doubles a lane's rate, so 2^(gen - max gen) x width / max width."""
    return f"({width} / {max_width}) * 2 ^ ({gen} - {max_gen})"


def _node_slow_gpu_panels(node: str) -> list[timeseries.Panel]:
    """The per-node row's slow-GPU panels: the SM clock against its maximum, and the PCIe link's share of
    its full bandwidth (dcgm-exporter's names, so a cluster's own dcgm-exporter fills them too)."""
    link = _pcie_share(
        *(
            series(f"DCGM_FI_DEV_PCIE_{name}", node)
            for name in ("LINK_WIDTH", "MAX_LINK_WIDTH", "LINK_GEN", "MAX_LINK_GEN")
        )
    )
    return [
        _graph(
            "SM clock",
            "SM clock per GPU of the node (solid) and each GPU's maximum (dashed): a busy GPU held well "
            "below its maximum while its peers are not is slow, not dead (GPUClocksThrottled, "
            "GPUClockBelowPeers).",
            "hertz",
            (f"{series('DCGM_FI_DEV_SM_CLOCK', node)} * 1e6", "GPU {{gpu}}"),
            (f"{series('DCGM_FI_DEV_MAX_SM_CLOCK', node)} * 1e6", "max GPU {{gpu}}"),
        ).override_by_query("B", [DASHED]),
        _graph(
            "PCIe link bandwidth share",
            "Each GPU's PCIe link as a share of its full bandwidth: 2^(generation - max generation) x "
            "width / max width, the maximum being the GPU's and its slot's together. Below 1 on a busy GPU is "
            "GPUPCIeLinkDegraded (an idle GPU's link trains down to save power, which is normal).",
            "percentunit",
            (link, "GPU {{gpu}}"),
        ),
    ]


def _slow_gpus_and_stragglers(d: dash.Dashboard) -> dash.Dashboard:
    """The job's slow-not-dead row: each GPU's PCIe link and SM clock against their maxima and the job's
    median, the throttle reasons its GPUs hold, and each rank's straggler excess (the StragglerRank
    recording rules). Its own row, so other rows' panels merge around it."""
    gen, max_gen = job_gpu("DCGM_FI_DEV_PCIE_LINK_GEN"), job_gpu("DCGM_FI_DEV_PCIE_MAX_LINK_GEN")
    width, max_width = job_gpu("DCGM_FI_DEV_PCIE_LINK_WIDTH"), job_gpu("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH")
    clock, max_clock = job_gpu("DCGM_FI_DEV_SM_CLOCK"), job_gpu("DCGM_FI_DEV_MAX_SM_CLOCK")
    median = "quantile by (namespace, training_job) (0.5, " + clock + ")"
    below = 1 - _param("GPUClockBelowPeers", "ratio")
    mask = job("trainguard_dcgm:DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
    decoded = " or ".join(
        f'label_replace(floor({mask} / {bit}) % 2, "reason", "{reason}", "", "")'
        for reason, bit in THROTTLE_REASONS.items()
    )
    held = f"sum by (reason) ({job('trainguard_gpu_clock_throttle_reason')} or {decoded})"
    slowdown = _param("StragglerRank", "slowdown")
    max_legend = "max " + GPU_LEGEND
    return (
        d.with_row(dash.Row("Slow GPUs and stragglers"))
        .with_panel(
            _graph(
                "PCIe link generation",
                "PCIe link generation per GPU (solid) against the highest the GPU and its slot support "
                "together (dashed). A busy GPU below its maximum runs its link at a fraction of its bandwidth "
                "(GPUPCIeLinkDegraded); an idle GPU lowers its generation to save power, which is normal.",
                "none",
                (gen, GPU_LEGEND),
                (max_gen, max_legend),
            )
            .span(8)
            .override_by_query("B", [DASHED])
        )
        .with_panel(
            _graph(
                "PCIe link width",
                "PCIe link width (lanes) per GPU (solid) against its maximum (dashed). A link trained down to "
                "fewer lanes (a badly seated GPU or riser, a failing retimer) does not recover without a reset.",
                "none",
                (width, GPU_LEGEND),
                (max_width, max_legend),
            )
            .span(8)
            .override_by_query("B", [DASHED])
        )
        .with_panel(
            _graph(
                "PCIe link bandwidth share",
                "Each GPU's link as a share of its full bandwidth, 2^(generation - max generation) x width / "
                "max width: what GPUPCIeLinkDegraded compares with its bandwidth_ratio "
                f"({_num(_param('GPUPCIeLinkDegraded', 'bandwidth_ratio'))} by default) on a busy GPU.",
                "percentunit",
                (_pcie_share(width, max_width, gen, max_gen), GPU_LEGEND),
            ).span(8)
        )
        .with_panel(
            _graph(
                "SM clock",
                "SM clock per GPU, each GPU model's maximum (dashed) and the median of the job's GPUs: one GPU "
                "held below its peers is slow, not dead, and every rank of a synchronous job waits for it.",
                "hertz",
                (f"{clock} * 1e6", GPU_LEGEND),
                (f"max by (modelName) ({max_clock}) * 1e6", "max {{modelName}}"),
                (f"{median} * 1e6", "job median"),
            )
            .span(8)
            .override_by_query("B", [DASHED])
        )
        .with_panel(
            _graph(
                "SM clock / job median",
                "Each GPU's SM clock over the median of the job's GPUs. GPUClockBelowPeers fires at or under "
                f"{_num(below)} (ratio {_num(_param('GPUClockBelowPeers', 'ratio'))} by default) for a busy "
                "GPU, judged on the busy GPUs' clocks averaged over the rate window, with at least "
                f"{_num(_param('GPUClockBelowPeers', 'min_gpus'))} busy GPUs; a change of the whole job moves "
                "the median with it.",
                "percentunit",
                (f"{clock} / on(namespace, training_job) group_left() {median}", GPU_LEGEND),
            ).span(8)
        )
        .with_panel(
            _graph(
                "Clock throttle reasons held",
                "How many of the job's GPUs hold each NVML clock-throttle reason. GPUClocksThrottled fires on "
                f"{', '.join(SLOWING_THROTTLE_REASONS)} on a busy GPU (hw_slowdown only where NVML names no "
                "cause of it); gpu_idle and the sw_power_cap a heavy load reaches are normal. "
                "dcgm-exporter's bitmask is decoded by bit.",
                "none",
                (held, "{{reason}}"),
            ).span(8)
        )
        .with_panel(
            _graph(
                "Straggler excess per rank",
                "Each rank's time outside collectives per step over its gang's median, minus one "
                f"({OWN_EXCESS}; 0 during pauses: checkpoints, evaluation), and the outlier bound, "
                f"{_num(OUTLIER_Z)} x the gang's robust spread. StragglerRank fires for a rank above both the "
                f"slowdown ({_num(slowdown)} by default) and the bound for held_seconds "
                f"({_num(_param('StragglerRank', 'held_seconds'))} s by default) of the last "
                f"{STRAGGLER_WINDOW}.",
                "percentunit",
                (job(OWN_EXCESS), "{{pod}}"),
                (f"{_num(OUTLIER_Z)} * {job(OWN_SPREAD)}", "outlier bound"),
            )
            .span(24)
            .override_by_query("B", [DASHED])
        )
    )


COST_LABELS = ("team", "model")
"""The spec.costLabels names the Cost dashboard offers to group by (its variable takes others too)."""


def _goodput_by_cause(d: dash.Dashboard) -> dash.Dashboard:
    """The training-job dashboard's goodput panels from the recording rules (render/prometheus.py,
    goodput_rules): what the sidecars see and the records cannot, beside the records' causes."""
    return d.with_panel(
        _stat(
            f"ETTR (last {ETTR_WINDOW}, every cause)",
            "Productive over wall time over the last hour, from every cause: the sidecars' (stall, "
            "checkpoint_stall, slow_rank) and the operator's records' (restart, maintenance, redone_work), "
            "the larger where both count the same instant (trainguard:job_ettr:ratio).",
            "percentunit",
            f"max({job(ETTR)})",
        ).span(6)
    ).with_panel(
        _graph(
            "Goodput by cause",
            "Share of wall time lost now, by cause: stall (no step far beyond the typical step time, before "
            "or without any alert), checkpoint_stall (the trainer blocked writing checkpoints) and slow_rank "
            "(the gang held to a straggler's pace: x / (1 + x) for a rank x slower), from the sidecars; "
            "records, from the operator's remediation records; all, the larger of the two sums at each "
            "instant (read a minute back, as the records are counted). docs/diagnosis.md, Goodput.",
            "percentunit",
            (f"max by (cause) ({job(LOST)})", "{{cause}}"),
            (
                f"clamp_max(sum(rate({job('trainguard_job_lost_seconds_total')}[5m])), 1)",
                "records",
            ),
            (f"max({job(LOST_ALL)})", "all"),
        ).span(18)
    )


def cost() -> dash.Dashboard:
    """Charge-back: GPU-hours per namespace, job and cost label over the dashboard's time range, and
    each job's peak GPU memory, from the long-term cost records (so it works on the long-term store)."""
    hours = f"sum_over_time({series(GPU_HOURS)}[$__range])"
    peak = f"max_over_time({series(PEAK_MEMORY.record)}[$__range])"
    held = f"{series(GPU_HOURS)} * 3600 / {int(duration_seconds(WINDOW))}"
    sums = (
        f"Sums {GPU_HOURS} (the GPU-hours of each 5-minute window, from the GPUs the job's pods held) "
        "over the dashboard's time range"
    )
    d = (
        _base(
            "trainguard / Cost",
            "trainguard-cost",
            "GPU-hours and peak GPU memory per namespace, per job and per cost label (the monitors' "
            "spec.costLabels), for charge-back. Generated by `trainguard dashboards`; do not edit by hand.",
        )
        .time("now-30d", "now")
        .refresh("5m")
        .with_variable(
            dash.CustomVariable("cost_label")
            .label("group by")
            .description("A spec.costLabels name to sum GPU-hours by; type another to use it.")
            .values(",".join(COST_LABELS))
            .current(model.VariableOption(selected=True, text=COST_LABELS[0], value=COST_LABELS[0]))
        )
    )
    return (
        d.with_row(dash.Row("GPU-hours"))
        .with_panel(
            _stat(
                "GPU-hours (all jobs)",
                f"{sums}, for every monitored job.",
                "none",
                f"sum({hours})",
            ).span(6)
        )
        .with_panel(
            _graph(
                "GPUs held by namespace",
                "GPUs the monitored jobs held, per namespace (GPU-hours per window over the window's length).",
                "none",
                (f"sum by (namespace) ({held})", "{{namespace}}"),
            ).span(18)
        )
        .with_panel(
            _table(
                "GPU-hours by namespace",
                f"{sums}, per namespace.",
                f"sort_desc(sum by (namespace) ({hours}))",
                span=8,
            )
        )
        .with_panel(
            _table(
                "GPU-hours by $cost_label",
                f"{sums}, per value of the cost label chosen above; jobs whose monitor sets none sum "
                "under the empty value.",
                f"sort_desc(sum by ($cost_label) ({hours}))",
                span=8,
            )
        )
        .with_panel(
            _table(
                "GPU-hours by job",
                f"{sums}, per training job.",
                f"sort_desc(sum by (namespace, training_job) ({hours}))",
                span=8,
            )
        )
        .with_row(dash.Row("GPU memory"))
        .with_panel(
            _table(
                "Peak GPU memory by job",
                f"The most framebuffer memory any one GPU of the job used in the time range ({PEAK_MEMORY.record}).",
                f"sort_desc(max by (namespace, training_job) ({peak}))",
                unit="decmbytes",
            )
        )
    )


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


DASHBOARDS = {"cluster-health.json": cluster_health, "training-job.json": training_job, "cost.json": cost}
"""File name under charts/trainguard/dashboards -> the dashboard's builder."""


def dashboard_json(build: dash.Dashboard) -> str:
    """The dashboard as Grafana JSON: sorted keys, two-space indent, a final newline."""
    plain = json.loads(json.dumps(build.build(), cls=JSONEncoder))
    # Grafana keys panel state by id: number them in order, the same on every run
    for number, panel in enumerate(plain.get("panels", []), start=1):
        panel["id"] = number
    return json.dumps(plain, indent=2, sort_keys=True) + "\n"


def render_dashboards() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {name: dashboard_json(builder()) for name, builder in sorted(DASHBOARDS.items())}


def panel_queries(board: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel, rows' panels included."""
    for panel in board.get("panels", []):
        yield from panel_queries(panel)
        for target in panel.get("targets", []) or []:
            if target.get("expr"):
                yield panel.get("title", ""), target["expr"]


def variable_queries(board: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(variable name, query) of every query variable."""
    for var in board.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var["query"]
            yield var["name"], query if isinstance(query, str) else query.get("query", "")
