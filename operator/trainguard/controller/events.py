"""Which Events this process posted lately, so that one said twice is posted once.

The reconcile and the pod-count pass both announce pods without an exporter when they find more than the
status records; the pass reads the watch cache, which may not yet hold the count the reconcile just wrote,
and would post the same Warning again. Kubernetes' own EventRecorder aggregates repeats in the same way."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

REPEAT_WINDOW_S = 60.0
"""How long an Event just posted is not posted again, for the same object, reason and message: longer
than a watch cache lags, short enough that a failure come back a minute later is said again."""

Key = tuple[str, str, str]


class RecentEvents:
    def __init__(
        self, window_s: float = REPEAT_WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window_s = window_s
        self.clock = clock
        self._posted: dict[Key, float] = {}
        self._guard = threading.Lock()

    def first(self, uid: str, reason: str, message: str) -> bool:
        """Whether this Event is new within the window (and is now remembered as posted). An object with no
        uid is not told apart from another: its Events are always new."""
        if not uid:
            return True
        now, key = self.clock(), (uid, reason, message)
        with self._guard:
            self._posted = {k: t for k, t in self._posted.items() if now - t < self.window_s}
            if key in self._posted:
                return False
            self._posted[key] = now
            return True

    def clear(self) -> None:
        """Nothing remembered (a test's fresh start: the memory is the process's)."""
        with self._guard:
            self._posted.clear()

    def forget(self, uid: str, reason: str, message: str) -> None:
        """A post that failed: the next one is tried."""
        with self._guard:
            self._posted.pop((uid, reason, message), None)


RECENT_EVENTS = RecentEvents()
"""The operator process's: every announcer posts through it."""
