"""bench/stragglers.py's gang model and scoring: the peers wait for the straggler in the collective, and
an episode counts for the straggler only on its rank after its onset."""

from __future__ import annotations

from bench.stragglers import Trace, Window, episodes, score, simulate


def test_the_peers_wait_for_the_straggler_inside_the_collective() -> None:
    t = Trace(4, 0, 0.2, 2, 0.0, slowdowns=[Window(0.0, 1e9, frozenset({2}), 1.2)])
    sim = simulate(t)
    step_s = [sim[i][0][-1] for i in range(4)]
    coll = [sim[i][1][-1] for i in range(4)]
    assert max(step_s) - min(step_s) < 1e-9, "one step time for the whole gang"
    assert coll[2] < min(coll[i] for i in (0, 1, 3)), "the straggler waits least"
    own = [s - c for s, c in zip(step_s, coll, strict=True)]
    peers = sorted(own[i] for i in (0, 1, 3))[1]
    assert 1.15 < own[2] / peers < 1.25, "its own time is its slowdown"


def test_a_gang_pause_counts_for_every_rank_and_a_rank_pause_for_that_rank_only() -> None:
    t = Trace(3, 0, 0.0, None, None, pauses=[Window(60.0, 120.0, frozenset({1}))])
    sim = simulate(t)
    coll_end = [sim[i][1][-1] for i in range(3)]
    assert coll_end[0] > coll_end[1] + 55 and coll_end[2] > coll_end[1] + 55


def test_episodes_split_on_gaps() -> None:
    fired = {30.0: {1}, 60.0: {1}, 120.0: {1}, 150.0: {1, 2}}
    assert episodes(fired, 30) == [(1, 30.0), (1, 120.0), (2, 150.0)]


def test_score_counts_the_right_rank_after_onset_only() -> None:
    hit = Trace(4, 0, 0.1, 1, 600.0)
    early = Trace(4, 1, 0.1, 3, 600.0)
    clean = Trace(4, 2, 0.0, None, None)
    result = score(
        [hit, early, clean],
        [{900.0: {1}, 930.0: {1}, 1200.0: {0}}, {300.0: {3}}, {60.0: {2}}],
        30,
    )
    row = result["levels"]["0.10"]
    assert (row["traces"], row["recall"], row["precision"], row["false_episodes"]) == (2, 0.5, 0.333, 2)
    assert row["delay_s_median"] == 300.0
    assert result["clean"]["false_episodes"] == 1
