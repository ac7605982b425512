"""The series the shared rule group reads (render/shared.py), served on the operator's metrics port.

State-free: every scrape reads the watch caches and publishes every monitor's thresholds, settings and
enabled alerts as render/shared.published_series says. Before the caches have listed it publishes
nothing at all, not even its heartbeat: the rules then keep the last published values, where an empty
publication would tell them that no monitor exists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trainguard.api.load import InvalidInput, PolicyProblem, parse_object, policies_for
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.metrics import MONITOR_SETTINGS_PUBLISHED, RULE_SETTINGS_METRICS
from trainguard.render.policy import EffectivePolicy, effective_policy
from trainguard.render.shared import published_series

Judged = Sequence[tuple[TrainingJobMonitor, EffectivePolicy]]


class MonitorReads(Protocol):
    """kube.ClusterCache: the monitors and policies, from the watch caches."""

    def monitors(self) -> list[dict[str, Any]]: ...

    def policy(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...


def judged_monitors(reads: MonitorReads) -> list[tuple[TrainingJobMonitor, EffectivePolicy]]:
    """Every monitor with its effective policy; one whose spec is invalid or names a missing or invalid
    policy is left out (its status says why, and the shared group does not judge it meanwhile)."""
    out: list[tuple[TrainingJobMonitor, EffectivePolicy]] = []
    for body in reads.monitors():
        meta = body.get("metadata", {})
        try:
            monitor = parse_object(body, f"{meta.get('namespace')}/{meta.get('name')}")
            assert isinstance(monitor, TrainingJobMonitor)
            out.append((monitor, effective_policy(monitor, policies_for(monitor, reads.policy))))
        except (InvalidInput, PolicyProblem):
            continue
    return out


class SyncedReads(MonitorReads, Protocol):
    """kube.ClusterCache, with its informers' state."""

    @property
    def monitors_informer(self) -> Any: ...

    @property
    def policies_informer(self) -> Any: ...


def from_cache(cache: SyncedReads) -> Callable[[], Judged | None]:
    """The monitors of the watch caches, or None until both have listed."""

    def source() -> Judged | None:
        if not (cache.monitors_informer.synced and cache.policies_informer.synced):
            return None
        return judged_monitors(cache)

    return source


class RuleSettingsCollector(Collector):
    """Publishes what `source` returns; None (the caches have not listed yet) publishes nothing."""

    def __init__(self, source: Callable[[], Judged | None]) -> None:
        self.source = source

    def describe(self) -> list[Metric]:
        return []  # the registry would otherwise collect at registration, before the caches list

    def collect(self) -> Iterator[Metric]:
        judged = self.source()
        if judged is None:
            return
        per_monitor = [m for m in RULE_SETTINGS_METRICS if m.name != MONITOR_SETTINGS_PUBLISHED]
        families = {m.name: GaugeMetricFamily(m.name, m.help, labels=list(m.labels)) for m in per_monitor}
        label_names = {m.name: m.labels for m in per_monitor}
        for monitor, policy in judged:
            for name, labels, value in published_series(monitor, policy):
                families[name].add_metric([labels[k] for k in label_names[name]], value)
        yield from families.values()
        heartbeat = next(m for m in RULE_SETTINGS_METRICS if m.name == MONITOR_SETTINGS_PUBLISHED)
        yield GaugeMetricFamily(heartbeat.name, heartbeat.help, value=float(len(judged)))
