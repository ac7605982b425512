"""Remediation first. The operator is one Python process: while an apply burst renders hundreds of
monitors on kopf's worker threads, the fast path's threads queue for the interpreter lock after every
request they make, and a cordon that takes half a second on a quiet operator took seconds
(bench/scale.py: up to 5.8 s at 2,000 monitors). From the moment a signal that may act arrives until
its record's cordon is done (or the planner decides it does nothing), a reconcile about to start
waits, so the fast path has the process, and the operator's share of the apiserver, to itself.

Bounded both ways, so that no signal can stall the reconciles: a hold lasts at most `hold_s`; a job
whose signals keep coming opens a hold at most once per `cooldown_s`; and after the gate has been
closed for `hold_s` in a row it stays open for as long, so reconciles get at least half the time
whatever arrives."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from trainguard.remediation.model import Phase, StepKind

HOLD_S = 5.0
"""The longest a hold keeps reconciles waiting (--remediation-first-seconds): the fast path cordons in
about half a second on a quiet operator, in a few when the apiserver is loaded."""
COOLDOWN_S = 30.0

Key = tuple[str, str]
"""(namespace, monitor name): the job a signal and its record concern."""


class Urgency:
    """Thread-safe: the receiver's threads and the detection pass begin holds, the planner and the
    record store end them, the reconciles wait on them."""

    def __init__(
        self,
        hold_s: float = HOLD_S,
        *,
        cooldown_s: float = COOLDOWN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.hold_s = hold_s
        self.cooldown_s = cooldown_s
        self.clock = clock
        self._cond = threading.Condition()
        self._holds: dict[Key, float] = {}
        """Live holds: their expiry."""
        self._opened: dict[Key, float] = {}
        """When each job last opened a hold (its cooldown)."""
        self._closed_since: float | None = None
        self._open_until = 0.0
        # what the operator's metrics read (controller/metrics.py's RemediationFirstCollector)
        self.holds = 0
        """Holds opened."""
        self.waits = 0
        """Reconciles and resyncs that found the gate closed and waited."""
        self.waited_s = 0.0
        """How long they waited in all."""
        self.forced_open = 0
        """Times the gate, closed for a whole hold, was opened for as long."""

    def begin(self, key: Key) -> None:
        """A signal of the job arrived that may act: hold the reconciles until `end(key)` or `hold_s`."""
        if self.hold_s <= 0:
            return
        with self._cond:
            now = self.clock()
            if now - self._opened.get(key, -float("inf")) < self.cooldown_s:
                return
            self._opened = {k: t for k, t in self._opened.items() if now - t < self.cooldown_s}
            self._opened[key] = now
            self._expire(now)
            self._holds[key] = now + self.hold_s
            self.holds += 1

    def end(self, key: Key) -> None:
        """The job's signal was decided without acting, or its record's cordon is done."""
        with self._cond:
            if self._holds.pop(key, None) is not None:
                self._expire(self.clock())
                self._cond.notify_all()

    def _expire(self, now: float) -> None:
        self._holds = {k: until for k, until in self._holds.items() if until > now}
        if not self._holds:  # the gate is open: the next hold closes it afresh
            self._closed_since = None

    def held(self) -> bool:
        """Whether a reconcile about to start waits now."""
        with self._cond:
            return self._held(self.clock())

    def _held(self, now: float) -> bool:
        self._expire(now)
        if not self._holds or now < self._open_until:
            return False
        if self._closed_since is None:
            self._closed_since = now
        if now - self._closed_since >= self.hold_s:  # closed for a whole hold: open for as long
            self._open_until = now + self.hold_s
            self._closed_since = None
            self.forced_open += 1
            return False
        return True

    def wait(self, poll_s: float = 0.05) -> float:
        """Block while held (at most `hold_s`); returns the seconds waited."""
        if self.hold_s <= 0:
            return 0.0
        started = time.monotonic()
        with self._cond:
            if not self._held(self.clock()):
                return 0.0
            while time.monotonic() - started < self.hold_s:
                self._cond.wait(poll_s)
                if not self._held(self.clock()):
                    break
            waited = time.monotonic() - started
            self.waits += 1
            self.waited_s += waited
        return waited


def cordon_pending(record: dict[str, Any] | None) -> bool:
    """Whether the record still has a cordon to make: its hold lasts until then."""
    return record is not None and any(
        s.get("kind") == StepKind.CORDON and s.get("phase") in (Phase.PLANNED, Phase.IN_PROGRESS)
        for s in record.get("steps") or []
    )
