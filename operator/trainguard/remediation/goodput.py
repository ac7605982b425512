"""Goodput per job from its remediation records, pure: the time lost by cause, the time left productive
and the ETTR (productive over wall time) over a window. The operator's metrics (controller/metrics.py,
GoodputCollector) and `trainguard status` both read `job_goodput`, so a graph and the screen agree.

What is counted, in wall-clock time from the monitor's creation (docs/diagnosis.md, "Goodput"):
- `restart`: from a record's creation (the alert reaching the operator) to its last update (its last
  step done), or to now while it runs, for every record that is not a dry run and plans a step that
  stops training (Pause or a restart), whatever its outcome: the job was in a remediation that stops it.
  A slowNode record that waits for the job's next checkpoint (AwaitCheckpoint) stops nothing while it
  waits: its interval starts when that step succeeded, and a wait that failed loses nothing.
- `maintenance`: the same for a planned maintenance move (class `maintenance`): the time the job spent
  moving off a node a person took out of service, not a fault's.
- `redone_work`: after a record whose restart (RestartGang, ReplacePod) succeeded and named the
  checkpoint the new pods resume from (its progress' resumeFrom, with the checkpoint's time), the
  training time between that checkpoint and the record's creation (less the time already lost in
  between), counted from the record's end as the job does it again, until done or the next record.
Overlapping records count once, in CAUSES' order: an instant lost to a restart and a maintenance move
is a `restart`'s, one lost to either and to redone work is theirs. Everything else is
productive here; a stall before its alert, a checkpoint write and a slow rank are not seen in the records:
the sidecars count them (exporter/stalls.py) and the goodput recording rules (render/prometheus.py,
goodput_rules) add them to these causes in trainguard:job_ettr:ratio, without counting an instant twice.

Monotonic by construction, for Prometheus counters: every interval starts at most a watch's delay
before the operator sees it (a record's creation, a record's end), so counting up to `LAG_S` before
now never takes back a second already counted. Records the status prunes (50 kept) leave their counts
in `status.goodput` (`carry`), so the totals survive them; records are facts in the API, so the totals
survive operator restarts and leader changes too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainguard.times import rfc3339, unix

CAUSES: tuple[str, ...] = ("restart", "maintenance", "redone_work")
"""The causes the records tell, in priority order (an instant lost to both counts for the first)."""

MAINTENANCE = "maintenance"
"""The record class of a planned maintenance move (remediation/maintenance.py), counted as its own cause."""
STOPPING_STEPS = frozenset({"Pause", "RestartInPlace", "RestartGang", "ReplacePod"})
RESUMING_STEPS = frozenset({"RestartGang", "ReplacePod"})
"""Restarts whose progress names the checkpoint the pods resume from (resumeFrom); RestartInPlace's
word goes to the launchers and is not in the record, so its redone work is not known."""
LAG_S = 60.0
"""The counts run this far behind now: a record written is in the operator's watch cache well within
it, so an interval never starts inside what was already counted (the counters never go down)."""
WINDOW_S = 86400.0
"""The ETTR's window."""

Interval = tuple[float, float]


@dataclass(frozen=True)
class Carried:
    """What pruned records had counted (status.goodput): seconds per cause up to `until` (unix)."""

    seconds: Mapping[str, float] = field(default_factory=dict)
    until: float = 0.0


@dataclass(frozen=True)
class Goodput:
    """One job's account from `since` to `until` (now less LAG_S)."""

    since: float
    until: float
    lost: Mapping[str, float]
    """Seconds lost per cause (every cause of CAUSES present)."""
    redo_unknown: int = 0
    """Restarts whose redone work is not counted (no checkpoint named): the loss is a lower bound."""
    window_wall: float = 0.0
    window_lost: float = 0.0

    @property
    def wall(self) -> float:
        return max(0.0, self.until - self.since)

    @property
    def lost_total(self) -> float:
        return sum(self.lost.values())

    @property
    def productive(self) -> float:
        return max(0.0, self.wall - self.lost_total)

    @property
    def ettr(self) -> float | None:
        """Productive over wall time over the last WINDOW_S (or since the monitor, or the carried counts,
        began if later); None before any time is counted."""
        if self.window_wall <= 0:
            return None
        return max(0.0, self.window_wall - self.window_lost) / self.window_wall

    @property
    def top_cause(self) -> str | None:
        """The cause with the most time lost, None when nothing was lost."""
        cause, seconds = max(self.lost.items(), key=lambda kv: (kv[1], -CAUSES.index(kv[0])))
        return cause if seconds > 0 else None


def carried_of(status: Mapping[str, Any] | None) -> Carried:
    """status.goodput as Carried; nothing carried when absent or unreadable."""
    got = (status or {}).get("goodput") or {}
    if not isinstance(got, Mapping):
        return Carried()
    seconds = {
        "restart": _number(got.get("restartSeconds")),
        "maintenance": _number(got.get("maintenanceSeconds")),
        "redone_work": _number(got.get("redoneWorkSeconds")),
    }
    return Carried(seconds, unix(str(got.get("until") or "")))


def carried_status(carried: Carried) -> dict[str, Any]:
    """Carried as status.goodput holds it (seconds rounded to the millisecond)."""
    return {
        "restartSeconds": round(carried.seconds.get("restart", 0.0), 3),
        "maintenanceSeconds": round(carried.seconds.get("maintenance", 0.0), 3),
        "redoneWorkSeconds": round(carried.seconds.get("redone_work", 0.0), 3),
        "until": rfc3339(carried.until),
    }


def _number(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return 0.0


def _kinds(record: Mapping[str, Any]) -> set[str]:
    return {str(s.get("kind", "")) for s in record.get("steps") or [] if isinstance(s, Mapping)}


def stops(record: Mapping[str, Any]) -> bool:
    """Not a dry run, and planned a step that stops training (known at its creation: it never changes)."""
    return not record.get("dryRun") and bool(_kinds(record) & STOPPING_STEPS)


def _stopped_at(record: Mapping[str, Any], created: float) -> float | None:
    """When the record began to stop training: its creation, or for one that first waited for the job's
    next checkpoint, when that wait succeeded (None while it waits, or when it failed)."""
    for step in record.get("steps") or []:
        if isinstance(step, Mapping) and step.get("kind") == "AwaitCheckpoint":
            done = step.get("phase") == "Succeeded" and unix(str(step.get("time", ""))) > 0
            return max(created, unix(str(step.get("time", "")))) if done else None
    return created


def _finished(record: Mapping[str, Any]) -> bool:
    return record.get("phase") in ("Succeeded", "Failed", "Skipped")


def resumed_from(record: Mapping[str, Any]) -> float | None:
    """Unix time of the checkpoint a succeeded RestartGang or ReplacePod resumed the pods from; None when
    no such step succeeded or it named no checkpoint (or one without a time)."""
    for step in record.get("steps") or []:
        if step.get("kind") not in RESUMING_STEPS or step.get("phase") != "Succeeded":
            continue
        text = (step.get("progress") or {}).get("resumeFrom")
        try:
            pointer = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            pointer = None
        ts = pointer.get("ts") if isinstance(pointer, dict) else None
        if isinstance(ts, int | float) and not isinstance(ts, bool) and ts > 0:
            return float(ts)
    return None


def _restarted(record: Mapping[str, Any]) -> bool:
    restarts = STOPPING_STEPS - {"Pause"}
    return any(s.get("kind") in restarts and s.get("phase") == "Succeeded" for s in record.get("steps") or [])


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same time."""
    out: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def measure(intervals: Iterable[Interval], start: float = float("-inf"), end: float = float("inf")) -> float:
    """Seconds of the union of `intervals` inside [start, end]."""
    return sum(max(0.0, min(b, end) - max(a, start)) for a, b in union(intervals))


def _minus(intervals: Iterable[Interval], taken: Sequence[Interval]) -> list[Interval]:
    """`intervals` less the time in `taken` (disjoint, sorted)."""
    out = []
    for a, b in union(intervals):
        cursor = a
        for ta, tb in taken:
            if tb <= cursor or ta >= b:
                continue
            if ta > cursor:
                out.append((cursor, ta))
            cursor = max(cursor, tb)
        if cursor < b:
            out.append((cursor, b))
    return out


def loss_intervals(records: Sequence[Mapping[str, Any]], now: float) -> tuple[dict[str, list[Interval]], int]:
    """Per cause, the disjoint intervals lost (an instant in one cause only, CAUSES' order), and how many
    restarts have no redone work known. Unclipped: the caller cuts them to what it counts."""
    kept = [
        r for r in records if stops(r) and unix(str(r.get("created", ""))) > 0
    ]  # a damaged time: not counted
    ordered = sorted(kept, key=lambda r: (unix(str(r.get("created", ""))), str(r.get("id"))))
    starts = [unix(str(r.get("created", ""))) for r in ordered]
    restart: list[Interval] = []
    moved: list[Interval] = []
    redo: list[Interval] = []
    unknown = 0
    for i, r in enumerate(ordered):
        created = _stopped_at(r, starts[i])
        if created is None:
            continue
        end = unix(str(r.get("updated", ""))) if _finished(r) else now
        (moved if r.get("class") == MAINTENANCE else restart).append((created, max(created, end)))
        if not _finished(r) or not _restarted(r):
            continue
        ts = resumed_from(r)
        if ts is None:
            unknown += 1
            continue
        earlier = union(restart + moved + redo)  # measured before `created` only: this record's is after
        work = max(0.0, created - ts) - measure(earlier, ts, created)
        stop = min([end + work, *(s for s in starts[i + 1 :] if s >= end)])
        redo.append((end, max(end, stop)))
    restart_union = union(restart)
    moved_union = _minus(moved, restart_union)
    return {
        "restart": restart_union,
        "maintenance": moved_union,
        "redone_work": _minus(redo, union(restart_union + moved_union)),
    }, unknown


def job_goodput(
    records: Sequence[Mapping[str, Any]],
    carried: Carried,
    since: float,
    now: float,
    window_s: float = WINDOW_S,
) -> Goodput:
    """The account of a job whose monitor was created at `since`, as of `now`: the carried counts plus
    every interval of `records` between the carried counts' end and now less LAG_S."""
    until = now - LAG_S
    start = max(since, carried.until)
    intervals, unknown = loss_intervals(records, now)
    lost = {c: carried.seconds.get(c, 0.0) + measure(intervals[c], start, until) for c in CAUSES}
    window_start = max(start, until - window_s)
    every = [i for c in CAUSES for i in intervals[c]]
    return Goodput(
        since=since,
        until=max(since, until),
        lost=lost,
        redo_unknown=unknown,
        window_wall=max(0.0, until - window_start),
        window_lost=measure(every, window_start, until),
    )


def monitor_goodput(body: Mapping[str, Any], now: float, window_s: float = WINDOW_S) -> Goodput:
    """The account of one TrainingJobMonitor (as the API or the watch cache holds it): its records and
    carried counts, from its creation."""
    status = body.get("status") or {}
    since = unix(str((body.get("metadata") or {}).get("creationTimestamp") or ""))
    return job_goodput(list(status.get("remediations") or []), carried_of(status), since, now, window_s)


def carry(records: Sequence[Mapping[str, Any]], carried: Carried, since: float, now: float) -> Carried:
    """What status.goodput holds once some of `records` are pruned: every count up to now less LAG_S, so
    the records kept count only after it and the totals go on from where they were."""
    account = job_goodput(records, carried, since, now)
    return Carried(dict(account.lost), max(carried.until, account.until))
