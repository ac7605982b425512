"""Prometheus rules for one monitor: baseline recording rules and the catalogue's alerting rules.

Everything is scoped by `namespace` and `training_job`, so the rules of many jobs share one Prometheus.
Recording rules come first in the group: Prometheus evaluates a group in order, so the alerts read the
values recorded in the same evaluation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainguard.api.common import duration_seconds, format_duration
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog import FATAL_XIDS, METRICS, Scope
from trainguard.render.policy import EffectiveAlert, EffectivePolicy

JOB = "namespace, training_job"
Rule = dict[str, Any]


@dataclass(frozen=True)
class Context:
    """What an alert expression needs to know about its monitor."""

    monitor: TrainingJobMonitor

    @property
    def sel(self) -> str:
        return f'namespace="{self.monitor.namespace}",training_job="{self.monitor.name}"'

    def m(self, metric: str, extra: str = "") -> str:
        """A selector for one of the job's own series."""
        return f"{metric}{{{self.sel}{',' + extra if extra else ''}}}"

    def gpu(self, metric: str) -> str:
        """A DCGM metric of the job's GPUs: the sidecar's own, or dcgm-exporter's joined to the job's pods."""
        if self.monitor.spec.exporter.gpu_backend == "dcgm":
            return self.m(f"trainguard_dcgm:{metric}")
        return self.m(metric)

    @property
    def rate_window(self) -> str:
        """Long enough for four scrapes, never under a minute."""
        return format_duration(max(60.0, 4 * duration_seconds(self.monitor.spec.exporter.scrape_interval)))

    @property
    def warmed_up(self) -> str:
        return f"on({JOB}) {self.m('trainguard:train_step:max')} > {self.monitor.spec.warmup_steps()}"

    @property
    def sigma(self) -> float:
        return self.monitor.spec.baseline.sigma


def _num(value: float) -> str:
    """Numbers as PromQL literals: integers without a trailing .0, others in their shortest form."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


# ---- recording rules ----------------------------------------------------------------------------


def recording_rules(ctx: Context) -> list[Rule]:
    b = ctx.monitor.spec.baseline
    win, off, floor = b.window, b.offset, _num(b.min_stddev_ratio)
    rules: list[Rule] = []
    if ctx.monitor.spec.exporter.gpu_backend == "dcgm":
        rules += _dcgm_join_rules(ctx)

    def rec(name: str, expr: str) -> None:
        rules.append({"record": name, "expr": expr})

    used, free = ctx.gpu("DCGM_FI_DEV_FB_USED"), ctx.gpu("DCGM_FI_DEV_FB_FREE")
    rec("trainguard:gpu_memory_used:ratio", f"{used} / ({used} + {free})")
    rec("trainguard:train_step:max", f"max by ({JOB}) ({ctx.m('trainguard_train_step')})")
    rec(
        "trainguard:train_step:rate",
        f"max by ({JOB}) (deriv({ctx.m('trainguard:train_step:max')}[10m]))",
    )
    for metric, agg in (
        ("trainguard_train_tokens_per_second_per_gpu", "avg"),
        ("trainguard_train_grad_norm", "max"),
        ("trainguard_train_loss", "avg"),
    ):
        short = metric.removeprefix("trainguard_")
        job_series = f"trainguard:{short}:{agg}"
        rec(job_series, f"{agg} by ({JOB}) ({ctx.m(metric)})")
        rec(f"{job_series}:baseline_mean", f"avg_over_time({ctx.m(job_series)}[{win}] offset {off})")
        rec(f"{job_series}:baseline_stddev", f"stddev_over_time({ctx.m(job_series)}[{win}] offset {off})")
        rec(
            f"{job_series}:baseline_stddev_floored",
            _floored(ctx, f"{job_series}:baseline_stddev", f"{job_series}:baseline_mean", floor),
        )
    # loss volatility and its own baseline
    rec("trainguard:train_loss:stddev_5m", f"stddev_over_time({ctx.m('trainguard:train_loss:avg')}[5m])")
    rec(
        "trainguard:train_loss:stddev_5m:baseline_mean",
        f"avg_over_time({ctx.m('trainguard:train_loss:stddev_5m')}[{win}] offset {off})",
    )
    rec(
        "trainguard:train_loss:stddev_5m:baseline_floored",
        _floored(
            ctx,
            "trainguard:train_loss:stddev_5m:baseline_mean",
            "trainguard:train_loss:avg:baseline_mean",
            floor,
        ),
    )
    rec(
        "trainguard:train_grad_norm:max:upper_bound",
        f"{ctx.m('trainguard:train_grad_norm:max:baseline_mean')} + {_num(ctx.sigma)} * "
        f"{ctx.m('trainguard:train_grad_norm:max:baseline_stddev_floored')}",
    )
    return rules


def _floored(ctx: Context, stddev: str, mean: str, ratio: str) -> str:
    """max(stddev, ratio x |mean|): a flat signal gets a deviation floor instead of zero."""
    floor = f"({ratio} * abs({ctx.m(mean)}))"
    return f"({ctx.m(stddev)} > on({JOB}) {floor}) or on({JOB}) {floor}"


DCGM_METRICS: tuple[str, ...] = tuple(m.name for m in METRICS if m.name.startswith("DCGM_FI_"))
"""Every dcgm-exporter metric of the contract, so a rule on any of them reads the joined series."""


def _dcgm_join_rules(ctx: Context) -> list[Rule]:
    """dcgm-exporter's series carry the workload's namespace and pod but no training_job: join them
    to the pods whose sidecar reports this job (trainguard_exporter_info), adding training_job and node."""
    exp = ctx.monitor.spec.exporter
    source = f'namespace="{ctx.monitor.namespace}"' + (
        f',job="{exp.dcgm_job_label}"' if exp.dcgm_job_label else ""
    )
    pods = f"group by (namespace, pod, training_job, node) ({ctx.m('trainguard_exporter_info')})"
    return [
        {
            "record": f"trainguard_dcgm:{metric}",
            "expr": f"{metric}{{{source}}} * on(namespace, pod) group_left(training_job, node) {pods}",
        }
        for metric in DCGM_METRICS
    ]


# ---- alert expressions --------------------------------------------------------------------------


_FULL = 'kind="full"'


def _mem(ctx: Context) -> str:
    return ctx.m("trainguard:gpu_memory_used:ratio")


def _since_start(ctx: Context, last: str) -> str:
    """The job's latest `last` timestamp, or its start when there is none yet: a job that hangs before
    its first step, or never checkpoints, is judged from the moment it started."""
    start = ctx.m("trainguard_train_start_timestamp_seconds")
    return f"(max by ({JOB}) ({last}) or max by ({JOB}) ({start}))"


def _stall_seconds(ctx: Context, a: EffectiveAlert) -> float:
    # a checkpoint pauses steps, so a stall is only judged past the longest a checkpoint may take
    return max(a.p("seconds"), duration_seconds(ctx.monitor.spec.checkpoint.timeout))


EXPRESSIONS: dict[str, Callable[[Context, EffectiveAlert], str]] = {
    "TrainingLossNonFinite": lambda c, a: (
        f"increase({c.m('trainguard_train_nonfinite_loss_total')}[{c.rate_window}]) > 0"
    ),
    "GPUOutOfMemory": lambda c, a: f"increase({c.m('trainguard_train_oom_total')}[{c.rate_window}]) > 0",
    "TrainingJobStalled": lambda c, a: (
        f"time() - {_since_start(c, c.m('trainguard_train_last_step_timestamp_seconds'))} "
        f"> {_num(_stall_seconds(c, a))}"
    ),
    # node state only: an unreachable sidecar is TrainguardExporterDown, and the operator acts on this
    "GPUNodeDown": lambda c, a: (
        f"max by ({JOB}, node) (group by ({JOB}, node, pod) ({c.m('up')}) and on(node) "
        f'(kube_node_status_condition{{condition="Ready",status="true"}} == 0))'
    ),
    "TrainguardExporterDown": lambda c, a: f"{c.m('up')} == 0",
    "GPUDoubleBitECCError": lambda c, a: (
        f"increase({c.gpu('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL')}[{c.rate_window}]) > 0"
    ),
    "GPULost": lambda c, a: f"{c.m('trainguard_gpu_lost')} == 1",
    "GPUCriticalXid": lambda c, a: " or ".join(
        f"{c.gpu('DCGM_FI_DEV_XID_ERRORS')} == {code}" for code in a.alert.extra.get("codes", FATAL_XIDS)
    ),
    "TrainingThroughputDrop": lambda c, a: (
        f"{c.m('trainguard:train_tokens_per_second_per_gpu:avg')} < on({JOB}) "
        f"{_num(1 - a.p('ratio'))} * {c.m('trainguard:train_tokens_per_second_per_gpu:avg:baseline_mean')} "
        f"and {c.warmed_up}"
    ),
    "GPUMemoryCritical": lambda c, a: f"{_mem(c)} >= {_num(a.p('ratio'))}",
    "GPUMemoryHang": lambda c, a: (
        f"{_mem(c)} > {_num(a.p('ratio'))} and on({JOB}, pod, gpu) "
        f"{c.gpu('DCGM_FI_DEV_GPU_UTIL')} < {_num(a.p('utilization'))}"
    ),
    "GPUThermalThrottling": lambda c, a: f"{c.gpu('DCGM_FI_DEV_GPU_TEMP')} > {_num(a.p('celsius'))}",
    "NetworkPacketLossHigh": lambda c, a: (
        f"{c.m('trainguard_network_packet_loss_ratio')} > {_num(a.p('ratio'))}"
    ),
    "GradientExplosion": lambda c, a: (
        f"{c.m('trainguard:train_grad_norm:max')} > on({JOB}) "
        f"{c.m('trainguard:train_grad_norm:max:upper_bound')} and {c.warmed_up}"
    ),
    "CheckpointStale": lambda c, a: (
        f"time() - {_since_start(c, c.m('trainguard_checkpoint_last_success_timestamp_seconds', _FULL))} "
        f"> on({JOB}) {_num(a.p('factor') * c.monitor.spec.checkpoint.full_every_steps)} / "
        f"({c.m('trainguard:train_step:rate')} > 0)"
    ),
    "InferenceLatencyHigh": lambda c, a: (
        f"{c.m('trainguard_inference_latency_seconds')} > {_num(a.p('seconds'))} and on({JOB}, pod) "
        f"max by ({JOB}, pod) ({_mem(c)}) > {_num(a.p('memory_ratio'))}"
    ),
    "GPUMemoryPressure": lambda c, a: f"{_mem(c)} >= {_num(a.p('ratio'))}",
    "GPUMemoryFragmentationHigh": lambda c, a: (
        f"{c.m('trainguard_gpu_memory_fragmentation_ratio')} > {_num(a.p('ratio'))}"
    ),
    "TrainingThroughputDeviation": lambda c, a: (
        f"abs({c.m('trainguard:train_tokens_per_second_per_gpu:avg')} - on({JOB}) "
        f"{c.m('trainguard:train_tokens_per_second_per_gpu:avg:baseline_mean')}) > on({JOB}) "
        f"{_num(a.p('ratio'))} * {c.m('trainguard:train_tokens_per_second_per_gpu:avg:baseline_mean')} "
        f"and {c.warmed_up}"
    ),
    "TrainingLossOscillation": lambda c, a: (
        f"{c.m('trainguard:train_loss:stddev_5m')} > on({JOB}) "
        f"{_num(c.sigma)} * {c.m('trainguard:train_loss:stddev_5m:baseline_floored')} and {c.warmed_up}"
    ),
    "GradientVanishing": lambda c, a: (
        f"{c.m('trainguard:train_grad_norm:max')} < {_num(a.p('floor'))} and {c.warmed_up}"
    ),
    "LossScaleUnstable": lambda c, a: (
        f"max by ({JOB}) (increase({c.m('trainguard_train_loss_scale_updates_total')}[10m])) "
        f"> {_num(a.p('changes'))}"
    ),
    "AllReduceTimeRatioHigh": lambda c, a: (
        f"{c.m('trainguard_train_allreduce_time_ratio')} > {_num(a.p('ratio'))}"
    ),
    "DataLoaderSlow": lambda c, a: f"{c.m('trainguard_train_dataloader_wait_ratio')} > {_num(a.p('ratio'))}",
    "HostSwapPressure": lambda c, a: (
        f"{c.m('trainguard_host_kswapd_cpu_ratio')} > {_num(a.p('kswapd_ratio'))} and on({JOB}, pod) "
        f"{c.m('trainguard_host_memory_used_ratio')} > {_num(a.p('memory_ratio'))}"
    ),
    "DiskWriteLatencyHigh": lambda c, a: (
        f"{c.m('trainguard_host_disk_write_latency_seconds')} > {_num(a.p('seconds'))}"
    ),
    "NetworkPacketLoss": lambda c, a: f"{c.m('trainguard_network_packet_loss_ratio')} > {_num(a.p('ratio'))}",
    "NetworkBandwidthSaturation": lambda c, a: (
        f"{c.m('trainguard_network_bandwidth_utilization_ratio')} > {_num(a.p('ratio'))}"
    ),
    "GPUSingleBitECCErrorsHigh": lambda c, a: (
        f"increase({c.gpu('DCGM_FI_DEV_ECC_SBE_VOL_TOTAL')}[1d]) > {_num(a.p('errors'))}"
    ),
    "GPUMemoryHigh": lambda c, a: f"{_mem(c)} >= {_num(a.p('ratio'))}",
}


_WHERE: dict[Scope, str] = {
    Scope.JOB: "",
    Scope.POD: " (pod {{ $labels.pod }} on {{ $labels.node }})",
    Scope.GPU: " (GPU {{ $labels.gpu }} of pod {{ $labels.pod }} on {{ $labels.node }})",
    Scope.NODE: " (node {{ $labels.node }})",
    Scope.INTERFACE: " (interface {{ $labels.interface }} on {{ $labels.node }})",
    Scope.DEVICE: " (disk {{ $labels.device }} on {{ $labels.node }})",
}


def _anchor(name: str) -> str:
    return name.lower()


def _alert_rule(ctx: Context, a: EffectiveAlert, policy: EffectivePolicy) -> Rule:
    params = ", ".join(f"{k}={_num(v)}" for k, v in a.params.items())
    description = (
        f"{{{{ $labels.namespace }}}}/{{{{ $labels.training_job }}}}{_WHERE[a.alert.scope]}: "
        f"{a.alert.condition}{f' ({params})' if params else ''}. Value: {{{{ $value | humanize }}}}."
    )
    return {
        "alert": a.name,
        "expr": EXPRESSIONS[a.name](ctx, a),
        "for": a.for_,
        "labels": {"severity": a.severity},
        "annotations": {
            "summary": f"{a.alert.summary}: {{{{ $labels.namespace }}}}/{{{{ $labels.training_job }}}}",
            "description": description,
            "probable_cause": a.alert.probable_cause,
            "runbook_url": f"{policy.runbook_base_url}#{_anchor(a.name)}",
        },
    }


SIDECAR_NVML_ONLY: dict[str, str] = {
    "GPULost": "trainguard_gpu_lost comes from the sidecar's NVML backend; with dcgm-exporter a GPU that "
    "fell off the bus shows as XID 79, which GPUCriticalXid matches",
}
"""Alerts whose input only the sidecar's own GPU collector exports: left out with gpuBackend dcgm."""


def alerting_rules(ctx: Context, policy: EffectivePolicy) -> list[Rule]:
    rules: list[Rule] = []
    dcgm = ctx.monitor.spec.exporter.gpu_backend == "dcgm"
    for a in policy.enabled_alerts():
        if dcgm and a.name in SIDECAR_NVML_ONLY:
            continue
        # no escalation copies: the operator escalates a P1 only while Alertmanager shows it neither
        # silenced (acknowledged) nor inhibited (remediation/escalation.py); a copied rule could not tell
        rules.append(_alert_rule(ctx, a, policy))
    for custom in policy.custom_rules:
        rules.append(
            {
                "alert": custom.name,
                "expr": custom.expr.replace("$selector", ctx.sel),
                "for": custom.for_,
                "labels": dict(sorted(custom.labels.items()))
                | {
                    "severity": custom.severity,
                    "namespace": ctx.monitor.namespace,
                    "training_job": ctx.monitor.name,
                },
                "annotations": {
                    "summary": custom.summary or custom.name,
                    "description": custom.description or custom.summary or custom.name,
                },
            }
        )
    return rules


def rule_group(monitor: TrainingJobMonitor, policy: EffectivePolicy) -> dict[str, Any]:
    """One group per monitor, named after it, evaluated at the scrape interval."""
    ctx = Context(monitor)
    return {
        "name": f"trainguard.{monitor.namespace}.{monitor.name}",
        "interval": monitor.spec.exporter.scrape_interval,
        "rules": recording_rules(ctx) + alerting_rules(ctx, policy),
    }
