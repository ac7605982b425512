"""The morning report: at the end of a monitor's quiet hours, what fired overnight, in one message to
its IM and e-mail receivers.

At night only the allowlist rings the phone and IM stays silent (render/routing.py); the report is
how the rest of the night reaches people. It is read from Prometheus's own history of its alerts,
`ALERTS{alertstate="firing", namespace, training_job}` over the night, so P3s (which notify no one)
are listed too, and it does not depend on what Alertmanager kept. It is posted to Alertmanager as
one `TrainguardMorningReport` alert whose annotations hold the text: Alertmanager owns the receivers
(their URLs and keys are in Secrets the operator may not read), and the report's route sends it to
the monitor's im and email receivers, once per night (its `night` label makes each night a group of
its own, so a second post of the same night notifies no one).

Pure functions for the decisions (which night, is it due, the tally, the text, the alert) and a thin
edge, `query_night`, that asks Prometheus through prometheus-api-client. The leader's pass in
diagnosis/passes.py wires them to the monitors and keeps the per-night marker.

Alerts the operator posts straight to Alertmanager (TrainingInterrupted, escalated copies, notices)
are not in Prometheus's ALERTS and so not in the report.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import zoneinfo
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trainguard.api.policy import WEEKDAYS, QuietHours
from trainguard.api.promql import quoted
from trainguard.catalog.severity import grade_of
from trainguard.render.routing import MORNING_REPORT
from trainguard.times import rfc3339

SEVERITY = "none"
"""The report's severity label. It has no grade (no `priority`), so no severity route, escalation or
job-P0 inhibition touches it (its own route follows the severity routes); and not `info`, which
kube-prometheus-stack's InfoInhibitor mutes in a namespace where no warning or critical fires
(docs/severity.md)."""
NIGHT_LABEL = "night"
GRACE_S = 6 * 3600.0
"""A night's report is still sent this long after the quiet hours end (an operator that was down at
the end of the night catches up); later, it is skipped."""
EPISODE_GAP_S = 300.0
"""Two samples of a firing alert further apart than this are two firings: it resolved in between.
Prometheus's lookback is 5 minutes, so a firing alert has a sample at least that often."""
MAX_ROWS = 40
"""Rows in the report's description; the rest is counted in one line."""
_SHOWN_INSTANCES = 3
_COMMON = frozenset({"alertname", "alertstate", "priority", "severity", "namespace", "training_job"})


@dataclass(frozen=True)
class Night:
    """One quiet-hours window, in the policy's time zone."""

    start: dt.datetime
    end: dt.datetime

    @property
    def key(self) -> str:
        """The report's `night` label and marker: the local end, to the minute."""
        return self.end.strftime("%Y-%m-%dT%H:%M")


def _window(q: QuietHours, day: dt.date, zone: zoneinfo.ZoneInfo) -> Night:
    start = dt.datetime.combine(day, dt.time.fromisoformat(q.start), zone)
    end_day = day if q.start < q.end else day + dt.timedelta(days=1)
    return Night(start, dt.datetime.combine(end_day, dt.time.fromisoformat(q.end), zone))


def _starts_on(q: QuietHours, day: dt.date) -> bool:
    return not q.weekdays or WEEKDAYS[day.weekday()] in q.weekdays


def last_night(q: QuietHours, now: float) -> Night | None:
    """The latest quiet-hours window that has ended by `now` (unix seconds); None without quiet hours."""
    if not q.enabled:
        return None
    zone = zoneinfo.ZoneInfo(q.timezone)
    today = dt.datetime.fromtimestamp(now, zone).date()
    for back in range(9):
        day = today - dt.timedelta(days=back)
        night = _window(q, day, zone)
        if _starts_on(q, day) and night.end.timestamp() <= now:
            return night
    return None


def next_night_start(q: QuietHours, after: float) -> float:
    """When the next quiet hours start after `after`: the report lasts until then, so that its end
    falls in the quiet hours, whose route mute drops the resolved notification."""
    zone = zoneinfo.ZoneInfo(q.timezone)
    today = dt.datetime.fromtimestamp(after, zone).date()
    for ahead in range(9):
        day = today + dt.timedelta(days=ahead)
        start = _window(q, day, zone).start.timestamp()
        if _starts_on(q, day) and start > after:
            return start
    return after + 86400.0


def due(q: QuietHours, now: float, sent: str | None, grace_s: float = GRACE_S) -> Night | None:
    """The night whose report should go out now: the last one, ended less than `grace_s` ago, unless
    `sent` (the marker) says its report went out already."""
    night = last_night(q, now)
    if night is None or night.key == sent or now - night.end.timestamp() > grace_s:
        return None
    return night


@dataclass(frozen=True)
class Series:
    """One alert instance's firing samples in the night (its ALERTS series)."""

    labels: Mapping[str, str]
    timestamps: tuple[float, ...]


@dataclass(frozen=True)
class Row:
    """One alert of the night: its instances taken together."""

    alertname: str
    severity: str
    instances: tuple[str, ...]
    """Each instance's own labels (node, gpu, pod...), as text."""
    firings: int
    """Times it started firing: instances, and again after each gap."""
    first_seen: float
    last_seen: float
    still_firing: int
    """Instances firing when the report was made."""
    paged: bool
    """On the allowlist: it rang the phone at night already."""


def _instance(labels: Mapping[str, str]) -> str:
    own = sorted((k, v) for k, v in labels.items() if k not in _COMMON and not k.startswith("__"))
    return ",".join(f"{k}={v}" for k, v in own) or "-"


def _key(labels: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset((k, v) for k, v in labels.items() if k != "__name__")


def tally(
    series: Iterable[Series],
    firing_now: Iterable[Mapping[str, str]],
    allowlist: Collection[str],
    gap_s: float = EPISODE_GAP_S,
) -> list[Row]:
    """The night's alerts, one row per alert and severity, strongest severity first, then by name."""
    now_keys = {_key(labels) for labels in firing_now}
    groups: dict[tuple[str, str], list[Series]] = {}
    for s in series:
        if s.timestamps:
            key = (grade_of(s.labels), s.labels.get("alertname", ""))
            groups.setdefault(key, []).append(s)
    rows = []
    for (severity, alertname), members in groups.items():
        firings = 0
        for s in members:
            ts = sorted(s.timestamps)
            firings += 1 + sum(1 for a, b in itertools.pairwise(ts) if b - a > gap_s)
        rows.append(
            Row(
                alertname=alertname,
                severity=severity,
                instances=tuple(sorted(_instance(s.labels) for s in members)),
                firings=firings,
                first_seen=min(min(s.timestamps) for s in members),
                last_seen=max(max(s.timestamps) for s in members),
                still_firing=sum(1 for s in members if _key(s.labels) in now_keys),
                paged=alertname in allowlist,
            )
        )
    return sorted(rows, key=lambda r: (r.severity, r.alertname))


def _clock(ts: float, zone: zoneinfo.ZoneInfo) -> str:
    return dt.datetime.fromtimestamp(ts, zone).strftime("%a %H:%M")


def report_text(namespace: str, name: str, night: Night, rows: Sequence[Row]) -> tuple[str, str]:
    """The report's summary (one line: counts per severity) and description (a line per alert: how
    often, where, first and last seen, still firing)."""
    zone = night.end.tzinfo
    assert isinstance(zone, zoneinfo.ZoneInfo)
    span = f"{night.start:%a %Y-%m-%d %H:%M} to {night.end:%a %H:%M} {zone.key}"
    by_severity: dict[str, int] = {}
    for r in rows:
        by_severity[r.severity] = by_severity.get(r.severity, 0) + r.firings
    counts = ", ".join(f"{s} {n}" for s, n in sorted(by_severity.items()))
    still = sum(r.still_firing for r in rows)
    firings = sum(by_severity.values())
    summary = (
        f"{namespace}/{name}: {len(rows)} alert{'s' if len(rows) != 1 else ''} fired {firings}x in the quiet "
        f"hours ({counts}){f', {still} still firing' if still else ''}"
    )
    lines = [f"Quiet hours {span}."]
    for r in rows[:MAX_ROWS]:
        shown = ", ".join(r.instances[:_SHOWN_INSTANCES])
        more = len(r.instances) - _SHOWN_INSTANCES
        where = shown + (f" and {more} more" if more > 0 else "")
        lines.append(
            f"[{r.severity}] {r.alertname}: fired {r.firings}x on {where}; "
            f"first {_clock(r.first_seen, zone)}, last {_clock(r.last_seen, zone)}"
            + (f"; STILL FIRING ({r.still_firing})" if r.still_firing else "")
            + ("; paged at night (allowlist)" if r.paged else "")
        )
    if len(rows) > MAX_ROWS:
        lines.append(
            f"... and {len(rows) - MAX_ROWS} more alerts (Prometheus: ALERTS{{training_job={name!r}}})"
        )
    return summary, "\n".join(lines)


def report_alert(
    namespace: str, name: str, night: Night, *, summary: str, description: str, now: float, until: float
) -> dict[str, Any]:
    """The postable alert (Alertmanager API v2) that carries the report, active until `until`."""
    return {
        "labels": {
            "alertname": MORNING_REPORT,
            "severity": SEVERITY,
            "namespace": namespace,
            "training_job": name,
            NIGHT_LABEL: night.key,
        },
        "annotations": {"summary": summary, "description": description},
        "startsAt": rfc3339(now),
        "endsAt": rfc3339(max(until, now + 3600.0)),
    }


# ---- the edge: Prometheus ---------------------------------------------------------------------------


class PrometheusQuery(Protocol):
    """What the report needs of prometheus_api_client.PrometheusConnect."""

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any: ...


def _selector(namespace: str, name: str) -> str:
    return f'ALERTS{{alertstate="firing",namespace={quoted(namespace)},training_job={quoted(name)}}}'


def parse_matrix(result: Any) -> list[Series]:
    """Series of a range-vector query's answer (`[{"metric": {...}, "values": [[t, "1"], ...]}]`)."""
    out = []
    for item in result or []:
        labels = {str(k): str(v) for k, v in (item.get("metric") or {}).items()}
        out.append(Series(labels, tuple(float(t) for t, _ in item.get("values") or [])))
    return out


def parse_vector(result: Any) -> list[dict[str, str]]:
    """Label sets of an instant query's answer (`[{"metric": {...}, "value": [t, "1"]}]`)."""
    return [{str(k): str(v) for k, v in (item.get("metric") or {}).items()} for item in result or []]


def query_night(
    prometheus: PrometheusQuery, namespace: str, name: str, night: Night, now: float
) -> tuple[list[Series], list[dict[str, str]]]:
    """The job's firing alerts over the night, each with its raw samples (a range vector evaluated at
    the night's end), and those firing at `now`."""
    end = night.end.timestamp()
    seconds = max(1, math.ceil(end - night.start.timestamp()))
    selector = _selector(namespace, name)
    history = prometheus.custom_query(f"{selector}[{seconds}s]", params={"time": f"{end:.3f}"})
    current = prometheus.custom_query(selector, params={"time": f"{now:.3f}"})
    return parse_matrix(history), parse_vector(current)
