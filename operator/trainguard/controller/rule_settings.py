"""The series the shared rule group reads (render/shared.py), served on the operator's metrics port.

Every scrape reads the watch caches and publishes every monitor's thresholds, settings and enabled
alerts as render/shared.published_series says; what it keeps between scrapes is only a memo of each
monitor's merged policy, by the versions it was merged from (Judgements). Before the caches have listed it publishes
nothing at all, not even its heartbeat: the rules then keep the last published values, where an empty
publication would tell them that no monitor exists.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trainguard.api.load import PolicyProblem, monitor_of, policies_for
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.metrics import MONITOR_SETTINGS_PUBLISHED, RULE_SETTINGS_METRICS
from trainguard.render.policy import EffectivePolicy, effective_policy
from trainguard.render.shared import published_series

Judged = Sequence[tuple[TrainingJobMonitor, EffectivePolicy]]


class MonitorReads(Protocol):
    """kube.ClusterCache: the monitors and policies, from the watch caches."""

    def monitors(self) -> list[dict[str, Any]]: ...

    def policy(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...


def judged_monitors(
    reads: MonitorReads, known: Judgements | None = None
) -> list[tuple[TrainingJobMonitor, EffectivePolicy]]:
    """Every monitor with its effective policy; one whose spec is invalid or names a missing or invalid
    policy is left out (its status says why, and the shared group does not judge it meanwhile). With
    `known`, a monitor whose version and its policies' are those of the last scrape is not judged again."""
    out: list[tuple[TrainingJobMonitor, EffectivePolicy]] = []
    for body in reads.monitors():
        monitor = monitor_of(body)
        if monitor is None:
            continue
        key = (monitor.namespace, monitor.name)
        versions = (_version(body), *(_version(reads.policy(monitor.namespace, r.name))
                                      for r in monitor.spec.policy_refs))  # fmt: skip
        policy = known.get(key, versions) if known is not None else None
        if policy is None:
            try:
                policy = effective_policy(monitor, policies_for(monitor, reads.policy))
            except PolicyProblem:
                continue
            if known is not None:
                known.put(key, versions, policy)
        out.append((monitor, policy))
    if known is not None:
        known.keep({(m.namespace, m.name) for m, _ in out})
    return out


def _version(body: Mapping[str, Any] | None) -> str:
    meta = (body or {}).get("metadata") or {}
    return f"{meta.get('uid') or ''}/{meta.get('resourceVersion') or ''}"


class Judgements:
    """Each monitor's effective policy with the versions (uid and resourceVersion) of the monitor and of
    the policies it names when it was merged: at 2,000 monitors, merging every monitor's policies at
    every scrape made /metrics answer in 10 s on a loaded machine. An object without a version (not
    read from the cluster) is never remembered."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], tuple[tuple[str, ...], EffectivePolicy]] = {}

    def get(self, key: tuple[str, str], versions: tuple[str, ...]) -> EffectivePolicy | None:
        found = self._known.get(key)
        return found[1] if found is not None and found[0] == versions else None

    def put(self, key: tuple[str, str], versions: tuple[str, ...], policy: EffectivePolicy) -> None:
        if all(not v.startswith("/") and not v.endswith("/") for v in versions):
            self._known[key] = (versions, policy)

    def keep(self, keys: set[tuple[str, str]]) -> None:
        """Forget the monitors gone (or invalid) since."""
        for key in set(self._known) - keys:
            del self._known[key]

    def __len__(self) -> int:
        return len(self._known)


class SyncedReads(MonitorReads, Protocol):
    """kube.ClusterCache, with its informers' state."""

    @property
    def monitors_informer(self) -> Any: ...

    @property
    def policies_informer(self) -> Any: ...


def from_cache(cache: SyncedReads) -> Callable[[], Judged | None]:
    """The monitors of the watch caches, or None until both have listed."""

    known = Judgements()
    lock = threading.Lock()  # two scrapes at once would share `known`

    def source() -> Judged | None:
        if not (cache.monitors_informer.synced and cache.policies_informer.synced):
            return None
        with lock:
            return judged_monitors(cache, known)

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
