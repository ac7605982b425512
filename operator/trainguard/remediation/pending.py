"""The pending signals: what the receiver answered 200 for and the planner has not decided yet, kept in
the monitor's `status.pendingSignals` so that a 200 means the signal will be acted on even when the
operator is killed, loses leadership or meets an API error before it plans (docs/p0-response.md).

Pure: entries from signals and back, the list with new signals added (one entry per fault) or decided
ones removed, and which entries the leader's pass plans again. The intake writes the list, the planner
removes from it, `passes.PendingPass` replays it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trainguard.api.monitor import PENDING_LABEL_VALUE_MAX, PENDING_LABELS_MAX, PENDING_SIGNALS_MAX
from trainguard.catalog.severity import PRIORITY, SEVERITY
from trainguard.remediation.model import Signal, Source
from trainguard.remediation.plan import record_id
from trainguard.remediation.signals import REQUIRED_LABELS
from trainguard.times import rfc3339, unix

Entry = dict[str, Any]

MAX = PENDING_SIGNALS_MAX
"""Entries per monitor. A signal that finds no room is refused (503): the sender retries once the
planner has drained the list, rather than a 200 for a signal that was not kept."""
LABEL_KEY_MAX = 128
FIRST_LABELS = (*REQUIRED_LABELS, PRIORITY, SEVERITY, "node", "gpu", "pod", "escalated_from")
"""Kept before any other label when an alert has more than PENDING_LABELS_MAX: what a plan reads."""


class NotRecorded(Exception):
    """The signals could not be made durable (an API error, no room): the receiver answers 503 with
    Retry-After, so that Alertmanager and the sidecar send them again."""


def pending_of(body: Mapping[str, Any] | None) -> list[Entry]:
    return [dict(e) for e in ((body or {}).get("status") or {}).get("pendingSignals") or []]


def _labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels within the status' bounds: the ones a plan reads first, then the rest by name."""
    fits = {k: v for k, v in labels.items() if len(k) <= LABEL_KEY_MAX and len(v) <= PENDING_LABEL_VALUE_MAX}
    order = [k for k in FIRST_LABELS if k in fits] + sorted(k for k in fits if k not in FIRST_LABELS)
    return {k: fits[k] for k in order[:PENDING_LABELS_MAX]}


def entry(signal: Signal, received: float) -> Entry:
    return {
        "id": record_id(signal),
        "alertname": signal.alertname,
        "severity": signal.severity,
        "labels": _labels(signal.labels),
        "fingerprint": signal.fingerprint,
        "source": str(signal.source),
        "startsAt": rfc3339(max(0.0, signal.starts_at)),
        "received": rfc3339(received),
    }


def signal_of(e: Mapping[str, Any]) -> Signal | None:
    """The firing signal an entry was made from (its record_id the entry's id); None for a damaged one."""
    try:
        return Signal(
            alertname=str(e["alertname"]),
            severity=str(e["severity"]),
            labels={str(k): str(v) for k, v in dict(e.get("labels") or {}).items()},
            fingerprint=str(e["fingerprint"]),
            source=Source(str(e["source"])),
            starts_at=unix(str(e["startsAt"])),
        )
    except (KeyError, ValueError, TypeError):
        return None


def with_signals(
    pending: Sequence[Entry], signals: Iterable[Signal], received: float
) -> tuple[list[Entry], list[Signal]]:
    """`pending` with `signals` added, and the signals there was no room for. One entry per fault: a
    signal whose fingerprint is pending already is covered by that entry (the other path's copy, a
    re-post, a second replica's), except that the copy that started earlier replaces it, keeping the
    entry's `received`: the earlier start is the safe one when a checkpoint from before the fault is
    chosen. The list is unchanged (equal) when every signal was covered."""
    out = [dict(e) for e in pending]
    refused: list[Signal] = []
    for s in signals:
        i = next((i for i, e in enumerate(out) if e.get("fingerprint") == s.fingerprint), None)
        if i is None:
            if len(out) >= MAX:
                refused.append(s)
            else:
                out.append(entry(s, received))
        elif s.starts_at < unix(str(out[i].get("startsAt", ""))):
            out[i] = entry(s, 0.0) | {"received": out[i].get("received") or rfc3339(received)}
    return out, refused


def without(pending: Sequence[Entry], signal: Signal, *, recorded: bool) -> list[Entry]:
    """`pending` less what deciding `signal` decided: its own entry, and when a record was saved for it,
    every entry of its fingerprint (planned now, each would be a duplicate of that record)."""
    rid = record_id(signal)
    return [
        dict(e)
        for e in pending
        if e.get("id") != rid and not (recorded and e.get("fingerprint") == signal.fingerprint)
    ]


def due(entries: Iterable[Mapping[str, Any]], now: float, grace_s: float) -> list[Signal]:
    """The signals of the entries received at least `grace_s` ago, oldest first: those the planner of
    the replica that answered 200 should have decided by now, and did not (killed, a standby since, an
    error). A damaged entry is left out."""
    old = sorted(
        ((unix(str(e.get("received", ""))), e) for e in entries),
        key=lambda item: item[0],
    )
    return [s for t, e in old if now - t >= grace_s and (s := signal_of(e)) is not None]
