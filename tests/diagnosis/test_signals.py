"""The names the rules read are the contract's and the recording rules' own."""

from __future__ import annotations

from tests.conftest import monitor, policy
from trainguard.api.common import duration_seconds
from trainguard.catalog import METRICS_BY_NAME
from trainguard.diagnosis import signals, straggler
from trainguard.render import prometheus
from trainguard.render.policy import effective_policy
from trainguard.render.prometheus import rule_group


def test_every_raw_metric_name_is_in_the_catalogue() -> None:
    names = {v for k, v in vars(signals).items() if k.isupper() and isinstance(v, str)}
    raw = {n for n in names if ":" not in n}
    assert raw <= set(METRICS_BY_NAME)


def test_collective_p99_is_the_name_the_renderer_records() -> None:
    m = monitor()
    recorded = {r["record"] for r in rule_group(m, effective_policy(m, [policy()]))["rules"] if "record" in r}
    assert signals.COLLECTIVE_P99 in recorded


def test_the_straggler_series_and_numbers_are_the_alerts() -> None:
    """The report judges stragglers as StragglerRank does: the same recorded series, window and z."""
    m = monitor()
    recorded = {r["record"] for r in rule_group(m, effective_policy(m, [policy()]))["rules"] if "record" in r}
    assert {signals.OWN_EXCESS, signals.OWN_SPREAD} <= recorded
    assert (signals.OWN_EXCESS, signals.OWN_SPREAD) == (prometheus.OWN_EXCESS, prometheus.OWN_SPREAD)
    assert straggler.OUTLIER_Z == prometheus.OUTLIER_Z
    assert duration_seconds(prometheus.STRAGGLER_WINDOW) == straggler.HELD_WINDOW_S
    assert duration_seconds(m.spec.exporter.scrape_interval) == straggler.SAMPLE_S
