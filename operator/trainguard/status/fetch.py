"""The status screen's edge: the monitors from the Kubernetes API, the series (and ALERTS) from
Prometheus (prometheus-api-client), or the active alerts from Alertmanager."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainguard.api.promql import quoted
from trainguard.clients import alertmanager
from trainguard.render.prometheus import ETTR, LOST
from trainguard.status.model import (
    BASELINE,
    CHECKPOINT_STEP,
    CHECKPOINT_TIME,
    REDO_WINDOW,
    THROUGHPUT,
    TRAIN_STEP,
    JobStatus,
    Redo,
    Series,
    job_status,
    restarted,
    stopped_training,
)
from trainguard.times import unix


class InstantQuery(Protocol):
    """What status needs of prometheus_api_client.PrometheusConnect."""

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any: ...


def _sel(namespace: str, job: str, extra: str = "") -> str:
    return f"{{namespace={quoted(namespace)},training_job={quoted(job)}{extra}}}"


def _value(prom: InstantQuery, query: str, at: float | None = None) -> float | None:
    """The largest value of an instant query (None when empty)."""
    params = {"time": f"{at:.3f}"} if at is not None else None
    values = [float(i["value"][1]) for i in prom.custom_query(query, params=params) or [] if i.get("value")]
    values = [v for v in values if not math.isnan(v)]
    return max(values) if values else None


def _by_label(prom: InstantQuery, query: str, label: str) -> dict[str, float]:
    """An instant query's values by one label (the largest where several series share it)."""
    out: dict[str, float] = {}
    for item in prom.custom_query(query) or []:
        key, value = (item.get("metric") or {}).get(label), item.get("value")
        if key is None or not value or math.isnan(float(value[1])):
            continue
        out[str(key)] = max(out.get(str(key), float("-inf")), float(value[1]))
    return out


def fetch_series(prom: InstantQuery, namespace: str, job: str) -> Series:
    sel, full = _sel(namespace, job), _sel(namespace, job, ',kind="full"')
    return Series(
        throughput=_value(prom, f"{THROUGHPUT}{sel}"),
        baseline=_value(prom, f"{BASELINE}{sel}"),
        checkpoint_step=_value(prom, f"{CHECKPOINT_STEP}{full}"),
        checkpoint_time=_value(prom, f"{CHECKPOINT_TIME}{full}"),
        lost_now=_by_label(prom, f"{LOST}{sel}", "cause"),
        ettr_all=_value(prom, f"{ETTR}{sel}"),
    )


def fetch_redo(
    prom: InstantQuery, namespace: str, job: str, records: Iterable[Mapping[str, Any]]
) -> dict[str, Redo]:
    """For each restarting record: the job's step, its full checkpoint's step and step rate when it began."""
    sel, full = _sel(namespace, job), _sel(namespace, job, ',kind="full"')
    out = {}
    for r in records:
        if not (stopped_training(r) and restarted(r)):
            continue
        at = unix(str(r.get("created", "")))
        out[str(r.get("id", ""))] = Redo(
            step=_value(prom, f"max(max_over_time({TRAIN_STEP}{sel}[{REDO_WINDOW}]))", at),
            checkpoint_step=_value(prom, f"max(max_over_time({CHECKPOINT_STEP}{full}[{REDO_WINDOW}]))", at),
            rate=_value(prom, f"max(deriv({TRAIN_STEP}{sel}[{REDO_WINDOW}]))", at),
        )
    return out


def prometheus_alerts(prom: InstantQuery, namespace: str, job: str) -> list[dict[str, str]]:
    items = prom.custom_query(f"ALERTS{_sel(namespace, job, ',alertstate=' + quoted('firing'))}") or []
    return [{k: str(v) for k, v in (i.get("metric") or {}).items()} for i in items]


def alertmanager_alerts(url: str, namespace: str, job: str) -> list[dict[str, str]]:
    """Alertmanager's active alerts of the job, silenced and inhibited ones left out (nobody is paged)."""
    got = alertmanager.active_alerts(url, {"namespace": namespace, "training_job": job})
    return [dict(a.labels) for a in got if a.state == "active" and not a.muted]


class MonitorAPI(Protocol):
    """kube.Kube's monitor reads, made now (a command keeps no watch)."""

    def get_monitor(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def list_monitors(self, namespace: str | None = None) -> list[dict[str, Any]]: ...


@dataclass
class Sources:
    kube: MonitorAPI
    prometheus: InstantQuery | None
    alertmanager_url: str | None = None
    errors: list[str] = field(default_factory=list)


def fetch(sources: Sources, namespace: str | None, monitor: str | None, now: float) -> list[JobStatus]:
    """Every monitor of `namespace` (all when None), or the one named, as JobStatus. A Prometheus or
    Alertmanager that does not answer leaves those parts blank and says so in `sources.errors`."""
    sources.errors.clear()
    if monitor:
        body = sources.kube.get_monitor(namespace or "default", monitor)
        bodies = [body] if body else []
    else:
        bodies = sources.kube.list_monitors(namespace)
    out = []
    for body in sorted(bodies, key=lambda b: (b["metadata"]["namespace"], b["metadata"]["name"])):
        ns, name = str(body["metadata"]["namespace"]), str(body["metadata"]["name"])
        series, redo, alerts = Series(), dict[str, Redo](), list[dict[str, str]]()
        if sources.prometheus is not None:
            try:
                series = fetch_series(sources.prometheus, ns, name)
                records = (body.get("status") or {}).get("remediations") or []
                redo = fetch_redo(sources.prometheus, ns, name, records)
                if not sources.alertmanager_url:
                    alerts = prometheus_alerts(sources.prometheus, ns, name)
            except Exception as exc:  # shown on the screen, the rest still drawn
                sources.errors.append(f"Prometheus: {exc}")
        if sources.alertmanager_url:
            try:
                alerts = alertmanager_alerts(sources.alertmanager_url, ns, name)
            except Exception as exc:
                sources.errors.append(f"Alertmanager: {exc}")
        out.append(job_status(body, alerts, series, redo, now))
    return out
