"""`trainguard status`: each monitored job's health, alerts, throughput, checkpoint, last remediation and
training time lost, in one screen.

Two halves. The pure half (`job_status`, `render_plain`, `render_live`) turns fetched data into a
`JobStatus` and text, tested without a cluster. The edge (`fetch`) reads the monitors from the
Kubernetes API and the series from Prometheus (prometheus-api-client), or the alerts from Alertmanager.

Training time lost, as defined here (docs/diagnosis.md): over the monitor's finished remediation
records that stopped training (not a dry run, a Pause or RestartGang step that succeeded), the sum of
  - the stop: from the record's creation (the alert reaching the operator) to its last update (its
    last step done: the gang restarted and placed), a lower bound of fault-to-resume, since the pods
    still load the checkpoint after it;
  - the redo, for a record whose RestartGang succeeded: the steps since the last full checkpoint at the
    record's creation (the highest trainguard_train_step minus the highest
    trainguard_checkpoint_last_step{kind="full"} of the 5 minutes before it) divided by the job's step
    rate then (deriv of trainguard_train_step over those 5 minutes: the slope of its samples, right for
    a job younger than the window, where rate() would divide by all 5 minutes), the work the gang does
    again.
A redo Prometheus cannot tell (the series gone past retention) counts 0 and the total is marked "+?".
Records beyond the 50 the status keeps are not counted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainguard.remediation import alertmanager
from trainguard.remediation.records import unix

SEVERITY_ORDER = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}
THROUGHPUT = "trainguard:train_tokens_per_second_per_gpu:avg"
BASELINE = "trainguard:train_tokens_per_second_per_gpu:avg:baseline_mean"
CHECKPOINT_STEP = "trainguard_checkpoint_last_step"
CHECKPOINT_TIME = "trainguard_checkpoint_last_success_timestamp_seconds"
TRAIN_STEP = "trainguard_train_step"
STOPPING_STEPS = frozenset({"Pause", "RestartGang"})
RESTART = "RestartGang"
REDO_WINDOW = "5m"
"""The redo is read over the window before a record's creation, not at that instant: by then the failed
pod's target may be gone and its series marked stale."""


# ---- the model (pure) ----


@dataclass(frozen=True)
class Alert:
    name: str
    severity: str
    node: str = ""
    gpu: str = ""


@dataclass(frozen=True)
class Series:
    """The job's instant values read from Prometheus; None where the series is absent."""

    throughput: float | None = None
    baseline: float | None = None
    checkpoint_step: float | None = None
    checkpoint_time: float | None = None


@dataclass(frozen=True)
class Redo:
    """At a record's creation: the job's step, its last full checkpoint's step and its step rate (/s)."""

    step: float | None
    checkpoint_step: float | None
    rate: float | None

    @property
    def seconds(self) -> float | None:
        if self.step is None or self.checkpoint_step is None or not self.rate or self.rate <= 0:
            return None
        return max(0.0, self.step - self.checkpoint_step) / self.rate


@dataclass(frozen=True)
class Remediation:
    alert: str
    phase: str
    steps: str
    """The step kinds, in order (`Pause,RequestCheckpoint,Cordon,...`)."""
    created: float
    updated: float
    node: str = ""
    dry_run: bool = False


@dataclass(frozen=True)
class JobStatus:
    namespace: str
    name: str
    health: str
    """Healthy, Degraded (a P1 firing), Critical (a P0 firing), NotReady (the monitor's Ready is not True)."""
    ready_reason: str
    alerts: tuple[Alert, ...]
    series: Series
    now: float
    last_remediation: Remediation | None
    lost_s: float
    lost_partial: bool
    """A redo could not be told: `lost_s` is a lower bound."""
    remediations: int = 0

    @property
    def by_severity(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for a in self.alerts:
            counts[a.severity or "?"] = counts.get(a.severity or "?", 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: SEVERITY_ORDER.get(kv[0], 9)))

    @property
    def throughput_ratio(self) -> float | None:
        s = self.series
        if s.throughput is None or not s.baseline:
            return None
        return s.throughput / s.baseline

    @property
    def checkpoint_age_s(self) -> float | None:
        t = self.series.checkpoint_time
        return None if t is None or t <= 0 else max(0.0, self.now - t)


def _ready(body: Mapping[str, Any]) -> tuple[bool, str]:
    for c in (body.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return str(c.get("status")) == "True", str(c.get("reason") or "")
    return False, "NoStatus"


def health(ready: bool, alerts: Iterable[Alert]) -> str:
    """The worst of: a P0 firing (Critical), the monitor not Ready (NotReady), a P1 firing (Degraded)."""
    severities = {a.severity for a in alerts}
    if "P0" in severities:
        return "Critical"
    if not ready:
        return "NotReady"
    if "P1" in severities:
        return "Degraded"
    return "Healthy"


def _remediation(record: Mapping[str, Any]) -> Remediation:
    return Remediation(
        alert=str(record.get("alert", "")),
        phase=str(record.get("phase", "")),
        steps=",".join(str(s.get("kind", "")) for s in record.get("steps") or []),
        created=unix(str(record.get("created", ""))),
        updated=unix(str(record.get("updated", ""))),
        node=str(record.get("node", "")),
        dry_run=bool(record.get("dryRun")),
    )


def stopped_training(record: Mapping[str, Any]) -> bool:
    """Finished, not a dry run, and a step that stops training (Pause, RestartGang) succeeded."""
    if record.get("dryRun") or record.get("phase") not in ("Succeeded", "Failed"):
        return False
    return any(
        s.get("kind") in STOPPING_STEPS and s.get("phase") == "Succeeded" for s in record.get("steps") or []
    )


def restarted(record: Mapping[str, Any]) -> bool:
    return any(s.get("kind") == RESTART and s.get("phase") == "Succeeded" for s in record.get("steps") or [])


def time_lost(records: Sequence[Mapping[str, Any]], redo: Mapping[str, Redo]) -> tuple[float, bool]:
    """Seconds of training lost (module docstring) and whether a redo was unknown (a lower bound)."""
    total, partial = 0.0, False
    for r in records:
        if not stopped_training(r):
            continue
        total += max(0.0, unix(str(r.get("updated", ""))) - unix(str(r.get("created", ""))))
        if restarted(r):
            seconds = redo.get(str(r.get("id", "")), Redo(None, None, None)).seconds
            if seconds is None:
                partial = True
            else:
                total += seconds
    return total, partial


def alerts_of(labels: Iterable[Mapping[str, str]]) -> tuple[Alert, ...]:
    """Distinct alerts (name, severity, node, gpu), most severe first."""
    got = {
        Alert(m.get("alertname", ""), m.get("severity", ""), m.get("node", ""), m.get("gpu", ""))
        for m in labels
    }
    return tuple(sorted(got, key=lambda a: (SEVERITY_ORDER.get(a.severity, 9), a.name, a.node, a.gpu)))


def job_status(
    body: Mapping[str, Any],
    alerts: Iterable[Mapping[str, str]],
    series: Series,
    redo: Mapping[str, Redo],
    now: float,
) -> JobStatus:
    """One job's status from its monitor (with status), its firing alerts' labels and its series."""
    meta = body.get("metadata") or {}
    ready, reason = _ready(body)
    got = alerts_of(alerts)
    records = list((body.get("status") or {}).get("remediations") or [])
    lost, partial = time_lost(records, redo)
    newest = max(records, key=lambda r: unix(str(r.get("created", "")))) if records else None
    return JobStatus(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        health=health(ready, got),
        ready_reason=reason,
        alerts=got,
        series=series,
        now=now,
        last_remediation=_remediation(newest) if newest else None,
        lost_s=lost,
        lost_partial=partial,
        remediations=len(records),
    )


# ---- the renderers (pure) ----


def duration(seconds: float | None) -> str:
    """`45s`, `12m`, `3h05m`, `2d04h`; `-` when unknown."""
    if seconds is None or math.isnan(seconds):
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def _num(v: float | None) -> str:
    if v is None or math.isnan(v):
        return "-"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def throughput_text(s: JobStatus) -> str:
    ratio = s.throughput_ratio
    text = f"{_num(s.series.throughput)}/{_num(s.series.baseline)}"
    return f"{text} ({ratio * 100:.0f}%)" if ratio is not None else text


def checkpoint_text(s: JobStatus) -> str:
    step = s.series.checkpoint_step
    if step is None:
        return "-"
    return f"step {step:.0f} {duration(s.checkpoint_age_s)} ago"


def alerts_text(s: JobStatus) -> str:
    return " ".join(f"{k}:{v}" for k, v in s.by_severity.items()) or "none"


def lost_text(s: JobStatus) -> str:
    return duration(s.lost_s) + ("+?" if s.lost_partial else "")


def remediation_text(r: Remediation | None, now: float) -> str:
    if r is None:
        return "none"
    dry = " (dry run)" if r.dry_run else ""
    where = f" on {r.node}" if r.node else ""
    return f"{r.alert}{where}: {r.phase}{dry} [{r.steps or 'no steps'}] {duration(now - r.created)} ago"


COLUMNS = ("JOB", "HEALTH", "ALERTS", "TOKENS/S/GPU(VS BASELINE)", "CHECKPOINT", "LOST")


def _rows(statuses: Sequence[JobStatus]) -> list[tuple[str, ...]]:
    return [
        (
            f"{s.namespace}/{s.name}",
            s.health,
            alerts_text(s),
            throughput_text(s),
            checkpoint_text(s),
            lost_text(s),
        )
        for s in statuses
    ]


def _details(s: JobStatus) -> list[str]:
    lines = [f"  {a.severity} {a.name}" + (f" node={a.node}" if a.node else "") + (f" gpu={a.gpu}" if a.gpu else "")
             for a in s.alerts]  # fmt: skip
    if s.health == "NotReady":
        lines.append(f"  monitor not Ready: {s.ready_reason}")
    lines.append(f"  last remediation: {remediation_text(s.last_remediation, s.now)}")
    return lines


def render_plain(statuses: Sequence[JobStatus]) -> str:
    """For pipes: a header, one tab-free line per job in fixed columns, its details indented; no ANSI."""
    if not statuses:
        return "no TrainingJobMonitor found\n"
    rows = [COLUMNS, *_rows(statuses)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    out = ["  ".join(c.ljust(w) for c, w in zip(rows[0], widths, strict=True)).rstrip()]
    for s, row in zip(statuses, rows[1:], strict=True):
        out.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        out += _details(s)
    return "\n".join(out) + "\n"


RESET, BOLD, DIM = "\x1b[0m", "\x1b[1m", "\x1b[2m"
COLOURS = {"Critical": "\x1b[1;31m", "NotReady": "\x1b[35m", "Degraded": "\x1b[33m", "Healthy": "\x1b[32m",
           "P0": "\x1b[1;31m", "P1": "\x1b[33m", "P2": "\x1b[36m", "P3": "\x1b[2m"}  # fmt: skip
CLEAR = "\x1b[H\x1b[2J"


def render_live(statuses: Sequence[JobStatus], *, now_text: str, every_s: float | None) -> str:
    """For a terminal: the screen cleared and redrawn, health and severities in colour."""
    head = f"{BOLD}trainguard status{RESET}  {now_text}" + (
        f"  {DIM}every {every_s:g}s, Ctrl-C to stop{RESET}" if every_s else ""
    )
    out = [CLEAR + head, ""]
    if not statuses:
        out.append("no TrainingJobMonitor found")
    for s in statuses:
        colour = COLOURS.get(s.health, "")
        out.append(f"{BOLD}{s.namespace}/{s.name}{RESET}  {colour}{s.health}{RESET}")
        sev = " ".join(f"{COLOURS.get(k, '')}{k}:{v}{RESET}" for k, v in s.by_severity.items()) or "none"
        out.append(f"  alerts      {sev}")
        for a in s.alerts:
            where = (f" node={a.node}" if a.node else "") + (f" gpu={a.gpu}" if a.gpu else "")
            out.append(f"    {COLOURS.get(a.severity, '')}{a.severity}{RESET} {a.name}{where}")
        out.append(f"  throughput  {throughput_text(s)} tokens/s/GPU (vs baseline)")
        out.append(f"  checkpoint  {checkpoint_text(s)}")
        out.append(f"  remediation {remediation_text(s.last_remediation, s.now)}")
        out.append(f"  time lost   {lost_text(s)}" + (f"  {DIM}(monitor: {s.ready_reason}){RESET}"
                                                       if s.health == "NotReady" else ""))  # fmt: skip
        out.append("")
    return "\n".join(out) + "\n"


# ---- the edge: Kubernetes and Prometheus (or Alertmanager) ----


class InstantQuery(Protocol):
    """What status needs of prometheus_api_client.PrometheusConnect."""

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any: ...


def _quoted(v: str) -> str:
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _sel(namespace: str, job: str, extra: str = "") -> str:
    return f"{{namespace={_quoted(namespace)},training_job={_quoted(job)}{extra}}}"


def _value(prom: InstantQuery, query: str, at: float | None = None) -> float | None:
    """The largest value of an instant query (None when empty)."""
    params = {"time": f"{at:.3f}"} if at is not None else None
    values = [float(i["value"][1]) for i in prom.custom_query(query, params=params) or [] if i.get("value")]
    values = [v for v in values if not math.isnan(v)]
    return max(values) if values else None


def fetch_series(prom: InstantQuery, namespace: str, job: str) -> Series:
    sel, full = _sel(namespace, job), _sel(namespace, job, ',kind="full"')
    return Series(
        throughput=_value(prom, f"{THROUGHPUT}{sel}"),
        baseline=_value(prom, f"{BASELINE}{sel}"),
        checkpoint_step=_value(prom, f"{CHECKPOINT_STEP}{full}"),
        checkpoint_time=_value(prom, f"{CHECKPOINT_TIME}{full}"),
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
    items = prom.custom_query(f"ALERTS{_sel(namespace, job, ',alertstate=' + _quoted('firing'))}") or []
    return [{k: str(v) for k, v in (i.get("metric") or {}).items()} for i in items]


def alertmanager_alerts(url: str, namespace: str, job: str) -> list[dict[str, str]]:
    """Alertmanager's active alerts of the job, silenced and inhibited ones left out (nobody is paged)."""
    got = alertmanager.active_alerts(url, {"namespace": namespace, "training_job": job})
    return [dict(a.labels) for a in got if a.state == "active" and not a.muted]


@dataclass
class Sources:
    kube: Any
    """controller.kube.Kube (list_monitors, get_monitor)."""
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
