"""The operator's publication of the shared rule group's series: what render/shared.py says for every
monitor of the watch cache, nothing before the caches list, and no monitor that cannot be judged."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from tests.conftest import MONITOR, POLICY, merged, monitor, policy
from tests.exposition import parse
from trainguard.controller.rule_settings import RuleSettingsCollector, from_cache, judged_monitors
from trainguard.render.policy import effective_policy
from trainguard.render.shared import published_series

THRESHOLD_80 = {"spec.alerts": [{"name": "GPUThermalThrottling", "threshold": 80}]}


@dataclass
class Informer:
    synced: bool = True


@dataclass
class Reads:
    monitor_bodies: list[dict[str, Any]]
    policies: dict[tuple[str, str], dict[str, Any]]
    monitors_informer: Informer = field(default_factory=Informer)
    policies_informer: Informer = field(default_factory=Informer)

    def monitors(self) -> list[dict[str, Any]]:
        return self.monitor_bodies

    def policy(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.policies.get((namespace, name))


def reads(*bodies: dict[str, Any], **policy_changes: Any) -> Reads:
    return Reads(list(bodies), {("ml", "default"): merged(POLICY, **policy_changes)})


def scrape(source: Reads) -> dict[str, list[tuple[dict[str, str], float]]]:
    registry = CollectorRegistry()
    registry.register(RuleSettingsCollector(from_cache(source)))
    return parse(generate_latest(registry).decode())


def test_every_monitor_is_published_as_render_shared_says() -> None:
    other = merged(MONITOR, **{"metadata.name": "bert", "spec.mode": "inference"})
    got = scrape(reads(copy.deepcopy(MONITOR), other, **THRESHOLD_80))
    expected: list[tuple[str, dict[str, str], float]] = []
    for changes in ({}, {"metadata.name": "bert", "spec.mode": "inference"}):
        m = monitor(**changes)
        expected += published_series(m, effective_policy(m, [policy(**THRESHOLD_80)]))
    published = sorted((name, sorted(labels.items()), v) for name, labels, v in expected)
    scraped = sorted(
        (name, sorted(labels.items()), v)
        for name, samples in got.items()
        if name != "trainguard_monitor_settings_published"
        for labels, v in samples
    )
    assert scraped == published
    assert got["trainguard_monitor_settings_published"] == [({}, 2.0)]
    assert (
        {
            "monitor_namespace": "ml",
            "training_job": "llama-pretrain",
            "alertname": "GPUThermalThrottling",
            "param": "celsius",
        },
        80.0,
    ) in got["trainguard_monitor_alert_threshold"]


def test_nothing_is_published_before_the_caches_list() -> None:
    source = reads(copy.deepcopy(MONITOR))
    source.policies_informer.synced = False
    assert scrape(source) == {}


def test_a_monitor_that_cannot_be_judged_is_left_out() -> None:
    invalid = merged(MONITOR, **{"metadata.name": "broken", "spec.selector": {}})
    missing_policy = merged(MONITOR, **{"metadata.name": "orphan", "spec.policyRefs": [{"name": "absent"}]})
    judged = judged_monitors(reads(copy.deepcopy(MONITOR), invalid, missing_policy))
    assert [m.name for m, _ in judged] == ["llama-pretrain"]


def test_a_monitor_on_its_own_group_publishes_only_that() -> None:
    slow = merged(MONITOR, **{"spec.exporter.scrapeInterval": "1m"})
    got = scrape(reads(slow))
    assert got["trainguard_monitor_setting"] == [
        ({"monitor_namespace": "ml", "training_job": "llama-pretrain", "setting": "own_group"}, 1.0)
    ]
    assert "trainguard_monitor_alert_threshold" not in got


def versioned(body: dict[str, Any], version: str) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["metadata"].update(uid=f"uid-{body['metadata']['name']}", resourceVersion=version)
    return body


def test_a_monitor_and_policies_unchanged_since_the_last_scrape_are_not_merged_again(
    monkeypatch: Any,
) -> None:
    """At 2,000 monitors, merging every monitor's policies at every scrape made /metrics take 10 s."""
    from trainguard.controller import rule_settings  # noqa: PLC0415 - the name the module calls

    merges: list[str] = []

    def counted(m: Any, policies: Any) -> Any:
        merges.append(m.name)
        return effective_policy(m, policies)

    monkeypatch.setattr(rule_settings, "effective_policy", counted)
    r = reads(versioned(MONITOR, "1"))
    r.policies = {k: versioned(v, "1") for k, v in r.policies.items()}
    registry = CollectorRegistry()
    registry.register(RuleSettingsCollector(from_cache(r)))  # one operator, scraped again and again

    def scraped() -> dict[str, list[tuple[dict[str, str], float]]]:
        return parse(generate_latest(registry).decode())

    first = scraped()
    assert scraped() == first and merges == ["llama-pretrain"], "the second scrape merged nothing"
    (key,) = r.policies
    r.policies[key] = versioned(merged(r.policies[key], **THRESHOLD_80), "2")
    changed = scraped()
    assert merges == ["llama-pretrain"] * 2, "a policy's new version is merged again"
    assert changed != first
    r.monitor_bodies = []
    assert "trainguard_monitor_alert_threshold" not in scraped()
