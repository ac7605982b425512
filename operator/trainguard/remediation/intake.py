"""Signals in: the receiver's request threads hand over what Alertmanager and the sidecars post, and the
operator's own detection adds what it sees. Quick by design: a firing signal is queued for the one
planning thread, and a sidecar's P0 is paged into Alertmanager at once, off the request's thread."""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from concurrent.futures import Executor

from trainguard.clients import alertmanager
from trainguard.remediation import paging
from trainguard.remediation.model import Signal

log = logging.getLogger("trainguard.remediation")

QUEUE_SIZE = 10_000


class Pager:
    """Posts a sidecar's P0 into Alertmanager, so people are paged within seconds of the fault rather
    than after a scrape and an evaluation (remediation/paging.py)."""

    def __init__(self, alertmanager_url: str, clock: Callable[[], float] = time.time) -> None:
        self.alertmanager_url = alertmanager_url
        self.clock = clock

    def wants(self, signal: Signal) -> bool:
        return paging.page_alert(signal, self.clock()) is not None

    def page(self, signal: Signal) -> None:
        alert = paging.page_alert(signal, self.clock())
        if alert is None:
            return
        try:
            alertmanager.post_alerts(self.alertmanager_url, [alert], clock=self.clock)
        except alertmanager.AlertmanagerError as exc:
            log.warning("cannot page %s of %s/%s through Alertmanager (the rule's alert still will): %s",
                        signal.alertname, signal.namespace, signal.training_job, exc)  # fmt: skip


class Intake:
    def __init__(self, pool: Executor, pager: Pager | None = None, size: int = QUEUE_SIZE) -> None:
        self.queue: queue.Queue[Signal] = queue.Queue(maxsize=size)
        self.pool = pool
        self.pager = pager

    def submit(self, signals: list[Signal]) -> None:
        for s in signals:
            if s.firing:
                self.queue.put_nowait(s)
                if self.pager is not None and self.pager.wants(s):
                    # off the receiver's thread: a slow Alertmanager must not hold the sidecar's post
                    self.pool.submit(self.pager.page, s)

    def next(self, timeout: float) -> Signal | None:
        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            return None
