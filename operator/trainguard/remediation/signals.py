"""Signals from the wire: Alertmanager's webhook payload and the sidecars' fast-path events, checked
field by field and turned into `Signal`s.

The sender's fingerprint is never trusted: it is recomputed from the labels, over the alert's
identifying (scope) labels only, so one fault reaching the operator by both paths has one fingerprint
even where the two carry different extra labels (the sidecar's `node` on a job-scoped stall, the
`prometheus`/`instance`/`job` labels Prometheus adds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from trainguard.catalog import ALERTS_BY_NAME
from trainguard.catalog.events import fingerprint
from trainguard.catalog.severity import PRIORITY, SEVERITY, grade_of
from trainguard.remediation.model import Signal, Source
from trainguard.times import parse_rfc3339

REQUIRED_LABELS: tuple[str, ...] = ("alertname", "namespace", "training_job")
"""Labels every signal carries; besides them, its grade in `priority` or (older senders) `severity`."""
ALERTMANAGER_VERSION = "4"
_STATUSES = {"firing": True, "resolved": False}


class PayloadError(ValueError):
    """A body that is not what the sender promised; the message names the field (the 400 reason)."""


def signal_fingerprint(labels: Mapping[str, str]) -> str:
    """catalog.events.fingerprint over the alert's identifying labels only. A catalogue alert keeps
    its scope's labels (a job-scoped alert drops `node` and `gpu`, which one rank's sidecar adds
    and Prometheus's job-wide rule does not); an alert outside the catalogue keeps them all."""
    alert = ALERTS_BY_NAME.get(labels.get("alertname", ""))
    if alert is None:
        return fingerprint(labels)
    keep = {"alertname", *alert.scope.labels}
    return fingerprint({k: v for k, v in labels.items() if k in keep})


def _string_map(value: Any, path: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise PayloadError(f"{path}: expected an object, got {_kind(value)}")
    for k, v in value.items():
        if not isinstance(v, str):
            raise PayloadError(f"{path}.{k}: expected a string, got {_kind(v)}")
    return dict(value)


def _labels(value: Any, path: str) -> dict[str, str]:
    if value is None:
        raise PayloadError(f"{path}: missing")
    labels = _string_map(value, path)
    for name in REQUIRED_LABELS:
        if name not in labels:
            raise PayloadError(f"{path}.{name}: missing")
        if not labels[name]:
            raise PayloadError(f"{path}.{name}: empty")
    if not grade_of(labels):
        raise PayloadError(
            f"{path}.{PRIORITY}: missing, and no {SEVERITY} either (the alert's grade, P0..P3)"
        )
    return labels


def _annotations(value: Any, path: str) -> dict[str, str]:
    return {} if value is None else _string_map(value, path)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list"}.get(
        type(value), "an object"
    )


def _starts_at_rfc3339(value: Any, path: str, now: float) -> float:
    if value is None:
        return now
    if not isinstance(value, str):
        raise PayloadError(f"{path}: expected an RFC 3339 string, got {_kind(value)}")
    if value.startswith("0001-01-01"):  # Go's zero time: not set
        return now
    try:
        return _not_future(parse_rfc3339(value), now)
    except (ValueError, OverflowError) as exc:
        raise PayloadError(f"{path}: {exc}") from None


def _starts_at_unix(value: Any, path: str, now: float) -> float:
    if value is None:
        return now
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PayloadError(f"{path}: expected unix seconds, got {_kind(value)}")
    if not math.isfinite(value) or value < 0:
        raise PayloadError(f"{path}: expected unix seconds, got {value!r}")
    return _not_future(float(value), now)


def _not_future(starts_at: float, now: float) -> float:
    # A sender whose clock runs ahead would date the fault later than it was; the earlier time is the
    # safe one when a checkpoint saved before the fault is chosen.
    return min(starts_at, now)


def from_alertmanager(payload: Any, now: float) -> list[Signal]:
    """Alertmanager's webhook body (version 4) -> one Signal per alert, resolved ones included
    (firing=False). An empty `alerts` list is refused: there is nothing to authorise it against."""
    if not isinstance(payload, dict):
        raise PayloadError(f"body: expected an object, got {_kind(payload)}")
    version = payload.get("version")
    if version != ALERTMANAGER_VERSION:
        raise PayloadError(f"version: expected {ALERTMANAGER_VERSION!r}, got {version!r}")
    alerts = payload.get("alerts")
    if alerts is None:
        raise PayloadError("alerts: missing")
    if not isinstance(alerts, list):
        raise PayloadError(f"alerts: expected a list, got {_kind(alerts)}")
    if not alerts:
        raise PayloadError("alerts: empty")
    out = []
    for i, alert in enumerate(alerts):
        path = f"alerts[{i}]"
        if not isinstance(alert, dict):
            raise PayloadError(f"{path}: expected an object, got {_kind(alert)}")
        status = alert.get("status")
        if status not in _STATUSES:
            raise PayloadError(f"{path}.status: expected 'firing' or 'resolved', got {status!r}")
        labels = _labels(alert.get("labels"), f"{path}.labels")
        out.append(
            Signal(
                alertname=labels["alertname"],
                severity=grade_of(labels),
                labels=labels,
                fingerprint=signal_fingerprint(labels),
                source=Source.ALERTMANAGER,
                starts_at=_starts_at_rfc3339(alert.get("startsAt"), f"{path}.startsAt", now),
                firing=_STATUSES[status],
                annotations=_annotations(alert.get("annotations"), f"{path}.annotations"),
            )
        )
    return out


def from_fastpath(event: Any, now: float) -> Signal:
    """One sidecar fast-path event (exporter.fastpath.event) -> a firing Signal."""
    if not isinstance(event, dict):
        raise PayloadError(f"body: expected an object, got {_kind(event)}")
    source = event.get("source", Source.SIDECAR.value)
    if source != Source.SIDECAR.value:
        raise PayloadError(f"source: expected 'sidecar', got {source!r}")
    labels = _labels(event.get("labels"), "labels")
    return Signal(
        alertname=labels["alertname"],
        severity=grade_of(labels),
        labels=labels,
        fingerprint=signal_fingerprint(labels),
        source=Source.SIDECAR,
        starts_at=_starts_at_unix(event.get("startsAt"), "startsAt", now),
        annotations=_annotations(event.get("annotations"), "annotations"),
    )
