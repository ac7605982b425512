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
from trainguard.catalog import ALERTS_BY_NAME, FATAL_XIDS, METRICS, Scope
from trainguard.catalog.metrics import SLOWING_THROTTLE_REASONS, THROTTLE_REASONS
from trainguard.catalog.severity import GRADE, grade_labels
from trainguard.render.policy import EffectiveAlert, EffectivePolicy

JOB = "namespace, training_job"
Rule = dict[str, Any]
Operand = float | str
"""A number a rule compares with or scales by: a literal in a monitor's own group, a per-job vector joined
on (namespace, training_job) in the shared form (render/shared.py)."""


def monitor_settings(monitor: TrainingJobMonitor) -> dict[str, float]:
    """The monitor's numbers its rules use beyond the alerts' params (the shared form reads them as series)."""
    spec = monitor.spec
    return {
        "sigma": spec.baseline.sigma,
        "min_stddev_ratio": spec.baseline.min_stddev_ratio,
        "warmup_steps": float(spec.warmup_steps()),
        "checkpoint_timeout_seconds": duration_seconds(spec.checkpoint.timeout),
        "checkpoint_full_every_steps": float(spec.checkpoint.full_every_steps),
        "inference": 1.0 if spec.mode == "inference" else 0.0,
    }


@dataclass(frozen=True)
class Context:
    """What an alert expression needs to know about its monitor, and the platform's severity style
    (catalog/severity.py) its alerts' labels are written in."""

    monitor: TrainingJobMonitor
    severity_style: str = GRADE
    lookups: bool = True
    """Whether the correlation annotations look up the trace id, the activation time and the job's pods
    and nodes: queries that Prometheus runs for every active alert at every evaluation (_correlation)."""

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
        return (
            f"on({JOB}) {self.m('trainguard:train_step:max')} {self.cmp('>', self.setting('warmup_steps'))}"
        )

    @property
    def sigma(self) -> Operand:
        return self.setting("sigma")

    @property
    def namespace_matcher(self) -> str:
        """The monitor's namespace as a matcher for series that carry no training_job (kube-state-metrics)."""
        return f'namespace="{self.monitor.namespace}",'

    @property
    def pod_selector(self) -> str:
        """The job's pods as a kubectl label selector ("" when the pods are named one by one instead)."""
        return ",".join(f"{k}={v}" for k, v in sorted(self.monitor.spec.selector.match_labels.items()))

    def trainer(self) -> str:
        """The series a pod's trainer reports through the SDK: steps, or latency in inference mode."""
        inference = self.monitor.spec.mode == "inference"
        return self.m("trainguard_inference_latency_seconds" if inference else "trainguard_train_step")

    def describe(self, a: EffectiveAlert) -> str:
        """The alert's numbers for its description."""
        params = ", ".join(f"{k}={_num(v)}" for k, v in a.params.items())
        return f" ({params})" if params else ""

    # numbers: literals here; SharedContext (render/shared.py) reads them as per-job series instead

    def p(self, a: EffectiveAlert, name: str) -> Operand:
        return a.p(name)

    def setting(self, name: str) -> Operand:
        return monitor_settings(self.monitor)[name]

    def cmp(self, op: str, x: Operand) -> str:
        """`<op> x`, to follow a vector."""
        return f"{op} {_num(x)}" if isinstance(x, float | int) else f"{op} on({JOB}) group_left() {x}"

    def scale(self, x: Operand, vector: str) -> str:
        """x * vector, labelled as vector."""
        return f"{_num(x)} * {vector}" if isinstance(x, float | int) else f"{x} * on({JOB}) {vector}"

    def per(self, x: Operand, vector: str) -> str:
        """x / vector, labelled as vector."""
        return f"{_num(x)} / {vector}" if isinstance(x, float | int) else f"{x} / on({JOB}) {vector}"

    @staticmethod
    def product(x: Operand, y: Operand) -> Operand:
        if isinstance(x, float | int) and isinstance(y, float | int):
            return x * y
        return f"({_operand(x)} * on({JOB}) {_operand(y)})"

    @staticmethod
    def larger(x: Operand, y: Operand) -> Operand:
        if isinstance(x, float | int) and isinstance(y, float | int):
            return max(x, y)
        return f"({_operand(x)} > on({JOB}) {_operand(y)} or on({JOB}) {_operand(y)})"

    @staticmethod
    def plus(n: float, x: Operand) -> Operand:
        return n + x if isinstance(x, float | int) else f"({_num(n)} + {x})"


def _num(value: float) -> str:
    """Numbers as PromQL literals: integers without a trailing .0, others in their shortest form."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _operand(x: Operand) -> str:
    return _num(x) if isinstance(x, float | int) else x


# ---- recording rules ----------------------------------------------------------------------------


def recording_rules(ctx: Context) -> list[Rule]:
    b = ctx.monitor.spec.baseline
    win, off, floor = b.window, b.offset, ctx.setting("min_stddev_ratio")
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
    # collective latency: the job's p99 from the SDK's histogram, and its own baseline
    p99 = "trainguard:train_collective_seconds:p99"
    rec(
        p99,
        f"histogram_quantile(0.99, sum by ({JOB}, le) "
        f"(rate({ctx.m('trainguard_train_collective_seconds_bucket')}[{ctx.rate_window}])))",
    )
    rec(f"{p99}:baseline_mean", f"avg_over_time({ctx.m(p99)}[{win}] offset {off})")
    rec(f"{p99}:baseline_stddev", f"stddev_over_time({ctx.m(p99)}[{win}] offset {off})")
    rec(
        f"{p99}:upper_bound",
        f"{ctx.m(f'{p99}:baseline_mean')} + "
        + ctx.scale(ctx.sigma, f"({_floored(ctx, f'{p99}:baseline_stddev', f'{p99}:baseline_mean', floor)})"),
    )
    rules += straggler_rules(ctx)
    rules += goodput_rules(ctx)
    # the checkpoint filesystem as the fullest of the pods' views (they share it, or each has its own)
    rec(
        "trainguard:checkpoint_filesystem_avail_bytes:min",
        f"min by ({JOB}) ({ctx.m('trainguard_checkpoint_filesystem_avail_bytes')})",
    )
    rec(
        "trainguard:train_grad_norm:max:upper_bound",
        f"{ctx.m('trainguard:train_grad_norm:max:baseline_mean')} + "
        + ctx.scale(ctx.sigma, ctx.m("trainguard:train_grad_norm:max:baseline_stddev_floored")),
    )
    rec(UP_LAST_SEEN, _up_last_seen(ctx))
    return rules


UP_LAST_SEEN = "trainguard:up:last_seen_timestamp"
UP_SEEN_FOR_S = 3600
"""How long a pod's vanished target is remembered: a pod that stopped being scraped within the hour
and still runs is a job gone dark; one older than that was judged already."""


def _up_last_seen(ctx: Context) -> str:
    """When each pod's target was last scraped, latched: this rule's own last value outlives the target
    for an hour. present_over_time(up[1h]) said the same by reading 240 samples of every target's `up`
    at every evaluation (half the shared group's time at 100 jobs); this reads one sample per pod. What
    it cannot know: targets that vanished while Prometheus was down for longer than its 5 m lookback."""
    pod = f"{JOB}, pod, node"
    return f"max by ({pod}) (timestamp({ctx.m('up')})) or ({ctx.m(UP_LAST_SEEN)} > time() - {UP_SEEN_FOR_S})"


RANK = f"{JOB}, pod, node"
STEP_MEAN = "trainguard:train_step_seconds:window_mean"
OWN_RATIO = "trainguard:train_rank_own_time:ratio"
OWN_EXCESS = "trainguard:train_rank_own_time:excess"
OWN_SPREAD = "trainguard:train_rank_own_time:spread"
OUTLIER_Z = 3.5
"""A slow rank must also stand out of its gang's own spread: its excess above OUTLIER_Z robust standard
deviations (MAD x 1.4826) of the gang's, as diagnosis/straggler.py's Z_LIMIT; ranks that all differ a little
(uneven hardware, no single outlier) name no straggler. Gangs under SPREAD_MIN_RANKS have no spread worth
the name (a median of two or three is one of them) and are judged by the threshold alone."""
SPREAD_MIN_RANKS = 4
MAD_TO_SIGMA = 1.4826
STEADY_FACTOR = 1.5
STEADY_WINDOW = "10m"
"""A rate window whose mean step took more than STEADY_FACTOR times its median over STEADY_WINDOW held a
pause: a checkpoint, an evaluation pass, a rank stuck on its data. The pause lands in one long step that
every rank counts, busy or waiting, and would dilute (or, for the rank that was busy, inflate) the share
of its own time: such a window says nothing about a rank's pace. A slowdown of the whole gang, or a
straggler of up to that factor, stays steady; a worse one is judged once the median has caught up."""
STRAGGLER_WINDOW = "10m"
"""StragglerRank counts, over this window, the time a rank was slower than its peers by the threshold; it
fires once that time reaches `held_seconds`. A one-off slowdown of one rank (a throttled minute, garbage
collection, a checkpoint it writes alone) stays under it; pauses count as no evidence (docs/diagnosis.md)."""


def straggler_rules(ctx: Context) -> list[Rule]:
    """Each rank's own pace and how far it is from its peers' (StragglerRank, docs/diagnosis.md).

    In synchronous training every rank's step takes as long as the slowest one's, so step time names no
    rank; but the others wait for the straggler inside the collective, so the share of a rank's step time
    spent outside collectives is its own pace. Its ratio to the gang's median (the lower of two for a gang
    of two, whose median would sit half-way to the straggler) is the rank's slowdown: a checkpoint, an
    evaluation or a slowdown of the whole gang changes every rank alike and leaves it at zero. Collective
    time is log_step's allreduce_s, or where a trainer reports none, the SDK's collective histogram."""
    rw = ctx.rate_window
    steps = f"sum by ({RANK}) (rate({ctx.m('trainguard_train_step_seconds_total')}[{rw}]))"
    reported = f"sum by ({RANK}) (rate({ctx.m('trainguard_train_step_collective_seconds_total')}[{rw}]))"
    timed = f"sum by ({RANK}) (rate({ctx.m('trainguard_train_collective_seconds_sum')}[{rw}]))"
    own = ctx.m(OWN_RATIO)
    gang = f"count by ({JOB}) ({own})"
    mean = ctx.m(STEP_MEAN)
    steady = f"{mean} <= on({JOB}) {_num(STEADY_FACTOR)} * quantile_over_time(0.5, {mean}[{STEADY_WINDOW}])"
    # per pod, the step seconds of its trainer processes over the gang's steps: as many step times as the
    # pod has processes, compared only with its own past
    pod_seconds = f"sum by ({JOB}, pod) (increase({ctx.m('trainguard_train_step_seconds_total')}[{rw}]))"
    gang_steps = f"(delta({ctx.m('trainguard:train_step:max')}[{rw}]) > 0)"
    reference = (
        f"(quantile by ({JOB}) (0.5, {own}) unless on({JOB}) {gang} == 2) or on({JOB}) min by ({JOB}) ({own})"
    )
    # a window with a pause, or with no step at all, is no evidence: an excess of zero. Left out, it would
    # shorten the median's window, and a one-off slowdown beside a pause would make a majority of it
    raw = f"{own} / on({JOB}) group_left() (({reference}) > 0) - 1"
    mad = f"quantile by ({JOB}) (0.5, abs({raw}))"
    spread = f"{_num(MAD_TO_SIGMA)} * {mad} and on({JOB}) {gang} >= {SPREAD_MIN_RANKS} or 0 * {gang}"
    return [
        {"record": STEP_MEAN, "expr": f"max by ({JOB}) ({pod_seconds}) / {gang_steps}"},
        {"record": OWN_RATIO, "expr": f"clamp_min(1 - ({reported} > 0 or {timed}) / ({steps} > 0), 0)"},
        {"record": OWN_EXCESS, "expr": f"{raw} and on({JOB}) ({steady}) or 0 * {steps}"},
        {"record": OWN_SPREAD, "expr": spread},
    ]


LOST = "trainguard:job_lost:ratio"
LOST_ALL = "trainguard:job_lost_all:ratio"
ETTR = "trainguard:job_ettr:ratio"
ETTR_WINDOW = "1h"
"""The window of ETTR: an hour of evaluations (240 at 15 s) per job. The operator's own
trainguard_job_ettr_ratio spans a day, from its records alone; a dashboard averages LOST_ALL over its range."""
RECORDS_LAG = "1m"
"""The operator counts its records' causes this far behind now (remediation/goodput.py, LAG_S): the
sidecars' causes are read this far back, so an instant lost to both is compared with itself."""
RECORD_COUNTER = "trainguard_job_lost_seconds_total"
"""The operator's counter of the causes its records tell (catalog/metrics.py, GOODPUT_METRICS)."""
SLOW_RANK_MIN_EXCESS = next(p.default for p in ALERTS_BY_NAME["StragglerRank"].params if p.name == "slowdown")
"""A rank counts as holding the gang back from this excess (StragglerRank's default slowdown) and when
it stands out of the gang's spread as StragglerRank's outliers do: an even gang's noise is no loss."""


def goodput_rules(ctx: Context) -> list[Rule]:
    """The share of each job's wall time lost now, by the causes the sidecars see and the operator's
    records cannot (docs/diagnosis.md, "Goodput"), and an ETTR over ETTR_WINDOW with every cause.

    stall and checkpoint_stall: the largest rate, over the job's pods, of the sidecars' stall and
    checkpoint-save counters (seconds per second: the share of the time; the gang waits for its slowest
    pod, so the largest, not the sum). slow_rank: in synchronous training the gang steps at its slowest
    rank's pace, so a rank x slower than its peers (OWN_EXCESS) costs the gang x / (1 + x) of its time.
    The three are disjoint: a write the SDK reported is no stall (exporter/stalls.py), and a window
    without steps has no excess. LOST_ALL, per instant, is the larger of their sum and the records'
    share (restart, maintenance, redone_work), read RECORDS_LAG apart: a stall that became a restart,
    or redone work during which checkpoints are written, is counted once, as the larger."""
    rw = ctx.rate_window
    excess, spread = ctx.m(OWN_EXCESS), ctx.m(OWN_SPREAD)
    outlier = f"{excess} > {_num(SLOW_RANK_MIN_EXCESS)} and {excess} > on({JOB}) group_left() {_num(OUTLIER_Z)} * {spread}"
    slowest = f"max by ({JOB}) ({outlier})"
    signals = f"sum by ({JOB}) ({ctx.m(LOST)} offset {RECORDS_LAG})"
    records = f"clamp_max(sum by ({JOB}) (rate({ctx.m(RECORD_COUNTER)}[{rw}])), 1)"

    def pods(counter: str) -> str:
        return f"clamp_max(max by ({JOB}) (rate({ctx.m(counter)}[{rw}])), 1)"

    return [
        {"record": LOST, "expr": pods("trainguard_train_stall_seconds_total"), "labels": {"cause": "stall"}},
        {
            "record": LOST,
            "expr": pods("trainguard_checkpoint_save_seconds_total"),
            "labels": {"cause": "checkpoint_stall"},
        },
        {
            "record": LOST,
            "expr": f"{slowest} / (1 + {slowest}) or 0 * max by ({JOB}) ({excess})",
            "labels": {"cause": "slow_rank"},
        },
        {
            "record": LOST_ALL,
            "expr": f"clamp_max({signals}, 1) >= on({JOB}) {records} or on({JOB}) {records} "
            f"or on({JOB}) clamp_max({signals}, 1)",
        },
        {"record": ETTR, "expr": f"1 - avg_over_time({ctx.m(LOST_ALL)}[{ETTR_WINDOW}])"},
    ]


def _straggler(ctx: Context, a: EffectiveAlert) -> str:
    """A rank slower than its peers by the threshold for `held_seconds` of the window, warmed up over all
    of it (a warm-up's uneven ranks, one compiling longer or loading more, are not counted); its rank is the
    pod name's last number (as diagnosis/straggler.py's rank_of reads it). A rank alone is its own
    reference (zero). Each evaluation of the recorded excess is one interval of evidence."""
    interval = ctx.monitor.spec.exporter.scrape_interval
    excess = ctx.m(OWN_EXCESS)
    outlier = f"{excess} > on({JOB}) group_left() {_num(OUTLIER_Z)} * {ctx.m(OWN_SPREAD)}"
    slow = f"{excess} {ctx.cmp('>', ctx.p(a, 'slowdown'))} and {outlier}"
    held = f"count_over_time(({slow})[{STRAGGLER_WINDOW}:{interval}]) * {_num(duration_seconds(interval))}"
    step = f"min_over_time({ctx.m('trainguard:train_step:max')}[{STRAGGLER_WINDOW}])"
    warm = f"on({JOB}) {step} {ctx.cmp('>', ctx.setting('warmup_steps'))}"
    judged = f"{held} {ctx.cmp('>=', ctx.p(a, 'held_seconds'))} and {warm}"
    return f'label_replace({judged}, "rank", "$1", "pod", ".*?([0-9]+)")'


def _floored(ctx: Context, stddev: str, mean: str, ratio: Operand) -> str:
    """max(stddev, ratio x |mean|): a flat signal gets a deviation floor instead of zero."""
    floor = f"({ctx.scale(ratio, f'abs({ctx.m(mean)})')})"
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


def _stall_seconds(ctx: Context, a: EffectiveAlert) -> Operand:
    # a checkpoint pauses steps, so a stall is only judged past the longest a checkpoint may take
    return ctx.larger(ctx.p(a, "seconds"), ctx.setting("checkpoint_timeout_seconds"))


def _band(ctx: Context, ratio: Operand) -> str:
    """How far throughput may stray from its baseline mean: sigma x stddev, never less than ratio x mean."""
    mean = ctx.m("trainguard:train_tokens_per_second_per_gpu:avg:baseline_mean")
    stddev = ctx.m("trainguard:train_tokens_per_second_per_gpu:avg:baseline_stddev")
    floor = f"({ctx.scale(ratio, mean)})"
    return f"(({ctx.scale(ctx.sigma, stddev)}) > on({JOB}) {floor} or on({JOB}) {floor})"


def _checkpoint_storage(ctx: Context, a: EffectiveAlert) -> str:
    """Free space at the next full checkpoint, extrapolated with predict_linear (now) plus the slope times
    the seconds until then (fullEverySteps / the step rate), against the size of one full checkpoint."""
    avail = f"{ctx.m('trainguard:checkpoint_filesystem_avail_bytes:min')}[30m]"
    rate = f"({ctx.m('trainguard:train_step:rate')} > 0)"
    interval = f"({ctx.per(ctx.setting('checkpoint_full_every_steps'), rate)})"
    size = f"max by ({JOB}) ({ctx.m('trainguard_checkpoint_last_size_bytes', _FULL)})"
    predicted = f"predict_linear({avail}, 0) + on({JOB}) deriv({avail}) * on({JOB}) {interval}"
    return f"{predicted} < on({JOB}) ({size} or on({JOB}) 0 * {ctx.m('trainguard:checkpoint_filesystem_avail_bytes:min')})"


def _loss_diverging_early(ctx: Context, a: EffectiveAlert) -> str:
    loss = ctx.m("trainguard:train_loss:avg")
    step = ctx.m("trainguard:train_step:max")
    above_min = f"{loss} > on({JOB}) {ctx.scale(ctx.plus(1, ctx.p(a, 'rise')), f'min_over_time({loss}[1h])')}"
    cv = f"stddev_over_time({loss}[5m]) / abs(avg_over_time({loss}[5m])) {ctx.cmp('>', ctx.p(a, 'cv'))}"
    return (
        f"({above_min} or on({JOB}) {cv}) and on({JOB}) {step} {ctx.cmp('>', ctx.p(a, 'min_steps'))} "
        f"unless on({JOB}) {step} {ctx.cmp('>', ctx.setting('warmup_steps'))}"
    )


def _rack_heat(ctx: Context, a: EffectiveAlert) -> str:
    label = ctx.monitor.spec.topology.ksm_label()
    hot = (
        f"label_replace(({ctx.gpu('DCGM_FI_DEV_GPU_TEMP')} {ctx.cmp('>', ctx.p(a, 'celsius'))}) * on(node) "
        f'group_left({label}) kube_node_labels, "rack", "$1", "{label}", "(.+)")'
    )
    by_rack = f"{JOB}, rack"
    return (
        f"count by ({by_rack}) ({hot}) {ctx.cmp('>=', ctx.p(a, 'gpus'))} and on({by_rack}) "
        f"count by ({by_rack}) (count by ({by_rack}, node) ({hot})) >= 2"
    )


def _monitoring_missing(ctx: Context, a: EffectiveAlert) -> str:
    """Three ways a job goes blind: the exporter is scraped but the trainer's series are missing; the pod
    has GPUs but no GPU series; or a pod's target vanished while kube-state-metrics says it still runs."""
    pod = f"{JOB}, pod, node"
    up = ctx.m("up")
    trainer = ctx.trainer()
    parts = [f"group by ({pod}) ({up} == 1) unless on({JOB}, pod) group by ({JOB}, pod) ({trainer})"]
    if ctx.monitor.spec.exporter.gpu_backend == "dcgm":
        if ctx.monitor.spec.gpus_per_pod > 0:
            parts.append(
                f"group by ({pod}) ({ctx.m('trainguard_exporter_info')}) unless on({JOB}, pod) "
                f"group by ({JOB}, pod) ({ctx.gpu('DCGM_FI_DEV_GPU_UTIL')})"
            )
    else:
        parts.append(
            f"group by ({pod}) ({ctx.m('trainguard_exporter_gpus_assigned')} > 0) unless on({JOB}, pod) "
            f"group by ({JOB}, pod) ({ctx.gpu('DCGM_FI_DEV_GPU_UTIL')})"
        )
    running = f'kube_pod_status_phase{{{ctx.namespace_matcher}phase="Running"}} == 1'
    parts.append(
        f"group by ({pod}) ({ctx.m(UP_LAST_SEEN)}) unless on(namespace, pod) {up} "
        f"and on(namespace, pod) ({running})"
    )
    return " or ".join(f"({p})" for p in parts)


def _busy(ctx: Context, a: EffectiveAlert) -> str:
    """The job's GPUs busy over the rate window: a GPU's instant utilization dips between kernels and
    steps, which would restart a held alert's `for`."""
    util = f"avg_over_time({ctx.gpu('DCGM_FI_DEV_GPU_UTIL')}[{ctx.rate_window}])"
    return f"{util} {ctx.cmp('>', ctx.p(a, 'utilization'))}"


_GPU = f"{JOB}, pod, gpu"


def _pcie_link(ctx: Context, a: EffectiveAlert) -> str:
    """Each generation doubles a lane's rate (Gen3 8 GT/s, Gen4 16, Gen5 32), so a link's share of its
    full bandwidth is 2^(gen - max gen) x width / max width; the maximum is the GPU's and its slot's."""
    width = f"{ctx.gpu('DCGM_FI_DEV_PCIE_LINK_WIDTH')} / {ctx.gpu('DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH')}"
    gen = f"{ctx.gpu('DCGM_FI_DEV_PCIE_LINK_GEN')} - {ctx.gpu('DCGM_FI_DEV_PCIE_MAX_LINK_GEN')}"
    share = f"({width}) * 2 ^ ({gen})"
    return f"{share} {ctx.cmp('<', ctx.p(a, 'bandwidth_ratio'))} and on({_GPU}) {_busy(ctx, a)}"


def _throttle_bit(reasons: str, bit: int) -> str:
    """Whether bit `bit` is set in the bitmask: PromQL has no bitwise operators, floor and modulo do it."""
    return f"floor({reasons} / {bit}) % 2 == 1"


def _clocks_throttled(ctx: Context, a: EffectiveAlert) -> str:
    """One series per reason held, labelled `reason` (NVML's bits, catalog/metrics.py): hw_slowdown only
    where NVML names no cause of it (hw_thermal, hw_power_brake are set with it)."""
    reasons = ctx.gpu("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
    assert THROTTLE_REASONS["hw_power_brake"] == 2 * THROTTLE_REASONS["hw_thermal"]  # adjacent bits
    named_cause = f"floor({reasons} / {THROTTLE_REASONS['hw_thermal']}) % 4 > 0"  # either of the two
    held = []
    for reason in SLOWING_THROTTLE_REASONS:
        bit = _throttle_bit(reasons, THROTTLE_REASONS[reason])
        if reason == "hw_slowdown":
            bit = f"({bit} unless {named_cause})"
        held.append(f'label_replace({bit}, "reason", "{reason}", "", "")')
    return f"({' or '.join(held)}) and on({_GPU}) {_busy(ctx, a)}"


def _complement(x: Operand) -> Operand:
    """1 - x."""
    return round(1 - x, 12) if isinstance(x, float | int) else f"(1 - {x})"


def _clock_below_peers(ctx: Context, a: EffectiveAlert) -> str:
    """The busy GPU's clock over the job's busy GPUs' median: the value is that share. Relative to the job,
    so a job-wide change (a power cap every GPU reaches, a data-centre clock limit) moves the median too."""
    clock = f"(avg_over_time({ctx.gpu('DCGM_FI_DEV_SM_CLOCK')}[{ctx.rate_window}]) and on({_GPU}) {_busy(ctx, a)})"
    median = f"quantile by ({JOB}) (0.5, {clock})"
    return (
        f"{clock} / on({JOB}) group_left() {median} {ctx.cmp('<=', _complement(ctx.p(a, 'ratio')))} "
        f"and on({JOB}) count by ({JOB}) ({clock}) {ctx.cmp('>=', ctx.p(a, 'min_gpus'))}"
    )


EXPRESSIONS: dict[str, Callable[[Context, EffectiveAlert], str]] = {
    "TrainingLossNonFinite": lambda c, a: (
        f"increase({c.m('trainguard_train_nonfinite_loss_total')}[{c.rate_window}]) > 0"
    ),
    "GPUOutOfMemory": lambda c, a: f"increase({c.m('trainguard_train_oom_total')}[{c.rate_window}]) > 0",
    "TrainingJobStalled": lambda c, a: (
        f"time() - {_since_start(c, c.m('trainguard_train_last_step_timestamp_seconds'))} "
        f"{c.cmp('>', _stall_seconds(c, a))}"
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
        f"({c.m('trainguard:train_tokens_per_second_per_gpu:avg:baseline_mean')} - on({JOB}) "
        f"{_band(c, c.p(a, 'ratio'))}) and {c.warmed_up}"
    ),
    "GPUMemoryCritical": lambda c, a: f"{_mem(c)} {c.cmp('>=', c.p(a, 'ratio'))}",
    "GPUMemoryHang": lambda c, a: (
        f"{_mem(c)} {c.cmp('>', c.p(a, 'ratio'))} and on({JOB}, pod, gpu) "
        f"{c.gpu('DCGM_FI_DEV_GPU_UTIL')} {c.cmp('<', c.p(a, 'utilization'))}"
    ),
    "GPUThermalThrottling": lambda c, a: f"{c.gpu('DCGM_FI_DEV_GPU_TEMP')} {c.cmp('>', c.p(a, 'celsius'))}",
    "NetworkPacketLossHigh": lambda c, a: (
        f"{c.m('trainguard_network_packet_loss_ratio')} {c.cmp('>', c.p(a, 'ratio'))}"
    ),
    "GradientExplosion": lambda c, a: (
        f"{c.m('trainguard:train_grad_norm:max')} > on({JOB}) "
        f"{c.m('trainguard:train_grad_norm:max:upper_bound')} and {c.warmed_up}"
    ),
    "CheckpointStale": lambda c, a: (
        f"time() - {_since_start(c, c.m('trainguard_checkpoint_last_success_timestamp_seconds', _FULL))} "
        f"> on({JOB}) "
        + c.per(
            c.product(c.p(a, "factor"), c.setting("checkpoint_full_every_steps")),
            f"({c.m('trainguard:train_step:rate')} > 0)",
        )
    ),
    "InferenceLatencyHigh": lambda c, a: (
        f"{c.m('trainguard_inference_latency_seconds')} {c.cmp('>', c.p(a, 'seconds'))} and on({JOB}, pod) "
        f"max by ({JOB}, pod) ({_mem(c)}) {c.cmp('>', c.p(a, 'memory_ratio'))}"
    ),
    "GPUMemoryPressure": lambda c, a: f"{_mem(c)} {c.cmp('>=', c.p(a, 'ratio'))}",
    "GPUMemoryFragmentationHigh": lambda c, a: (
        f"{c.m('trainguard_gpu_memory_fragmentation_ratio')} {c.cmp('>', c.p(a, 'ratio'))}"
    ),
    "TrainingThroughputDeviation": lambda c, a: (
        f"abs({c.m('trainguard:train_tokens_per_second_per_gpu:avg')} - on({JOB}) "
        f"{c.m('trainguard:train_tokens_per_second_per_gpu:avg:baseline_mean')}) > on({JOB}) "
        f"{_band(c, c.p(a, 'ratio'))} and {c.warmed_up}"
    ),
    "TrainingLossOscillation": lambda c, a: (
        f"{c.m('trainguard:train_loss:stddev_5m')} > on({JOB}) "
        f"{c.scale(c.sigma, c.m('trainguard:train_loss:stddev_5m:baseline_floored'))} and {c.warmed_up}"
    ),
    "GradientVanishing": lambda c, a: (
        f"{c.m('trainguard:train_grad_norm:max')} {c.cmp('<', c.p(a, 'floor'))} and {c.warmed_up}"
    ),
    "LossScaleUnstable": lambda c, a: (
        f"max by ({JOB}) (increase({c.m('trainguard_train_loss_scale_updates_total')}[10m])) "
        f"{c.cmp('>', c.p(a, 'changes'))}"
    ),
    "AllReduceTimeRatioHigh": lambda c, a: (
        f"{c.m('trainguard_train_allreduce_time_ratio')} {c.cmp('>', c.p(a, 'ratio'))}"
    ),
    "DataLoaderSlow": lambda c, a: (
        f"{c.m('trainguard_train_dataloader_wait_ratio')} {c.cmp('>', c.p(a, 'ratio'))}"
    ),
    "HostSwapPressure": lambda c, a: (
        f"{c.m('trainguard_host_kswapd_cpu_ratio')} {c.cmp('>', c.p(a, 'kswapd_ratio'))} and on({JOB}, pod) "
        f"{c.m('trainguard_host_memory_used_ratio')} {c.cmp('>', c.p(a, 'memory_ratio'))}"
    ),
    "DiskWriteLatencyHigh": lambda c, a: (
        f"{c.m('trainguard_host_disk_write_latency_seconds')} {c.cmp('>', c.p(a, 'seconds'))}"
    ),
    "NetworkPacketLoss": lambda c, a: (
        f"{c.m('trainguard_network_packet_loss_ratio')} {c.cmp('>', c.p(a, 'ratio'))}"
    ),
    "NetworkBandwidthSaturation": lambda c, a: (
        f"{c.m('trainguard_network_bandwidth_utilization_ratio')} {c.cmp('>', c.p(a, 'ratio'))}"
    ),
    "GPUSingleBitECCErrorsHigh": lambda c, a: (
        f"increase({c.gpu('DCGM_FI_DEV_ECC_SBE_VOL_TOTAL')}[1d]) {c.cmp('>', c.p(a, 'errors'))}"
    ),
    "GPUMemoryHigh": lambda c, a: f"{_mem(c)} {c.cmp('>=', c.p(a, 'ratio'))}",
    "GPUMemorySustainedHigh": lambda c, a: f"{_mem(c)} {c.cmp('>', c.p(a, 'ratio'))}",
    "GPUMemoryTemperatureHigh": lambda c, a: (
        f"{c.gpu('DCGM_FI_DEV_MEMORY_TEMP')} {c.cmp('>', c.p(a, 'celsius'))}"
    ),
    "GPURowRemapPending": lambda c, a: f"{c.gpu('DCGM_FI_DEV_ROW_REMAP_PENDING')} > 0",
    "GPURowRemapFailure": lambda c, a: f"{c.gpu('DCGM_FI_DEV_ROW_REMAP_FAILURE')} > 0",
    "GPURetiredPagesPending": lambda c, a: f"{c.gpu('DCGM_FI_DEV_RETIRED_PENDING')} > 0",
    "CheckpointStorageFillingUp": _checkpoint_storage,
    "StragglerRank": _straggler,
    "TrainingLossDivergingEarly": _loss_diverging_early,
    "RackThermalEvent": _rack_heat,
    "MonitoringDataMissing": _monitoring_missing,
    "InferenceQueueDepthHigh": lambda c, a: (
        f"{c.m('trainguard_inference_queue_depth')} {c.cmp('>', c.p(a, 'requests'))}"
    ),
    "GPUMemoryGrowthPredicted": lambda c, a: (
        f"predict_linear({_mem(c)}[30m], {_num(a.p('horizon_seconds'))}) >= 1 and {_mem(c)} {c.cmp('>=', c.p(a, 'ratio'))}"
    ),
    "CollectiveLatencyHigh": lambda c, a: (
        f"{c.m('trainguard:train_collective_seconds:p99')} > on({JOB}) "
        f"{c.m('trainguard:train_collective_seconds:p99:upper_bound')} and on({JOB}) "
        f"{c.m('trainguard:train_collective_seconds:p99')} > on({JOB}) "
        f"{c.scale(c.p(a, 'ratio'), c.m('trainguard:train_collective_seconds:p99:baseline_mean'))} "
        f"and {c.warmed_up}"
    ),
    "NetworkCongestion": lambda c, a: (
        f"rate({c.m('trainguard_network_ecn_marked_packets_total')}[{c.rate_window}]) "
        f"{c.cmp('>', c.p(a, 'packets_per_second'))}"
    ),
    "NVLinkCRCErrors": lambda c, a: (
        f"increase({c.gpu('DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL')}[10m]) {c.cmp('>', c.p(a, 'errors'))}"
    ),
    "CheckpointRestoreSlow": lambda c, a: (
        f"{c.m('trainguard_checkpoint_restore_read_bytes_per_second')} {c.cmp('<', c.p(a, 'bytes_per_second'))} "
        f"and on({JOB}, pod) {c.m('trainguard_checkpoint_restoring')} == 1"
    ),
    "GPUPCIeLinkDegraded": _pcie_link,
    "GPUClocksThrottled": _clocks_throttled,
    "GPUClockBelowPeers": _clock_below_peers,
    "GPUPowerCapped": lambda c, a: (
        f"{c.gpu('DCGM_FI_DEV_POWER_USAGE')} / "
        f"{c.gpu('DCGM_FI_DEV_ENFORCED_POWER_LIMIT')} {c.cmp('>=', c.p(a, 'ratio'))}"
    ),
}


_WHERE: dict[Scope, str] = {
    Scope.JOB: "",
    Scope.POD: " (pod {{ $labels.pod }} on {{ $labels.node }})",
    Scope.GPU: " (GPU {{ $labels.gpu }} of pod {{ $labels.pod }} on {{ $labels.node }})",
    Scope.NODE: " (node {{ $labels.node }})",
    Scope.INTERFACE: " (interface {{ $labels.interface }} on {{ $labels.node }})",
    Scope.DEVICE: " (disk {{ $labels.device }} on {{ $labels.node }})",
    Scope.PORT: " (NIC {{ $labels.device }} port {{ $labels.port }} on {{ $labels.node }})",
    Scope.RACK: " (rack {{ $labels.rack }})",
}


def _anchor(name: str) -> str:
    return name.lower()


LOG_WINDOW_S = 30
"""The log excerpt an alert points to: this long either side of when it became active."""


def _query(fmt: str, args: list[str], body: str) -> str:
    """A template that runs a PromQL query built with printf (label values quoted with %q, so a value
    cannot break out of its string) and expands `body` on its first result."""
    return f'{{{{ with printf "{fmt}" {" ".join(args)} | query }}}}{body}{{{{ end }}}}'


POD_LOG_QUERY = '{namespace="{{ $labels.namespace }}",pod="{{ $labels.pod }}"}'
"""The LogQL stream of a pod-scoped alert's pod: from the alert's own labels, no lookup."""


def _correlation(ctx: Context, a: EffectiveAlert) -> dict[str, str]:
    """Where to look next: the run's trace id (from trainguard_exporter_info, per node for node-bound
    alerts), the job's nodes for job-wide ones, and the logs of +-30 s around the alert's activation
    (its ALERTS_FOR_STATE value) as a LogQL query with its window and as a kubectl command. Prometheus
    gives alert templates no activation time of their own, hence the query. Together they cost Prometheus
    6 to 21 ms per active alert per evaluation (bench/annotations.py), so without `ctx.lookups` an alert carries
    only what its labels give, and `report_command` looks the rest up once, when someone asks."""
    labels = a.alert.scope.labels
    if not ctx.lookups:
        return {"log_query": POD_LOG_QUERY} if "pod" in labels else {}
    bound = "node" in labels
    job_fmt = r"namespace=%q,training_job=%q"
    job_args = ["$labels.namespace", "$labels.training_job"]
    info_fmt = rf"trainguard_exporter_info{{{job_fmt}{r',node=%q' if bound else ''}}}"
    info_args = job_args + (["$labels.node"] if bound else [])
    out = {"trace_id": _query(info_fmt, info_args, '{{ . | first | label "trace_id" }}')}
    state_fmt = "ALERTS_FOR_STATE{alertname=%q," + ",".join(f"{x}=%q" for x in labels) + "}"
    state_args = [f'"{a.name}"', *(f"$labels.{x}" for x in labels)]

    def at(offset: int) -> str:
        sign = "+" if offset >= 0 else "-"
        return _query(
            f"{state_fmt} {sign} {abs(offset)}", state_args, '{{ . | first | value | printf "%.0f" }}'
        )

    start, end = at(-LOG_WINDOW_S), at(LOG_WINDOW_S)
    out["log_window"] = f"start={start} end={end}"
    if "pod" in labels:
        out["log_query"] = POD_LOG_QUERY
        target = "{{ $labels.pod }}"
    else:
        pods = _query(
            rf"group by (pod) (up{{{job_fmt}{r',node=%q' if bound else ''}}})",
            info_args,
            "{{ range $i, $s := . }}{{ if $i }}|{{ end }}{{ $s.Labels.pod }}{{ end }}",
        )
        out["log_query"] = f'{{namespace="{{{{ $labels.namespace }}}}",pod=~"{pods}"}}'
        selector = ctx.pod_selector
        target = f"-l '{selector}' --prefix" if selector else f"{pods}"
        if not bound:
            out["nodes"] = _query(
                rf"group by (node) (up{{{job_fmt}}})",
                job_args,
                "{{ range $i, $s := . }}{{ if $i }},{{ end }}{{ $s.Labels.node }}{{ end }}",
            )
    out["logs_command"] = (
        f"kubectl logs -n {{{{ $labels.namespace }}}} {target} --all-containers --timestamps "
        f"--since-time=$(date -u -d @{start} +%Y-%m-%dT%H:%M:%SZ)"
    )
    return out


def alert_rule(ctx: Context, a: EffectiveAlert, policy: EffectivePolicy) -> Rule:
    description = (
        f"{{{{ $labels.namespace }}}}/{{{{ $labels.training_job }}}}{_WHERE[a.alert.scope]}: "
        f"{a.alert.condition}{ctx.describe(a)}. Value: {{{{ $value | humanize }}}}."
    )
    return {
        "alert": a.name,
        "expr": EXPRESSIONS[a.name](ctx, a),
        "for": a.for_,
        "labels": grade_labels(a.severity, ctx.severity_style),
        "annotations": {
            "summary": f"{a.alert.summary}: {{{{ $labels.namespace }}}}/{{{{ $labels.training_job }}}}",
            "description": description,
            "probable_cause": a.alert.probable_cause,
            "runbook_url": f"{policy.runbook_base_url}#{_anchor(a.name)}",
        }
        | _correlation(ctx, a)
        | _report(a),
    }


REPORT_SEVERITY = "P2"
"""The severity the operator writes a diagnostic report for (diagnosis/configmap.py; a test pins the two)."""


REPORT_CONFIGMAP_PREFIX = "trainguard-report"


def report_configmap_template(alertname: str, scope: tuple[str, ...]) -> str:
    """The name of the ConfigMap the operator writes a P2's report into, as an alert template: made of
    the alert's identity (its name and scope labels), so Prometheus and the operator
    (diagnosis/configmap.report_name) derive the same name apart; `index` gives "" for an absent label."""
    rest = [f'(index $labels "{k}")' for k in scope if k not in ("namespace", "training_job")]
    args = [f'"{REPORT_CONFIGMAP_PREFIX}"', '(index $labels "training_job")', f'"{alertname}"', *rest]
    return (
        f'{{{{ printf "{"-".join(["%s"] * len(args))}" {" ".join(args)} | toLower'
        f' | reReplaceAll "[^a-z0-9]+" "-" | printf "%.253s" | reReplaceAll "-+$" "" }}}}'
    )


def _report(a: EffectiveAlert) -> dict[str, str]:
    """How to open the diagnostic report the operator writes for a P2 into a ConfigMap (its name in
    `report_configmap`, and so in every notification), and how to build one on demand for any alert."""
    on_demand = (
        f"trainguard report --monitor {{{{ $labels.namespace }}}}/{{{{ $labels.training_job }}}} "
        f"--alert {a.name} --out-dir report"
    )
    if a.severity != REPORT_SEVERITY:
        return {"report_command": on_demand}
    name = report_configmap_template(a.name, a.alert.scope.labels)
    stored = (
        f"kubectl get configmap -n {{{{ $labels.namespace }}}} {name} -o jsonpath='{{.data.report\\.html}}'"
    )
    return {"report_configmap": name, "report_command": f"{stored} > report.html (or: {on_demand})"}


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
        rules.append(alert_rule(ctx, a, policy))
    return rules + custom_rules(ctx, policy)


def custom_rules(ctx: Context, policy: EffectivePolicy) -> list[Rule]:
    """The policies' own rules, `$selector` replaced with the monitor's job."""
    return [
        {
            "alert": custom.name,
            "expr": custom.expr.replace("$selector", ctx.sel),
            "for": custom.for_,
            "labels": dict(sorted(custom.labels.items()))
            | grade_labels(custom.severity, ctx.severity_style)
            | {
                "namespace": ctx.monitor.namespace,
                "training_job": ctx.monitor.name,
            },
            "annotations": {
                "summary": custom.summary or custom.name,
                "description": custom.description or custom.summary or custom.name,
            },
        }
        for custom in policy.custom_rules
    ]


def rule_group(
    monitor: TrainingJobMonitor, policy: EffectivePolicy, severity_style: str = GRADE
) -> dict[str, Any]:
    """One group per monitor, named after it, evaluated at the scrape interval; its alerts carry their
    grade in `priority` and `severity` in `severity_style` (catalog/severity.py)."""
    ctx = Context(monitor, severity_style)
    return {
        "name": f"trainguard.{monitor.namespace}.{monitor.name}",
        "interval": monitor.spec.exporter.scrape_interval,
        "rules": recording_rules(ctx) + alerting_rules(ctx, policy),
    }
