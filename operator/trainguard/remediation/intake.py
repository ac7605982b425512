"""Signals in: the receiver's request threads hand over what Alertmanager and the sidecars post, and the
operator's own detection adds what it sees. A firing signal is queued for the one planning thread, and a
sidecar's P0 is paged into Alertmanager at once, off the request's thread.

What the receiver hands over is made durable first (`Intake.receive`): every signal that could be acted
on is written to its monitor's `status.pendingSignals`, one status patch per monitor, under the
monitor's lock, before the receiver answers 200; a failed write raises `pending.NotRecorded` (503). A
signal `plan.triage` drops on the monitor in the watch cache costs no write and is not queued."""

from __future__ import annotations

import logging
import queue
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, Protocol

from trainguard.api import monitor_of
from trainguard.catalog.severity import GRADE
from trainguard.clients import alertmanager
from trainguard.remediation import paging, pending
from trainguard.remediation.model import Signal
from trainguard.remediation.plan import triage
from trainguard.remediation.store import RecordStore
from trainguard.remediation.urgency import Key, Urgency

log = logging.getLogger("trainguard.remediation")

QUEUE_SIZE = 10_000


class Pager:
    """Posts a sidecar's P0 into Alertmanager, so people are paged within seconds of the fault rather
    than after a scrape and an evaluation (remediation/paging.py)."""

    def __init__(
        self, alertmanager_url: str, clock: Callable[[], float] = time.time, severity_style: str = GRADE
    ) -> None:
        self.alertmanager_url = alertmanager_url
        self.clock = clock
        self.severity_style = severity_style
        """The platform's severity style (catalog/severity.py): the page's severity label is written in it."""

    def wants(self, signal: Signal) -> bool:
        return paging.page_alert(signal, self.clock()) is not None

    def page(self, signal: Signal) -> None:
        alert = paging.page_alert(signal, self.clock())
        if alert is None:
            return
        try:
            alertmanager.post_alerts(
                self.alertmanager_url, [alert], clock=self.clock, severity_style=self.severity_style
            )
        except alertmanager.AlertmanagerError as exc:
            log.warning("cannot page %s of %s/%s through Alertmanager (the rule's alert still will): %s",
                        signal.alertname, signal.namespace, signal.training_job, exc)  # fmt: skip


class MonitorCache(Protocol):
    """kube.ClusterCache's monitors of a namespace."""

    def monitors_in(self, namespace: str, timeout: float | None = None) -> list[dict[str, Any]]: ...


class Intake:
    def __init__(
        self,
        pool: Executor,
        pager: Pager | None = None,
        size: int = QUEUE_SIZE,
        *,
        store: RecordStore | None = None,
        monitors: MonitorCache | None = None,
        clock: Callable[[], float] = time.time,
        urgency: Urgency | None = None,
    ) -> None:
        """`store` and `monitors` make `receive` durable; without them it only queues. `urgency` is held
        for each job a firing signal arrives for (remediation/urgency.py)."""
        self.urgency = urgency
        self.queue: queue.Queue[Signal] = queue.Queue(maxsize=size)
        self.pool = pool
        self.pager = pager
        self.store = store
        self.monitors = monitors
        self.clock = clock

    def submit(self, signals: list[Signal]) -> None:
        """Queue the firing signals for the planner (and page a sidecar's P0): the detection pass's,
        which finds the same faults again each pass."""
        self._hold(signals)
        self.replay(signals)
        self._page(signals)

    def replay(self, signals: list[Signal]) -> None:
        """Queue the firing signals for the planner, nothing more: the pending signals planned again
        (paged, where they were, when they came in)."""
        for s in signals:
            if s.firing:
                self.queue.put_nowait(s)

    def receive(self, signals: list[Signal]) -> None:
        """The receiver's hand-over: page, record the signals that could be acted on in their monitors'
        status (raises pending.NotRecorded when that fails), then queue them for the planner."""
        self._page(signals)
        self._hold(signals)
        kept: list[Signal] = []
        try:
            kept = self.record(signals)
        finally:
            if self.urgency is not None:  # nothing to plan for the others: their jobs are not held
                for key in {_key(s) for s in signals} - {_key(s) for s in kept}:
                    self.urgency.end(key)
        for s in kept:
            self.queue.put_nowait(s)

    def _hold(self, signals: list[Signal]) -> None:
        if self.urgency is not None:
            for key in sorted({_key(s) for s in signals if s.firing}):
                self.urgency.begin(key)

    def record(self, signals: list[Signal]) -> list[Signal]:
        """Write the firing signals that could be acted on to their monitors' status.pendingSignals; returns
        the signals to plan. A monitor the watch cache does not know (gone, or never there) or holds
        invalid has nothing to do: the cache knows a monitor long before its rules or sidecars can
        send anything."""
        firing = [s for s in signals if s.firing]
        if self.store is None or self.monitors is None:
            return firing
        by_monitor: dict[tuple[str, str], list[Signal]] = {}
        for s in firing:
            by_monitor.setdefault((s.namespace, s.training_job), []).append(s)
        keep: list[Signal] = []
        for (ns, name), group in sorted(by_monitor.items()):
            try:
                cached = next((m for m in self.monitors.monitors_in(ns) if _name(m) == name), None)
            except Exception as exc:  # NotSynced: the cache cannot say yet
                raise pending.NotRecorded(f"the monitors of {ns} cannot be read yet: {exc}") from exc
            monitor = monitor_of(cached) if cached is not None else None
            if monitor is None:
                continue
            relevant: list[Signal] = []
            dropped: Counter[tuple[str, str]] = Counter()
            for s in group:
                reason = triage(s, monitor)
                if reason is None:
                    relevant.append(s)
                else:
                    dropped[(s.alertname, reason)] += 1
            for (alertname, reason), n in sorted(dropped.items()):  # one line per kind, not per alert
                log.info("%s for %s/%s: %s%s", alertname, ns, name, reason, f" (x{n})" if n > 1 else "")
            if relevant:
                keep += self._write(ns, name, relevant)
        return keep

    def _write(self, ns: str, name: str, signals: list[Signal]) -> list[Signal]:
        assert self.store is not None
        try:
            with self.store.lock(ns, name):
                body = self.store.api.get_monitor(ns, name)
                if body is None:
                    return []  # deleted since the cache saw it: nothing to do
                current = pending.pending_of(body)
                updated, refused = pending.with_signals(current, signals, self.clock())
                if refused:
                    raise pending.NotRecorded(
                        f"{ns}/{name} holds {len(current)} pending signals, the most it keeps; retry"
                    )
                if updated != current:
                    self.store.api.patch_status("trainingjobmonitors", ns, name, {"pendingSignals": updated})
        except pending.NotRecorded:
            raise
        except Exception as exc:
            raise pending.NotRecorded(f"cannot record the signals of {ns}/{name}: {exc}") from exc
        return signals

    def _page(self, signals: list[Signal]) -> None:
        if self.pager is None:
            return
        for s in signals:
            if s.firing and self.pager.wants(s):
                # off the receiver's thread: a slow Alertmanager must not hold the sidecar's post
                self.pool.submit(self.pager.page, s)

    def next(self, timeout: float) -> Signal | None:
        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            return None


def _name(body: dict[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("name") or "")


def _key(signal: Signal) -> Key:
    return signal.namespace, signal.training_job
