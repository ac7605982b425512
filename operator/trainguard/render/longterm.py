"""Long-term storage: 5-minute aggregates per job and per node, and the remote_write keep-list.

The product keeps 7 days of raw data, 6 months of aggregates and key events forever. One Prometheus
keeps the raw data; the aggregates recorded here and the alert history (ALERTS, ALERTS_FOR_STATE)
are all that is remote-written to a long-term store, so the store holds a few series per job and
node instead of every GPU's every scrape (docs/long-term-storage.md).

Each monitor gets its own group, evaluated every 5 minutes: an aggregate reads the raw series over
its own 5-minute window, so it depends on no other group's evaluation order. Record names follow
Prometheus' level:metric:operation convention and are built from the catalogue's metric names, so a
renamed metric fails at import instead of leaving a dead aggregate.

Cost attribution rides in the same group: GPU-hours and peak GPU memory per job, stamped with the
monitor's spec.costLabels (team, model, ...), so that `sum by (team)` charges usage back across
monitors; they are shipped like every other aggregate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainguard.api.common import duration_seconds
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog import METRICS_BY_NAME, Metric
from trainguard.catalog.metrics import GOODPUT_METRICS
from trainguard.render.prometheus import ETTR, JOB, LOST, LOST_ALL, Context

WINDOW = "5m"
"""The aggregates' resolution: each reads the last 5 minutes of raw samples."""
DEFAULT_INTERVAL = WINDOW
"""How often the aggregate group is evaluated; a test may shorten it (the window stays 5 minutes)."""
NODE = f"{JOB}, node"

ALERT_HISTORY: tuple[str, ...] = ("ALERTS", "ALERTS_FOR_STATE")
"""Prometheus' own alert series: the key events, shipped raw and kept forever."""
GOODPUT: tuple[str, ...] = (LOST, LOST_ALL, ETTR, *(m.name for m in GOODPUT_METRICS))
"""Each job's goodput: the shares its rules record (render.prometheus.goodput_rules) and the operator's
counters from its records (controller/metrics.py's GoodputCollector). A few series per job, shipped
raw with the aggregates: what a platform reports over months is each job's lost time by cause."""

Rule = dict[str, Any]


def _metric(name: str) -> Metric:
    """A contract metric by name: a KeyError at import if the catalogue renames or drops it."""
    return METRICS_BY_NAME[name]


@dataclass(frozen=True)
class Aggregate:
    """One recorded aggregate: `level` is job or node, `op` avg, max or rate over WINDOW."""

    level: str
    metric: Metric
    op: str

    @property
    def record(self) -> str:
        return f"{self.level}:{self.metric.name}:{self.op}{WINDOW}"


_TOKENS = _metric("trainguard_train_tokens_per_second_per_gpu")
_STEP = _metric("trainguard_train_step")
_CHECKPOINT = _metric("trainguard_checkpoint_last_success_timestamp_seconds")

JOB_AGGREGATES: tuple[Aggregate, ...] = (
    Aggregate("job", _TOKENS, "avg"),
    Aggregate("job", _metric("trainguard_train_loss"), "avg"),
    Aggregate("job", _metric("trainguard_train_grad_norm"), "max"),
    Aggregate("job", _STEP, "max"),
    Aggregate("job", _STEP, "rate"),
)
NODE_AGGREGATES: tuple[Aggregate, ...] = (
    Aggregate("node", _metric("DCGM_FI_DEV_GPU_TEMP"), "max"),
    Aggregate("node", _metric("DCGM_FI_DEV_GPU_UTIL"), "avg"),
    Aggregate("node", _metric("DCGM_FI_DEV_POWER_USAGE"), "avg"),
    Aggregate("node", _metric("DCGM_FI_DEV_POWER_USAGE"), "max"),
    Aggregate("node", _metric("DCGM_FI_DEV_FB_USED"), "max"),
)
CHECKPOINT_AGE = f"job:{_CHECKPOINT.name}:age"
"""Seconds since the job's last successful checkpoint, per `kind`, sampled every evaluation."""
ALERT_COUNT = f"job:{ALERT_HISTORY[0]}:count{WINDOW}"
"""Alert series that fired during the window, per alert name, grade (`priority`) and severity."""

_FB_USED = _metric("DCGM_FI_DEV_FB_USED")
GPU_HOURS = f"job:trainguard_gpu_hours:increase{WINDOW}"
"""GPU-hours the job held during the window, so that sum_over_time of it over a month is the month's
GPU-hours when the group runs every WINDOW (the default). A GPU counts while its series
(DCGM_FI_DEV_FB_USED, one per GPU of the job's pods, in every backend) is fresh."""
PEAK_MEMORY = Aggregate("job", _FB_USED, "max")
"""The most framebuffer memory (MiB) any one GPU of the job used during the window."""
COST_RECORDS: tuple[str, ...] = (GPU_HOURS, PEAK_MEMORY.record)
"""The records that carry the monitor's costLabels."""
PRESENCE_STEP = "1m"
"""How finely GPU-hours sample whether a GPU is held: the error is under one step per pod start or stop."""


def _expr(ctx: Context, agg: Aggregate) -> str:
    by = JOB if agg.level == "job" else NODE
    series = ctx.gpu(agg.metric.name) if agg.metric.is_gpu else ctx.m(agg.metric.name)
    if agg.op == "rate":
        # a step counter is a gauge (it restarts from a checkpoint's step, not from zero): deriv, not rate
        return f"max by ({by}) (deriv({series}[{WINDOW}]))"
    return f"{agg.op} by ({by}) ({agg.op}_over_time({series}[{WINDOW}]))"


def gpu_hours_expr(ctx: Context) -> str:
    """GPUs held x the window in hours. A GPU held for part of the window counts for that part: the
    share of PRESENCE_STEP steps at which its series is fresh, over every step of the window (5 on
    Prometheus 3, whose windows are left-open, 6 on Prometheus 2; the ratio is the same on both)."""
    steps = f"[{WINDOW}:{PRESENCE_STEP}]"
    held = f"sum by ({JOB}) (count_over_time({ctx.gpu(_FB_USED.name)}{steps}))"
    return f"{held} / scalar(count_over_time(vector(1){steps})) * {int(duration_seconds(WINDOW))} / 3600"


def stamped(expr: str, labels: dict[str, str]) -> str:
    """`expr` with each of `labels` set to its value (label_replace from no source label always sets it).
    The API allows only label-value characters in the values, so they need no escaping."""
    for name, value in sorted(labels.items()):
        expr = f'label_replace({expr}, "{name}", "{value}", "", "")'
    return expr


def cost_rules(monitor: TrainingJobMonitor) -> list[Rule]:
    """GPU-hours and peak GPU memory per job, each carrying the monitor's costLabels."""
    ctx = Context(monitor)
    labels = monitor.spec.cost_labels
    return [
        {"record": GPU_HOURS, "expr": stamped(gpu_hours_expr(ctx), labels)},
        {"record": PEAK_MEMORY.record, "expr": stamped(_expr(ctx, PEAK_MEMORY), labels)},
    ]


def aggregate_rules(monitor: TrainingJobMonitor) -> list[Rule]:
    ctx = Context(monitor)
    rules = [{"record": a.record, "expr": _expr(ctx, a)} for a in JOB_AGGREGATES + NODE_AGGREGATES]
    rules.append(
        {
            "record": CHECKPOINT_AGE,
            "expr": f"time() - max by ({JOB}, kind) ({ctx.m(_CHECKPOINT.name)})",
        }
    )
    firing = ctx.m(ALERT_HISTORY[0], 'alertstate="firing"')
    rules.append(
        {
            "record": ALERT_COUNT,
            "expr": f"count by ({JOB}, alertname, priority, severity) (max_over_time({firing}[{WINDOW}]))",
        }
    )
    return rules + cost_rules(monitor)


def aggregate_group(monitor: TrainingJobMonitor, interval: str = DEFAULT_INTERVAL) -> dict[str, Any]:
    """The monitor's aggregate group, next to its alerting group (render.prometheus.rule_group)."""
    return {
        "name": f"trainguard.{monitor.namespace}.{monitor.name}.longterm",
        "interval": interval,
        "rules": aggregate_rules(monitor),
    }


def aggregate_names() -> tuple[str, ...]:
    """Every record name an aggregate group holds; the same for every monitor (labels tell them apart)."""
    return (
        *(a.record for a in JOB_AGGREGATES + NODE_AGGREGATES),
        CHECKPOINT_AGE,
        ALERT_COUNT,
        *COST_RECORDS,
    )


def long_term_names() -> tuple[str, ...]:
    """What goes to the aggregates' store (6 months): the aggregates and each job's goodput."""
    return (*aggregate_names(), *GOODPUT)


def _regex(names: tuple[str, ...]) -> str:
    # Prometheus anchors a relabel regex at both ends, and these names hold no regex metacharacter
    return "|".join(names)


def keep_regex() -> str:
    """The remote_write keep-list: the aggregates, the goodput and the alert history, nothing per GPU."""
    return _regex((*long_term_names(), *ALERT_HISTORY))


def _targets(url: str, events_url: str | None) -> list[tuple[str, str]]:
    """(url, keep regex) per store: one for everything, or the alert history apart, for a store
    with a longer retention (aggregates 6 months, key events forever)."""
    if events_url is None:
        return [(url, keep_regex())]
    return [(url, _regex(long_term_names())), (events_url, _regex(ALERT_HISTORY))]


def remote_write(url: str, events_url: str | None = None) -> dict[str, Any]:
    """A `remote_write` section for prometheus.yml that ships only what keep_regex() lets through."""
    return {
        "remote_write": [
            {
                "url": u,
                "write_relabel_configs": [{"source_labels": ["__name__"], "regex": r, "action": "keep"}],
            }
            for u, r in _targets(url, events_url)
        ]
    }


def remote_write_kube_prometheus_stack(url: str, events_url: str | None = None) -> dict[str, Any]:
    """The same for kube-prometheus-stack's values (prometheus.prometheusSpec.remoteWrite)."""
    entries = [
        {
            "url": u,
            "writeRelabelConfigs": [{"sourceLabels": ["__name__"], "regex": r, "action": "keep"}],
        }
        for u, r in _targets(url, events_url)
    ]
    return {"prometheus": {"prometheusSpec": {"remoteWrite": entries}}}
