"""The review's findings on synthetic histories, at their thresholds: co-firing above 50% of episodes,
resolved within one evaluation above 30%, never fired in the last 7 days, alerts by receiver."""

from __future__ import annotations

from tests.review.synthetic import STEP, series
from trainguard.review.findings import by_receiver, co_firing, flapping, never_fired
from trainguard.review.history import Episode, episodes

HOUR = 3600.0
DAY = 86400.0


def _episodes(*history: object) -> list[Episode]:
    return episodes(history, STEP, until=30 * DAY)  # type: ignore[arg-type]


def _pair_history(together: int, total: int = 10, **b_labels: str) -> list[Episode]:
    """A and B fire `total` times each, 10 minutes (40 evaluations) every 6 hours; `together` of A's
    episodes overlap one of B's, the others are an hour apart."""
    a_runs = [(i * 6 * HOUR, 40) for i in range(total)]
    b_runs = [(i * 6 * HOUR + (300.0 if i < together else HOUR), 40) for i in range(total)]
    return _episodes(series("A", a_runs), series("B", b_runs, **b_labels))


def test_a_pair_together_more_than_half_the_time_is_reported() -> None:
    (pair,) = co_firing(_pair_history(together=6), threshold=0.5, min_episodes=2)
    assert pair.alerts == ("A", "B")
    assert pair.together == (6, 6) and pair.episodes == (10, 10)
    assert pair.share == 0.6


def test_a_pair_together_exactly_half_the_time_is_not() -> None:
    assert co_firing(_pair_history(together=5), threshold=0.5, min_episodes=2) == []


def test_the_threshold_is_a_parameter() -> None:
    assert len(co_firing(_pair_history(together=5), threshold=0.4, min_episodes=2)) == 1


def test_firing_at_the_same_time_on_another_job_is_not_together() -> None:
    history = _pair_history(together=10, training_job="bert-finetune")
    assert co_firing(history, threshold=0.5, min_episodes=2) == []


def test_one_alert_resolving_at_the_evaluation_the_other_starts_is_not_together() -> None:
    # A fires at 0..585 s (40 evaluations) and is seen resolved at 600 s, where B starts
    a = series("A", [(i * 6 * HOUR, 40) for i in range(5)])
    b = series("B", [(i * 6 * HOUR + 600.0, 40) for i in range(5)])
    assert co_firing(_episodes(a, b), threshold=0.5, min_episodes=2) == []
    b_one_earlier = series("B", [(i * 6 * HOUR + 585.0, 40) for i in range(5)])
    assert len(co_firing(_episodes(a, b_one_earlier), threshold=0.5, min_episodes=2)) == 1


def test_a_share_counts_both_alerts_episodes() -> None:
    # A's 4 episodes all fire during B's; B fires 12 times: (4 + 4) / 16 = 50%, not more
    a = series("A", [(i * 6 * HOUR + 300.0, 4) for i in range(4)])
    b = series("B", [(i * 6 * HOUR, 40) for i in range(12)])
    assert co_firing(_episodes(a, b), threshold=0.5, min_episodes=2) == []
    (pair,) = co_firing(_episodes(a, b), threshold=0.49, min_episodes=2)
    assert pair.together == (4, 4) and pair.episodes == (4, 12)


def test_too_few_episodes_are_not_judged() -> None:
    history = _pair_history(together=1, total=1)
    assert co_firing(history, threshold=0.5, min_episodes=2) == []
    assert len(co_firing(history, threshold=0.5, min_episodes=1)) == 1


def _flapper(short: int, total: int = 10) -> list[Episode]:
    """`total` resolved episodes 2 hours apart, `short` of them one evaluation long, the rest 20."""
    return _episodes(series("F", [(i * 2 * HOUR, 1 if i < short else 20) for i in range(total)]))


def test_resolved_within_one_evaluation_more_than_30_percent_is_reported() -> None:
    (row,) = flapping(_flapper(short=4), threshold=0.3, min_episodes=2)
    assert (row.alertname, row.short, row.resolved) == ("F", 4, 10)


def test_resolved_within_one_evaluation_exactly_30_percent_is_not() -> None:
    assert flapping(_flapper(short=3), threshold=0.3, min_episodes=2) == []


def test_two_evaluations_are_not_short() -> None:
    history = _episodes(series("F", [(i * 2 * HOUR, 2) for i in range(10)]))
    assert flapping(history, threshold=0.3, min_episodes=2) == []


def test_an_episode_still_firing_is_not_counted_as_short() -> None:
    # 3 short of 9 resolved (33%), and a lone sample at the very end of the history, not seen resolved
    s = series("F", [(i * 2 * HOUR, 1 if i < 3 else 20) for i in range(9)] + [(30 * DAY - 5.0, 1)])
    (row,) = flapping(_episodes(s), threshold=0.3, min_episodes=2)
    assert (row.short, row.resolved) == (3, 9)


def test_never_fired_means_no_firing_sample_in_the_last_window() -> None:
    end = 30 * DAY
    history = _episodes(
        series("OldOnly", [(end - 8 * DAY, 10)]),
        series("Recent", [(end - 6 * DAY, 10)]),
        series("NotARule", [(end - 8 * DAY, 10)]),
    )
    rules = {name: ("catalogue",) for name in ("OldOnly", "Recent", "Silent")}
    rows = {r.alertname: r for r in never_fired(rules, history, since=end - 7 * DAY)}
    assert set(rows) == {"OldOnly", "Silent"}
    assert rows["OldOnly"].last_fired == end - 8 * DAY + 9 * STEP
    assert rows["Silent"].last_fired is None


def test_alerts_by_receiver_count_each_episode_once_per_receiver() -> None:
    history = _episodes(
        series("Page", [(i * HOUR, 3) for i in range(3)], severity="P0"),
        series("Mail", [(i * HOUR, 3) for i in range(5)], severity="P2"),
        series("Mail", [(i * HOUR, 3) for i in range(2)], severity="P2", node="n2"),
    )

    def router(labels: dict[str, str]) -> list[str]:
        return ["phone", "im", "im"] if labels["severity"] == "P0" else ["email"]

    rows = {r.receiver: r.counts for r in by_receiver(history, router, top=10)}
    assert rows == {"email": (("Mail", 7),), "phone": (("Page", 3),), "im": (("Page", 3),)}
    assert by_receiver(history, router, top=10)[0].receiver == "email"
    assert by_receiver(history, None, top=1)[0].counts == (("Mail", 7),)


def test_an_alert_of_a_rule_older_than_priority_is_routed_as_its_successor() -> None:
    """The rendered routes match `priority`: history from before it had only severity P0..P3."""
    history = _episodes(
        series("Old", [(0.0, 3)], severity="P0"),
        series("Mapped", [(0.0, 3)], severity="critical", priority="P0"),
    )
    seen: dict[str, dict[str, str]] = {}

    def router(labels: dict[str, str]) -> list[str]:
        seen[labels["alertname"]] = labels
        return ["phone"]

    by_receiver(history, router, top=10)
    assert seen["Old"]["priority"] == "P0"
    assert (seen["Mapped"]["priority"], seen["Mapped"]["severity"]) == ("P0", "critical")


def test_a_pair_of_tiers_names_the_stronger_and_an_unrelated_pair_names_none() -> None:
    """Tiers (the catalogue's supersedes) fire together by design; the review says which one notifies."""
    runs = [(i * 6 * HOUR, 40) for i in range(4)]
    history = _episodes(series("Weak", runs), series("Strong", runs), series("Other", runs))
    pairs = {p.alerts: p for p in co_firing(history, 0.5, 2, supersedes={"Strong": ("Weak",)})}
    assert pairs[("Strong", "Weak")].stronger == "Strong"
    assert pairs[("Other", "Strong")].stronger is None and pairs[("Other", "Weak")].stronger is None
