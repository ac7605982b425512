"""A small client of Alertmanager's API v2, standard library only.

The operator posts its own P0s (TrainingInterrupted, GPUNodeDown from node state) and its notices
(storm guard, budget) here, so that they are routed, grouped, silenced and inhibited like every other
alert; and it reads alerts back with their silence and inhibition state, which is what escalation
decides on: an acknowledged (silenced) or inhibited P1 is not escalated.

Alertmanager forgets a posted alert without an end after its resolve_timeout (5m by default): keep
posting a fault that still holds on every pass, and post a resolved signal (endsAt now) when it ends.
Every call has a timeout, and every failure is an `AlertmanagerError` naming the URL and the status.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from trainguard.catalog.severity import GRADE, styled
from trainguard.times import parse_rfc3339, rfc3339

DEFAULT_TIMEOUT = 5.0
"""Seconds one API call may take: a hung Alertmanager must not hold the operator's pass."""
_DETAIL_MAX = 300


class AlertmanagerError(Exception):
    """A call to Alertmanager failed: an HTTP error (`status` set), no answer in time or at all
    (`status` None), or an answer that is not what API v2 returns."""

    def __init__(self, method: str, url: str, status: int | None, detail: str) -> None:
        self.method = method
        self.url = url
        self.status = status
        self.detail = detail
        what = f"HTTP {status}" if status is not None else "no answer"
        super().__init__(f"{method} {url}: {what}" + (f": {detail}" if detail else ""))


@dataclass(frozen=True)
class AlertStatus:
    """One alert as Alertmanager holds it (GET /api/v2/alerts)."""

    labels: dict[str, str]
    annotations: dict[str, str]
    state: str
    """"active", "suppressed" (silenced or inhibited) or "unprocessed"."""
    silenced_by: tuple[str, ...]
    """Ids of the silences that match it: an acknowledgement (`trainguard ack`) is one."""
    inhibited_by: tuple[str, ...]
    """Alertmanager fingerprints of the firing alerts that inhibit it."""
    starts_at: float
    fingerprint: str
    """Alertmanager's fingerprint (of all the labels), not trainguard's."""

    @property
    def muted(self) -> bool:
        """Silenced or inhibited: nobody was notified, or somebody has acknowledged it."""
        return bool(self.silenced_by or self.inhibited_by)


class Firing(Protocol):
    """An alert instance to post (remediation.model.Signal is one)."""

    @property
    def labels(self) -> dict[str, str]: ...

    @property
    def annotations(self) -> dict[str, str]: ...

    @property
    def starts_at(self) -> float: ...

    @property
    def firing(self) -> bool: ...


def alert_body(signal: Firing, now: float, generator_url: str = "") -> dict[str, Any]:
    """A postable alert (API v2) for a signal. A firing one has no end, so Alertmanager resolves it by
    itself once it is no longer posted; a resolved one ends now. Empty labels are left out (an empty
    label is an absent one, and Alertmanager would keep it apart from the same alert without it)."""
    body: dict[str, Any] = {
        "labels": {k: v for k, v in signal.labels.items() if v},
        "annotations": {k: v for k, v in signal.annotations.items() if v},
        "startsAt": rfc3339(min(signal.starts_at, now)),
    }
    if not signal.firing:
        body["endsAt"] = rfc3339(now)
    if generator_url:
        body["generatorURL"] = generator_url
    return body


def matcher(name: str, value: str) -> str:
    """An equality matcher in Alertmanager's syntax, the value quoted and escaped as its parser
    reads it (backslash, double quote, newline)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'{name}="{escaped}"'


def _call(method: str, url: str, body: Any, timeout: float) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:_DETAIL_MAX].decode(errors="replace").strip()
        raise AlertmanagerError(method, url, exc.code, detail) from None
    except (OSError, http.client.HTTPException) as exc:  # refused, timed out, unreachable, cut off
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise AlertmanagerError(method, url, None, str(reason) or type(exc).__name__) from None
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise AlertmanagerError(method, url, 200, f"not JSON: {raw[:80]!r}") from None


def _url(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + path


def post_alerts(
    base_url: str,
    alerts: Iterable[Firing | Mapping[str, Any]],
    *,
    generator_url: str = "",
    timeout: float = DEFAULT_TIMEOUT,
    clock: Callable[[], float] = time.time,
    severity_style: str = GRADE,
) -> int:
    """POST /api/v2/alerts: signals (see `alert_body`) and ready-made postable alerts (labels,
    annotations, startsAt, endsAt, generatorURL) in one call; returns how many were posted. Nothing to
    post makes no call. A `severity` that is a grade (P0..P3, as the operator builds labels) is written
    in `severity_style`, the platform's (catalog/severity.styled): every alert the operator posts looks
    like its rules'."""
    now = clock()
    body = [dict(a) if isinstance(a, Mapping) else alert_body(a, now, generator_url) for a in alerts]
    for a in body:
        if isinstance(a.get("labels"), Mapping):
            a["labels"] = styled(a["labels"], severity_style)
    if not body:
        return 0
    _call("POST", _url(base_url, "/api/v2/alerts"), body, timeout)
    return len(body)


def _strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value or {}).items()} if isinstance(value, dict) else {}


def _status(raw: Any, url: str) -> AlertStatus:
    if not isinstance(raw, dict) or not isinstance(raw.get("status"), dict):
        raise AlertmanagerError("GET", url, 200, f"not an alert: {str(raw)[:80]}")
    status = raw["status"]
    try:
        starts_at = parse_rfc3339(str(raw.get("startsAt", "")))
    except (ValueError, OverflowError) as exc:
        raise AlertmanagerError("GET", url, 200, f"startsAt: {exc}") from None
    return AlertStatus(
        labels=_strings(raw.get("labels")),
        annotations=_strings(raw.get("annotations")),
        state=str(status.get("state", "")),
        silenced_by=tuple(str(s) for s in status.get("silencedBy") or ()),
        inhibited_by=tuple(str(s) for s in status.get("inhibitedBy") or ()),
        starts_at=starts_at,
        fingerprint=str(raw.get("fingerprint", "")),
    )


def raw_alerts(
    base_url: str, filter_labels: Mapping[str, str], *, timeout: float = DEFAULT_TIMEOUT
) -> tuple[str, list[dict[str, Any]]]:
    """GET /api/v2/alerts?filter=...: the URL asked and Alertmanager's own alert objects (labels,
    annotations, startsAt, endsAt, status: state, silencedBy, inhibitedBy), for remediation.escalation."""
    query = urllib.parse.urlencode({"filter": [matcher(k, v) for k, v in filter_labels.items()]}, doseq=True)
    url = _url(base_url, "/api/v2/alerts") + (f"?{query}" if query else "")
    answer = _call("GET", url, None, timeout)
    if not isinstance(answer, list):
        raise AlertmanagerError("GET", url, 200, f"expected a list, got {str(answer)[:80]}")
    return url, [a for a in answer if isinstance(a, dict)]


def active_alerts(
    base_url: str, filter_labels: Mapping[str, str], *, timeout: float = DEFAULT_TIMEOUT
) -> list[AlertStatus]:
    """GET /api/v2/alerts?filter=...: the alerts not yet resolved whose labels equal `filter_labels`,
    silenced and inhibited ones included (see `AlertStatus.muted`)."""
    url, answer = raw_alerts(base_url, filter_labels, timeout=timeout)
    return [_status(a, url) for a in answer]


def create_silence(
    base_url: str,
    matchers: Mapping[str, str],
    starts: float,
    ends: float,
    *,
    created_by: str,
    comment: str,
    timeout: float = DEFAULT_TIMEOUT,
) -> str:
    """POST /api/v2/silences with equality matchers; returns the new silence's id. An acknowledgement
    says who and why, so an empty `created_by` or `comment` is refused here (ValueError): Alertmanager
    0.25 takes both empty. Alertmanager refuses an end before the start or in the past (400), no
    matchers (422), and matchers that all match the empty string (400)."""
    if not created_by.strip() or not comment.strip():
        raise ValueError("a silence needs created_by and comment (who acknowledged it, and why)")
    url = _url(base_url, "/api/v2/silences")
    body = {
        "matchers": [{"name": k, "value": v, "isRegex": False, "isEqual": True} for k, v in matchers.items()],
        "startsAt": rfc3339(starts),
        "endsAt": rfc3339(ends),
        "createdBy": created_by,
        "comment": comment,
    }
    answer = _call("POST", url, body, timeout)
    if not isinstance(answer, dict) or not isinstance(answer.get("silenceID"), str):
        raise AlertmanagerError("POST", url, 200, f"no silenceID in {str(answer)[:80]}")
    return str(answer["silenceID"])
