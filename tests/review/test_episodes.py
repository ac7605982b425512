"""Firing episodes from raw ALERTS samples: where one ends, which are short, which are still firing."""

from __future__ import annotations

from tests.review.synthetic import STEP, series
from trainguard.review.history import Series, episodes, merge, parse_matrix


def test_a_missed_evaluation_splits_an_episode_and_a_late_one_does_not() -> None:
    s = series("A", [(0.0, 4)])
    late = Series(s.labels, (*s.timestamps, s.timestamps[-1] + 1.4 * STEP))
    resolved_once = Series(s.labels, (*s.timestamps, s.timestamps[-1] + 2 * STEP))
    assert len(episodes([late], STEP, until=1e6)) == 1
    assert [e.samples for e in episodes([resolved_once], STEP, until=1e6)] == [4, 1]


def test_an_episode_lasts_until_the_evaluation_that_saw_it_resolved() -> None:
    (e,) = episodes([series("A", [(100.0, 3)])], STEP, until=1e6)
    assert (e.start, e.last, e.end, e.samples) == (100.0, 130.0, 145.0, 3)
    assert not e.short and not e.ongoing


def test_one_sample_is_short_unless_still_firing_at_the_end() -> None:
    history = [series("A", [(0.0, 1), (600.0, 1)])]
    first, last = episodes(history, STEP, until=600.0 + STEP / 2)
    assert first.short
    assert last.ongoing and not last.short
    (seen_resolved,) = [e for e in episodes(history, STEP, until=600.0 + STEP) if e.start == 600.0]
    assert seen_resolved.short


def test_chunks_sharing_a_boundary_sample_count_it_once() -> None:
    s = series("A", [(0.0, 5)])
    left = Series(dict(s.labels), s.timestamps[:3])
    right = Series(dict(s.labels), s.timestamps[2:])
    (merged,) = merge([[left], [right]])
    assert merged.timestamps == s.timestamps
    (e,) = episodes([merged], STEP, until=1e6)
    assert e.samples == 5


def test_the_series_labels_become_the_alerts_labels() -> None:
    (s,) = parse_matrix(
        [{"metric": {"__name__": "ALERTS", "alertstate": "firing", "alertname": "A", "node": "n1"},
          "values": [[10, "1"], [25, "1"]]}]
    )  # fmt: skip
    assert dict(s.labels) == {"alertname": "A", "node": "n1"}
    assert s.timestamps == (10.0, 25.0)
