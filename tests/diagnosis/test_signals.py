"""The names the rules read are the contract's and the recording rules' own."""

from __future__ import annotations

from tests.conftest import monitor, policy
from trainguard.catalog import METRICS_BY_NAME
from trainguard.diagnosis import signals
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
