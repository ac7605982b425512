"""Training time lost in a pod, as the SDK's reports show it: gaps between steps far beyond the typical
step time (a stall, seen before and without any alert) and time the trainer was blocked writing
checkpoints (docs/diagnosis.md, "Goodput"). Kept at the events, read at collect time: `open_stall`
only reads, so a scrape changes nothing but the high-water mark that keeps the counter monotonic.

A gap runs from the first report of a new highest step (several processes of a pod report the same
step) to the first report of a higher one. Its length, less the checkpoint writes reported inside it,
is a stall once it passes the grace (STALL_FACTOR times the median of the recent gaps, STALL_MIN_S at
least), and then every second of it beyond that typical gap is counted: the step would have taken
that long anyway. A restore, a new trainer process or the last trainer's bye ends the gap where it is
(what follows is the restart's: the operator's records count it), and the next step starts a new one.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

STALL_FACTOR = 5.0
"""A gap is a stall beyond this many typical gaps: a slow step, a garbage collection or a short
evaluation stays under it; a hung collective, a dead data loader or a rank gone does not."""
STALL_MIN_S = 30.0
"""...and never under this: a job stepping every 100 ms does not count a 2 s hiccup as a stall."""
TYPICAL_GAPS = 16
"""The gaps the typical one is the median of: a change of pace (a longer sequence) moves it in 8."""
MIN_GAPS = 3
"""Gaps seen before any is judged: the first steps compile and warm caches."""


@dataclass
class StallClock:
    """One pod's stall and checkpoint-save seconds. Not thread-safe: TrainingState holds its lock."""

    stalled: float = 0.0
    """Stall seconds of the gaps closed."""
    saved: float = 0.0
    """Seconds blocked in checkpoint writes, the union of the pod's processes' saves."""
    exported: float = 0.0
    """The most stall seconds ever read: a save reported only at its end (no `saving` first) may take
    back some of an open gap a scrape already counted; the counter keeps it rather than go down."""
    saved_exported: float = 0.0
    """The most save seconds ever read: a write under way counts as it goes (so a rate over a minute
    sees a 2-minute write as 2 minutes at 1, not a 120 s jump), and one that ends up shorter than a
    scrape saw keeps what was seen."""
    top_step: float | None = None
    gap_start: float | None = None
    saved_in_gap: float = 0.0
    saving_since: float | None = None
    save_until: float = float("-inf")
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=TYPICAL_GAPS))

    def typical(self) -> float | None:
        """The median recent gap (less its checkpoint writes); None before MIN_GAPS gaps."""
        return statistics.median(self.gaps) if len(self.gaps) >= MIN_GAPS else None

    def grace(self) -> float | None:
        typical = self.typical()
        return None if typical is None else max(STALL_FACTOR * typical, STALL_MIN_S)

    def _excess(self, gap: float) -> float:
        typical, grace = self.typical(), self.grace()
        if typical is None or grace is None or gap <= grace:
            return 0.0
        return gap - typical

    def _gap(self, until: float) -> float:
        """The open gap up to `until`, less the checkpoint writes in it (one under way too)."""
        if self.gap_start is None:
            return 0.0
        writing = until - max(self.saving_since, self.gap_start) if self.saving_since is not None else 0.0
        return max(0.0, until - self.gap_start - self.saved_in_gap - max(0.0, writing))

    def step(self, step: float, ts: float) -> None:
        """A step report: the first of a new highest step ends the open gap and starts the next."""
        if self.top_step is not None and step <= self.top_step:
            return
        if self.gap_start is not None and ts > self.gap_start:
            gap = self._gap(ts)
            self.stalled += self._excess(gap)
            self.gaps.append(gap)
        # a write announced and never reported ended by now: training went on (its time was seen so far)
        self.saved = max(self.saved, self.saved_exported)
        self.top_step, self.gap_start, self.saved_in_gap, self.saving_since = step, ts, 0.0, None

    def reset(self, ts: float) -> None:
        """A restore, a new trainer or the last bye: the open gap counts up to `ts`, and no gap is open
        until the next step (the steps may start again lower, from a checkpoint)."""
        if self.gap_start is not None and ts > self.gap_start:
            self.stalled += self._excess(self._gap(ts))
        self.top_step, self.gap_start, self.saved_in_gap, self.saving_since = None, None, 0.0, None

    def saving(self, ts: float) -> None:
        """A checkpoint write began (Reporter.saving): an open gap stops growing until it ends."""
        if self.saving_since is None:
            self.saving_since = ts

    def save_done(self, seconds: float | None, ts: float) -> float:
        """A checkpoint write that ended at `ts` and took `seconds` (None: unknown, unless its start was
        reported); returns the seconds it adds to the union of the pod's saves."""
        if seconds is None and self.saving_since is not None:
            seconds = ts - self.saving_since
        self.saving_since = None
        if seconds is None or seconds <= 0:
            return 0.0
        start = ts - seconds
        added = max(0.0, ts - max(start, self.save_until))
        if self.gap_start is not None:
            self.saved_in_gap += max(0.0, ts - max(start, self.save_until, self.gap_start))
        self.save_until = max(self.save_until, ts)
        self.saved += added
        return added

    def open_saved(self, now: float) -> float:
        """The save seconds to export at `now`: the writes ended, and the one under way so far."""
        writing = 0.0
        if self.saving_since is not None:
            writing = max(0.0, now - max(self.saving_since, self.save_until))
        self.saved_exported = max(self.saved_exported, self.saved + writing)
        return self.saved_exported

    def open_stall(self, now: float) -> float:
        """The stall seconds to export at `now`: the closed gaps' and the open one's so far."""
        self.exported = max(self.exported, self.stalled + self._excess(self._gap(now)))
        return self.exported
