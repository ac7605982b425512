"""bench/goodput_signals.py's seeded trace through the real TrainingState: the sidecar's stall and
checkpoint-save counters add up to the time the trace lost, whichever way the SDK reports its writes;
unreported writes move their time to stall, not out of the account."""

from __future__ import annotations

import pytest
from bench.goodput_signals import run


def test_announced_writes_and_stalls_are_counted_as_they_happened() -> None:
    r = run("announced", hours=6.0, seed=3)
    assert r.true_stall_s > 0 and r.true_save_s > 0, "the trace holds both causes"
    assert r.counted_stall_s == pytest.approx(r.true_stall_s, rel=0.01)
    assert r.counted_save_s == pytest.approx(r.true_save_s, rel=0.001)


def test_writes_reported_at_their_end_may_run_the_stall_ahead_by_no_more_than_their_time() -> None:
    """A scrape during such a write past the grace sees a stall; the counter keeps it until a later stall
    takes it back (here the trace ends with writes after its last stall)."""
    r = run("end-only", hours=6.0, seed=3)
    assert r.counted_save_s == pytest.approx(r.true_save_s, rel=0.001)
    assert r.true_stall_s * 0.99 <= r.counted_stall_s <= r.true_stall_s + r.true_save_s
    assert r.counted_stall_s > r.true_stall_s * 1.01, "the case this test is about"


def test_unreported_writes_count_as_stall_and_the_ettr_stays_right() -> None:
    r = run("unreported", hours=6.0, seed=3)
    assert r.counted_save_s == 0
    assert r.counted_stall_s > r.true_stall_s
    assert r.counted_ettr == pytest.approx(r.true_ettr, abs=0.005)
