"""Escalation, decided from what Alertmanager shows rather than by a copied rule.

A P1 that Alertmanager still shows active, neither silenced (acknowledged: `trainguard ack` creates the
silence) nor inhibited, `after` past the moment it fired, is re-posted as a P0 copy with
`escalated_from="P1"`. A copied Prometheus rule could not see silences or inhibitions, so it paged for
alerts someone had acknowledged, or that were inhibited and never notified.

Pure functions over Alertmanager API v2 alert objects (GET /api/v2/alerts: labels, annotations,
startsAt, endsAt, fingerprint, status {state, silencedBy, inhibitedBy}); they return API v2 postable
alerts (POST /api/v2/alerts). The operator's periodic pass, per monitor:

    alerts = GET /api/v2/alerts?filter=namespace="NS"&filter=training_job="NAME"
    POST due(...) mapped through escalated(...), and ended(...)

A copy is posted with an `endsAt` COPY_TTL_S ahead and posted again while its P1 stays escalatable
(`due` returns that P1 again once the copy has less than REFRESH_S left), so a copy outlives the pass
that posted it only by its TTL: an operator that stops, or a P1 that resolves, leaves no P0 paging for
long. `ended` resolves a copy at once when its P1 is gone, acknowledged or inhibited.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainguard.api.common import duration_seconds, format_duration
from trainguard.api.policy import Escalation
from trainguard.catalog.severity import GRADE, PRIORITY, SEVERITY, grade_of
from trainguard.times import parse_rfc3339

ESCALATED_FROM = "escalated_from"
ESCALATED_SEVERITY = "P0"
ESCALATES = "P1"
COPY_TTL_S = 600.0
"""How far ahead a copy's endsAt is set: Alertmanager resolves a copy no pass refreshed by then."""
REFRESH_S = 300.0
"""A copy with less than this left is posted again. The escalation pass must run more often than
COPY_TTL_S - REFRESH_S, or a copy lapses (resolves) between two passes."""

Alert = dict[str, Any]
"""An Alertmanager API v2 alert: gettable (read back) or postable (to post)."""


@dataclass(frozen=True)
class Settings:
    """The policy's escalation settings as the pass uses them."""

    enabled: bool = True
    after_s: float = 900.0


def settings(escalation: Escalation) -> Settings:
    """From the effective policy's `escalation` (enabled, after)."""
    return Settings(enabled=escalation.enabled, after_s=duration_seconds(escalation.after))


def parse_time(text: Any) -> float | None:
    """Unix seconds of an RFC 3339 time as Alertmanager writes it; None when absent, Go's zero time or
    not a time (such an alert is left alone, never escalated at once)."""
    if not isinstance(text, str) or not text or text.startswith("0001-01-01"):
        return None
    try:
        return parse_rfc3339(text)
    except (ValueError, OverflowError):
        return None


def format_time(seconds: float) -> str:
    """Unix seconds as RFC 3339 UTC with milliseconds, the form Alertmanager accepts."""
    moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _labels(alert: Mapping[str, Any]) -> dict[str, str]:
    labels = alert.get("labels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def is_copy(alert: Mapping[str, Any]) -> bool:
    """An escalated copy (this module posted it), not an alert of its own."""
    return ESCALATED_FROM in _labels(alert)


def _identity(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """What a P1 and its copy share: every label but the grade's (priority, severity) and escalated_from."""
    return tuple(sorted((k, v) for k, v in labels.items() if k not in (PRIORITY, SEVERITY, ESCALATED_FROM)))


def _of_monitor(alert: Mapping[str, Any], namespace: str, training_job: str) -> bool:
    labels = _labels(alert)
    return labels.get("namespace") == namespace and labels.get("training_job") == training_job


def _unacknowledged(alert: Mapping[str, Any], copies: set[str]) -> bool:
    """Active in Alertmanager: routed (not `unprocessed`), no silence, no inhibition. An inhibition by
    an escalated copy does not count: a copy is a P0 of the job, and the job's P0-mutes-P1 rule would
    otherwise make the copy inhibit its own P1 and resolve itself on the next pass."""
    status = alert.get("status")
    if not isinstance(status, dict):
        return False
    state = status.get("state")
    if status.get("silencedBy"):
        return False
    inhibitors = [str(f) for f in status.get("inhibitedBy") or []]
    if any(f not in copies for f in inhibitors):
        return False
    if state == "active":
        return True
    # suppressed only by copies; any other suppression (one this version does not list) counts
    return state == "suppressed" and bool(inhibitors)


def _escalatable(
    alerts: list[Alert], escalation: Settings, now: float, namespace: str, training_job: str
) -> list[Alert]:
    """The monitor's P1s that should be escalated now, whether or not a copy is already posted."""
    if not escalation.enabled:
        return []
    copies = {str(a.get("fingerprint")) for a in alerts if is_copy(a) and a.get("fingerprint")}
    out = []
    for a in alerts:
        labels = _labels(a)
        if is_copy(a) or grade_of(labels) != ESCALATES or not _of_monitor(a, namespace, training_job):
            continue
        started = parse_time(a.get("startsAt"))
        if started is None or now - started < escalation.after_s:
            continue
        if _unacknowledged(a, copies):
            out.append(a)
    return out


def due(
    alerts: list[Alert],
    escalation: Settings,
    now: float,
    *,
    namespace: str,
    training_job: str,
    refresh_s: float = REFRESH_S,
) -> list[Alert]:
    """The monitor's P1 alerts to post an escalated copy of now: active, not silenced, not inhibited,
    fired at least `after` ago, and not already escalated by a copy that stays up past `refresh_s`
    (a copy read back without endsAt counts as ending: posting it again is harmless, letting it lapse
    would resolve it and page anew)."""
    copies_end = {
        _identity(_labels(a)): parse_time(a.get("endsAt"))
        for a in alerts
        if is_copy(a) and _of_monitor(a, namespace, training_job)
    }
    out = []
    for a in _escalatable(alerts, escalation, now, namespace, training_job):
        key = _identity(_labels(a))
        if key in copies_end:
            ends = copies_end[key]
            if ends is not None and ends - now > refresh_s:
                continue  # a copy with no known end is posted again: that only moves its endsAt
        out.append(a)
    return out


def _postable(alert: Mapping[str, Any]) -> Alert:
    out: Alert = {
        "labels": _labels(alert),
        "annotations": {str(k): str(v) for k, v in (alert.get("annotations") or {}).items()},
    }
    for field in ("startsAt", "endsAt", "generatorURL"):
        if alert.get(field):
            out[field] = alert[field]
    return out


def copy_severity(labels: Mapping[str, str], severity_style: str) -> str:
    """The copy's `severity`: P0 in the grade style. In the mapped style its P1's own (warning), not
    critical: kube-prometheus-stack's critical-mutes-warning rule (equal namespace and alertname) would
    let one job's copy mute the same P1 of every other job in the namespace, and their copies in turn
    resolve this one. trainguard's routes page the copy on its priority (docs/severity.md)."""
    if severity_style == GRADE:
        return ESCALATED_SEVERITY
    return labels.get(SEVERITY) or ESCALATES


def escalated(
    alert: Mapping[str, Any],
    escalation: Settings,
    now: float,
    ttl_s: float = COPY_TTL_S,
    *,
    severity_style: str = GRADE,
) -> Alert:
    """The P0 copy of a due P1 to post: its labels with priority P0, escalated_from P1 and the
    severity of `copy_severity`, its annotations with the summary prefixed by the delay. Same labels on
    every pass, so Alertmanager keeps one alert and only moves its endsAt.

    startsAt is the P1's, the fault's start, not when the delay ran out: the copy reaches the operator's
    receiver through Alertmanager's webhook, and what is decided from a signal's start is decided from
    it (a non-finite loss pins the newest checkpoint saved before it, the record id, a duplicate's
    window). Alertmanager keeps the startsAt posted (the earliest, when an alert of the same labels is
    posted again while it is active), so the copy of one P1 has one start on every pass: one record
    id."""
    labels = _labels(alert)
    annotations = {str(k): str(v) for k, v in (alert.get("annotations") or {}).items()}
    summary = annotations.get("summary") or labels.get("alertname", "alert")
    annotations["summary"] = f"[escalated after {format_duration(escalation.after_s)}] {summary}"
    started = parse_time(alert.get("startsAt"))
    starts = now if started is None else min(now, started)
    copy: Alert = {
        "labels": labels
        | {
            PRIORITY: ESCALATED_SEVERITY,
            SEVERITY: copy_severity(labels, severity_style),
            ESCALATED_FROM: grade_of(labels) or ESCALATES,
        },
        "annotations": annotations,
        "startsAt": format_time(starts),
        "endsAt": format_time(now + ttl_s),
    }
    if alert.get("generatorURL"):
        copy["generatorURL"] = alert["generatorURL"]
    return copy


def ended(
    alerts: list[Alert], escalation: Settings, now: float, *, namespace: str, training_job: str
) -> list[Alert]:
    """The monitor's escalated copies to resolve now (posted with endsAt = now): their P1 resolved,
    was acknowledged or inhibited, or escalation was turned off."""
    keep = {_identity(_labels(a)) for a in _escalatable(alerts, escalation, now, namespace, training_job)}
    return [
        _postable(a) | {"endsAt": format_time(now)}
        for a in _copies(alerts, namespace, training_job)
        if _identity(_labels(a)) not in keep
    ]


def _copies(alerts: Iterable[Alert], namespace: str, training_job: str) -> list[Alert]:
    return [a for a in alerts if is_copy(a) and _of_monitor(a, namespace, training_job)]


ACK_FOR = "4h"
"""How long `trainguard ack` silences an alert unless told otherwise."""


def ack_matchers(alertname: str, namespace: str, training_job: str) -> dict[str, str]:
    """What an acknowledgement silences: the alert of one monitor by name, namespace and job, whatever
    its grade, so it mutes the P1, keeps it from escalating and mutes a copy already posted."""
    return {"alertname": alertname, "namespace": namespace, "training_job": training_job}


def ack_comment(by: str, now: float, comment: str = "") -> str:
    """The silence's comment: who acknowledged it and when (createdBy says who as well)."""
    note = f"acknowledged with trainguard ack by {by} at {format_time(now)}"
    return f"{note}: {comment}" if comment else note
