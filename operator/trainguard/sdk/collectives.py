"""Collective latencies, bucketed in the training process: a timed all-reduce costs a perf_counter pair,
a bisect and a few adds under a lock; the counts leave with the Reporter's next flush, one report for
however many collectives ran since. Standard library only."""

from __future__ import annotations

import bisect
import math
import threading
import time
from typing import Any

BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
"""Upper bounds in seconds, 1 ms to 60 s (+Inf implied): the exporter's trainguard_train_collective_seconds
buckets (the catalogue's; the SDK does not import it). Sent with the counts, so an exporter with other
bounds places each count by its upper bound."""
OPS_MAX = 16
"""Distinct op names kept per process; more are dropped (an op name is a label on the exporter's side)."""


class CollectiveHistogram:
    """Counts per bucket, sum and count per op since the last take(). Thread-safe: a comm hook may
    observe on a thread of its own while the Reporter's thread takes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: dict[str, list[float]] = {}  # op -> [count per bucket..., +Inf count, sum]

    def observe(self, seconds: float, op: str) -> bool:
        """False (nothing counted) for a value that is not a finite, non-negative number of seconds,
        or a new op beyond OPS_MAX."""
        if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0):
            return False
        index = bisect.bisect_left(BUCKETS, seconds)
        with self._lock:
            row = self._ops.get(op)
            if row is None:
                if len(self._ops) >= OPS_MAX:
                    return False
                row = self._ops[op] = [0.0] * (len(BUCKETS) + 2)
            row[index] += 1
            row[-1] += seconds
        return True

    def take(self) -> dict[str, Any] | None:
        """The report of what was observed since the last take ({"type": "collectives", ...}), or None."""
        with self._lock:
            ops, self._ops = self._ops, {}
        if not ops:
            return None
        return {
            "type": "collectives",
            "ts": time.time(),
            "le": list(BUCKETS),
            "ops": {op: {"counts": row[:-1], "sum": row[-1]} for op, row in ops.items()},
        }


class Timed:
    """`with reporter.collective("all_reduce"):` - one observation of the block's wall time, taken even
    when the block raises (a collective that timed out took that long). A class, not a generator
    context manager: it runs once per collective, inside the step."""

    __slots__ = ("_histogram", "_op", "_t0", "seconds")

    def __init__(self, histogram: CollectiveHistogram, op: str) -> None:
        self._histogram = histogram
        self._op = op
        self._t0 = 0.0
        self.seconds = 0.0
        """The block's duration, once it has left."""

    def __enter__(self) -> Timed:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0
        self._histogram.observe(self.seconds, self._op)
