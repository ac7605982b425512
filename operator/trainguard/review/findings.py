"""The review's findings, from firing episodes (history.py): pure, so every threshold is tested on
synthetic histories.

Definitions (docs/review.md says the same):
- never fired: a rule with no firing episode that reaches into the last `quiet_window` seconds;
- fire together: an episode of A overlaps an episode of B of the same job (same `namespace` and
  `training_job`), where an episode lasts from its first firing sample until it was seen resolved; a
  pair's co-firing share is (A's episodes overlapping some B + B's overlapping some A) / (A's + B's
  episodes), and a pair is a merge candidate above the threshold (0.5 by default);
- short: an episode resolved at the evaluation after its only firing sample; an alert flaps when
  more than the threshold (0.3 by default) of its resolved episodes are short;
- by receiver: every receiver an episode's labels route to (routes.py), each episode counted once
  per receiver.
An alert with fewer than `min_episodes` episodes (resolved ones, for flapping) is not judged.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from trainguard.catalog.severity import with_priority
from trainguard.render.receivers import RESOLVED_VARIANT
from trainguard.review.history import Episode

CO_FIRING = 0.5
SHORT = 0.3
MIN_EPISODES = 2
TOP = 10


@dataclass(frozen=True)
class AlertStats:
    alertname: str
    severity: str
    episodes: int
    short: int
    firing_s: float
    last_fired: float


@dataclass(frozen=True)
class NeverFired:
    alertname: str
    sources: tuple[str, ...]
    """Where the rule is known from: "catalogue" (trainguard's alerts), "prometheus" (its rules API)."""
    last_fired: float | None
    """Its last firing sample in the whole history, older than the quiet window; None: not in it at all."""


@dataclass(frozen=True)
class Pair:
    alerts: tuple[str, str]
    episodes: tuple[int, int]
    together: tuple[int, int]
    """A's episodes that overlap some B of the same job, and B's that overlap some A."""
    stronger: str | None = None
    """The one of the two that supersedes the other in the catalogue (tiers of one signal): with the
    policy's supersede inhibition (the default) only it notifies, so the pair costs one notification."""

    @property
    def share(self) -> float:
        return sum(self.together) / sum(self.episodes)


@dataclass(frozen=True)
class Flapping:
    alertname: str
    short: int
    resolved: int

    @property
    def share(self) -> float:
        return self.short / self.resolved


@dataclass(frozen=True)
class ReceiverCount:
    receiver: str
    counts: tuple[tuple[str, int], ...]
    """(alertname, episodes), most frequent first."""


@dataclass(frozen=True)
class Thresholds:
    co_firing: float = CO_FIRING
    short: float = SHORT
    min_episodes: int = MIN_EPISODES
    top: int = TOP


@dataclass(frozen=True)
class Findings:
    start: float
    end: float
    interval: float
    quiet_window: float
    thresholds: Thresholds
    alerts: tuple[AlertStats, ...]
    never_fired: tuple[NeverFired, ...]
    co_firing: tuple[Pair, ...]
    flapping: tuple[Flapping, ...]
    by_receiver: tuple[ReceiverCount, ...]
    routed: bool
    """Whether receivers come from a routing tree; without one, by_receiver has one row, "-"."""
    notes: tuple[str, ...] = field(default=())


def _by_name(episodes: Iterable[Episode]) -> dict[str, list[Episode]]:
    out: dict[str, list[Episode]] = {}
    for e in episodes:
        out.setdefault(e.alertname, []).append(e)
    return out


def alert_stats(episodes: Sequence[Episode]) -> list[AlertStats]:
    """One row per alert: episodes, short ones, time firing; most episodes first."""
    rows = []
    for name, own in _by_name(episodes).items():
        severities = sorted({e.severity for e in own})
        rows.append(
            AlertStats(
                alertname=name,
                severity=",".join(severities),
                episodes=len(own),
                short=sum(1 for e in own if e.short),
                firing_s=sum(e.end - e.start for e in own),
                last_fired=max(e.last for e in own),
            )
        )
    return sorted(rows, key=lambda r: (-r.episodes, r.alertname))


def never_fired(
    rules: dict[str, tuple[str, ...]], episodes: Sequence[Episode], since: float
) -> list[NeverFired]:
    """Rules (name -> where they are known from) with no firing sample at or after `since`."""
    last: dict[str, float] = {}
    for e in episodes:
        last[e.alertname] = max(last.get(e.alertname, e.last), e.last)
    return [
        NeverFired(name, sources, last.get(name))
        for name, sources in sorted(rules.items())
        if last.get(name, since - 1) < since
    ]


def _union(spans: Iterable[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """Disjoint [start, end) spans covering the given ones: their starts and ends, sorted."""
    starts: list[float] = []
    ends: list[float] = []
    for s, e in sorted(spans):
        if ends and s <= ends[-1]:
            ends[-1] = max(ends[-1], e)
        else:
            starts.append(s)
            ends.append(e)
    return starts, ends


def _overlaps(union: tuple[list[float], list[float]], start: float, end: float) -> bool:
    """Whether [start, end) overlaps one of the disjoint spans."""
    starts, ends = union
    i = bisect.bisect_left(starts, end) - 1  # the last span that starts before `end`
    return i >= 0 and ends[i] > start


def co_firing(
    episodes: Sequence[Episode],
    threshold: float,
    min_episodes: int,
    supersedes: Mapping[str, Iterable[str]] | None = None,
) -> list[Pair]:
    """Pairs of alerts whose co-firing share is above `threshold` (the module's definition), highest
    share first; `supersedes` (alert -> the alerts it supersedes) marks the pairs that are tiers."""
    tiers = {(a, b) for a, weaker in (supersedes or {}).items() for b in weaker}
    by_name = _by_name(episodes)
    by_job: dict[tuple[str, str], dict[str, list[Episode]]] = {}
    for e in episodes:
        by_job.setdefault(e.job, {}).setdefault(e.alertname, []).append(e)
    together: dict[tuple[str, str], list[int]] = {}
    for alerts in by_job.values():
        unions = {n: _union((e.start, e.end) for e in own) for n, own in alerts.items()}
        for a, b in itertools.combinations(sorted(alerts), 2):
            counts = together.setdefault((a, b), [0, 0])
            counts[0] += sum(1 for e in alerts[a] if _overlaps(unions[b], e.start, e.end))
            counts[1] += sum(1 for e in alerts[b] if _overlaps(unions[a], e.start, e.end))
    pairs = []
    for (a, b), (ta, tb) in together.items():
        na, nb = len(by_name[a]), len(by_name[b])
        if min(na, nb) < min_episodes:
            continue
        stronger = a if (a, b) in tiers else b if (b, a) in tiers else None
        pair = Pair((a, b), (na, nb), (ta, tb), stronger)
        if pair.share > threshold:
            pairs.append(pair)
    return sorted(pairs, key=lambda p: (-p.share, p.alerts))


def flapping(episodes: Sequence[Episode], threshold: float, min_episodes: int) -> list[Flapping]:
    """Alerts whose share of short episodes among the resolved ones is above `threshold`, highest
    first. Ongoing episodes are left out: their end is not seen yet."""
    out = []
    for name, own in _by_name(episodes).items():
        resolved = [e for e in own if not e.ongoing]
        if len(resolved) < min_episodes:
            continue
        row = Flapping(name, sum(1 for e in resolved if e.short), len(resolved))
        if row.share > threshold:
            out.append(row)
    return sorted(out, key=lambda f: (-f.share, f.alertname))


Router = Callable[[dict[str, str]], Sequence[str]]
"""An alert's labels -> the receivers Alertmanager notifies (routes.py)."""


def by_receiver(episodes: Sequence[Episode], router: Router | None, top: int) -> list[ReceiverCount]:
    """Per receiver, its `top` most frequent alerts by episodes; receivers by total, busiest first.
    Without a router every episode counts under "-". A receiver's variant that is told of resolutions
    (`<name>+resolved`) is the same channel: it counts under its name."""
    counts: dict[str, dict[str, int]] = {}
    cache: dict[frozenset[tuple[str, str]], Sequence[str]] = {}
    for e in episodes:
        key = frozenset(e.labels.items())
        if key not in cache:
            # an alert of a rule older than `priority` is routed as its successor would be
            cache[key] = router(with_priority(e.labels)) if router else ["-"]
        for receiver in dict.fromkeys(r.removesuffix(RESOLVED_VARIANT) for r in cache[key]):
            own = counts.setdefault(receiver, {})
            own[e.alertname] = own.get(e.alertname, 0) + 1
    rows = [
        ReceiverCount(r, tuple(sorted(c.items(), key=lambda x: (-x[1], x[0]))[:top]))
        for r, c in counts.items()
    ]
    totals = {r: sum(c.values()) for r, c in counts.items()}
    return sorted(rows, key=lambda r: (-totals[r.receiver], r.receiver))


def review(
    episodes: Sequence[Episode],
    rules: dict[str, tuple[str, ...]],
    *,
    start: float,
    end: float,
    interval: float,
    quiet_window: float,
    thresholds: Thresholds,
    router: Router | None,
    notes: Sequence[str] = (),
    supersedes: Mapping[str, Iterable[str]] | None = None,
) -> Findings:
    """All findings of one history [start, end]."""
    t = thresholds
    return Findings(
        start=start,
        end=end,
        interval=interval,
        quiet_window=quiet_window,
        thresholds=t,
        alerts=tuple(alert_stats(episodes)),
        never_fired=tuple(never_fired(rules, episodes, end - quiet_window)),
        co_firing=tuple(co_firing(episodes, t.co_firing, t.min_episodes, supersedes)),
        flapping=tuple(flapping(episodes, t.short, t.min_episodes)),
        by_receiver=tuple(by_receiver(episodes, router, t.top)),
        routed=router is not None,
        notes=tuple(notes),
    )
