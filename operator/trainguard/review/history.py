"""Firing episodes of alerts, from the raw samples of their `ALERTS{alertstate="firing"}` series.

Prometheus writes one `ALERTS` sample per rule evaluation while an alert fires. The review reads those
raw samples (a range-vector selector, not a range query): a range query would stretch a lone sample over
the 5-minute lookback wherever no stale marker was written (after a restart, in backfilled or
remote-read history), and a one-evaluation alert would look like a 5-minute one.

An episode is a run of samples of one series with no gap longer than `GAP_FACTOR` evaluation intervals:
a longer gap means at least one evaluation found it resolved. An episode lasts from its first sample
until the evaluation after its last one, when it was seen resolved.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainguard.catalog.severity import grade_of

GAP_FACTOR = 1.5
"""Samples further apart than this many intervals are two episodes: an evaluation in between found the
alert resolved (a gap of two intervals). Less than two, so a late evaluation does not split one."""
DROPPED = frozenset({"__name__", "alertstate"})
"""Labels of an ALERTS series that the alert itself (as Alertmanager gets it) does not carry."""


@dataclass(frozen=True)
class Series:
    """One alert instance's firing samples: the alert's labels and its sample times (unix seconds)."""

    labels: Mapping[str, str]
    timestamps: tuple[float, ...]


@dataclass(frozen=True)
class Episode:
    """One firing of one alert instance."""

    labels: Mapping[str, str]
    start: float
    """Its first firing sample."""
    last: float
    """Its last firing sample."""
    samples: int
    interval: float
    ongoing: bool
    """Still firing at the end of the history: its resolution is not seen yet."""

    @property
    def alertname(self) -> str:
        return self.labels.get("alertname", "")

    @property
    def severity(self) -> str:
        """Its grade: `priority`, or `severity` for an alert of a rule that predates it."""
        return grade_of(self.labels)

    @property
    def job(self) -> tuple[str, str]:
        """(namespace, training_job): alerts of the same job fire "together"; empty for cluster alerts."""
        return self.labels.get("namespace", ""), self.labels.get("training_job", "")

    @property
    def end(self) -> float:
        """When it was seen resolved: the evaluation after its last firing sample."""
        return self.last + self.interval

    @property
    def short(self) -> bool:
        """Resolved within one evaluation interval: firing at one evaluation, resolved at the next."""
        return self.samples == 1 and not self.ongoing


def alert_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The alert's own labels, from its ALERTS series' labels."""
    return {k: v for k, v in labels.items() if k not in DROPPED}


def parse_matrix(result: Any) -> list[Series]:
    """Series of a range-vector query's answer (`[{"metric": {...}, "values": [[t, "1"], ...]}]`)."""
    out = []
    for item in result or []:
        labels = alert_labels({str(k): str(v) for k, v in (item.get("metric") or {}).items()})
        out.append(Series(labels, tuple(float(t) for t, _ in item.get("values") or [])))
    return out


def merge(chunks: Iterable[Iterable[Series]]) -> list[Series]:
    """One series per label set from chunked answers; a sample on a chunk boundary (range selectors
    include both ends in Prometheus 2) is counted once."""
    by_key: dict[frozenset[tuple[str, str]], tuple[Mapping[str, str], set[float]]] = {}
    for chunk in chunks:
        for s in chunk:
            _, times = by_key.setdefault(frozenset(s.labels.items()), (s.labels, set()))
            times.update(s.timestamps)
    return [Series(labels, tuple(sorted(times))) for labels, times in by_key.values()]


def episodes(
    series: Iterable[Series], interval: float, until: float, gap_factor: float = GAP_FACTOR
) -> list[Episode]:
    """Every series' firing episodes, ordered by start. One whose last sample is within an interval of
    `until` (the end of the history) is ongoing."""
    out = []
    for s in series:
        ts = sorted(set(s.timestamps))
        if not ts:
            continue
        runs: list[list[float]] = [[ts[0]]]
        for a, b in itertools.pairwise(ts):
            if b - a > gap_factor * interval:
                runs.append([])
            runs[-1].append(b)
        for run in runs:
            ongoing = until - run[-1] < interval
            out.append(Episode(dict(s.labels), run[0], run[-1], len(run), interval, ongoing))
    return sorted(out, key=lambda e: (e.start, e.alertname))
