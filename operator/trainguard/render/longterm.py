"""Long-term storage: 5-minute aggregates per job and per node, and the remote_write keep-list.

The product keeps 7 days of raw data, 6 months of aggregates and key events forever. One Prometheus
keeps the raw data; the aggregates recorded here and the alert history (ALERTS, ALERTS_FOR_STATE)
are all that is remote-written to a long-term store, so the store holds a few series per job and
node instead of every GPU's every scrape (docs/long-term-storage.md).

Each monitor gets its own group, evaluated every 5 minutes: an aggregate reads the raw series over
its own 5-minute window, so it depends on no other group's evaluation order. Record names follow
Prometheus' level:metric:operation convention and are built from the catalogue's metric names, so a
renamed metric fails at import instead of leaving a dead aggregate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog import METRICS_BY_NAME, Metric
from trainguard.render.prometheus import JOB, Context

WINDOW = "5m"
"""The aggregates' resolution: each reads the last 5 minutes of raw samples."""
DEFAULT_INTERVAL = WINDOW
"""How often the aggregate group is evaluated; a test may shorten it (the window stays 5 minutes)."""
NODE = f"{JOB}, node"

ALERT_HISTORY: tuple[str, ...] = ("ALERTS", "ALERTS_FOR_STATE")
"""Prometheus' own alert series: the key events, shipped raw and kept forever."""

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
"""Alert series that fired during the window, per alert name and severity."""


def _expr(ctx: Context, agg: Aggregate) -> str:
    by = JOB if agg.level == "job" else NODE
    series = ctx.gpu(agg.metric.name) if agg.metric.is_gpu else ctx.m(agg.metric.name)
    if agg.op == "rate":
        # a step counter is a gauge (it restarts from a checkpoint's step, not from zero): deriv, not rate
        return f"max by ({by}) (deriv({series}[{WINDOW}]))"
    return f"{agg.op} by ({by}) ({agg.op}_over_time({series}[{WINDOW}]))"


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
            "expr": f"count by ({JOB}, alertname, severity) (max_over_time({firing}[{WINDOW}]))",
        }
    )
    return rules


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
    )


def _regex(names: tuple[str, ...]) -> str:
    # Prometheus anchors a relabel regex at both ends, and these names hold no regex metacharacter
    return "|".join(names)


def keep_regex() -> str:
    """The remote_write keep-list: the aggregates and the alert history, nothing raw."""
    return _regex((*aggregate_names(), *ALERT_HISTORY))


def _targets(url: str, events_url: str | None) -> list[tuple[str, str]]:
    """(url, keep regex) per store: one for everything, or the alert history apart, for a store
    with a longer retention (aggregates 6 months, key events forever)."""
    if events_url is None:
        return [(url, keep_regex())]
    return [(url, _regex(aggregate_names())), (events_url, _regex(ALERT_HISTORY))]


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
