"""The Alertmanager route tree of a monitor: severity routes, delivery to each receiver, quiet-hours and
maintenance muting.

The tree is built once in Alertmanager's own (snake_case) shape with structured matchers; the
assemblers in render/alertmanager.py write it out for each output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog import SEVERITIES
from trainguard.render.matchers import eq, one_of
from trainguard.render.policy import PAGING_ROLES, EffectivePolicy, PolicyReceiver
from trainguard.render.time_intervals import quiet_hours_name, window_name

GROUP_BY = ["namespace", "training_job", "alertname", "node"]

TIMING: dict[str, dict[str, str]] = {
    "P0": {"group_wait": "5s", "group_interval": "1m", "repeat_interval": "30m"},
    "P1": {"group_wait": "30s", "group_interval": "5m", "repeat_interval": "2h"},
    "P2": {"group_wait": "1m", "group_interval": "10m", "repeat_interval": "12h"},
    "P3": {"group_wait": "5m", "group_interval": "30m", "repeat_interval": "24h"},
}
SUMMARY_TIMING = {"group_by": ["namespace", "training_job"], "group_interval": "1h", "repeat_interval": "12h"}
"""Quiet-hours digest for IM: one notification per job and hour instead of one per alert."""

Route = dict[str, Any]
"""A route in alertmanager.yml's shape, its `matchers` a list of render.matchers.Matcher."""


OPERATOR_SEVERITIES = ("P0", "P1")
"""What the operator's receiver gets: the P0s it acts on, and the P1s it may advise on or escalate."""


@dataclass(frozen=True)
class Names:
    """How receivers and time intervals are named in one output."""

    receiver: Callable[[PolicyReceiver], str]
    interval: Callable[[str], str]
    dashboard: str
    operator: str | None = None
    """The operator's remediation receiver, when there is one: it gets every P0 and P1 first, unmuted
    (quiet hours and maintenance windows decide who is notified, not what the operator sees)."""


def _delivery(
    severity: str,
    monitor: TrainingJobMonitor,
    policy: EffectivePolicy,
    names: Names,
    mutes: Sequence[str],
) -> list[Route]:
    """One route per receiver, each with continue, so every receiver of the severity is notified."""
    out: list[Route] = []
    quiet = policy.quiet_hours.enabled
    quiet_name = names.interval(quiet_hours_name(monitor))
    for r in policy.receivers_for(severity):
        base: Route = {"receiver": names.receiver(r)}
        if mutes:
            base["mute_time_intervals"] = list(mutes)
        base["continue"] = True
        paging = bool(PAGING_ROLES & set(r.receiver.roles))
        if not quiet or not (paging or "im" in r.receiver.roles):
            out.append(base)
            continue
        # by day: as usual
        out.append(base | {"mute_time_intervals": [*mutes, quiet_name]})
        if paging:
            # at night the phone rings only for the allowlist
            out.append(
                {
                    "receiver": base["receiver"],
                    "matchers": [one_of("alertname", policy.quiet_hours.allowlist)],
                }
                | ({"mute_time_intervals": list(mutes)} if mutes else {})
                | {"active_time_intervals": [quiet_name], "continue": True}
            )
        else:
            # at night IM gets a digest
            out.append(
                {"receiver": base["receiver"], **SUMMARY_TIMING}
                | ({"mute_time_intervals": list(mutes)} if mutes else {})
                | {"active_time_intervals": [quiet_name], "continue": True}
            )
    return out


def _severity_route(
    severity: str,
    monitor: TrainingJobMonitor,
    policy: EffectivePolicy,
    names: Names,
    node_windows: dict[str, list[str]],
) -> Route:
    timing = dict(TIMING[severity])
    explicit = policy.routes.get(severity)
    if explicit is not None:
        for key, value in (
            ("group_wait", explicit.group_wait),
            ("group_interval", explicit.group_interval),
            ("repeat_interval", explicit.repeat_interval),
        ):
            if value:
                timing[key] = value
    route: Route = {"receiver": names.dashboard, "matchers": [eq("severity", severity)], **timing}
    children: list[Route] = []
    # nodes under maintenance: the same delivery, muted during their windows
    by_windows: dict[tuple[str, ...], list[str]] = {}
    for node, covering in sorted(node_windows.items()):
        by_windows.setdefault(tuple(covering), []).append(node)
    for windows, nodes in by_windows.items():
        delivery = _delivery(severity, monitor, policy, names, [names.interval(w) for w in windows])
        if delivery:
            children.append(
                {"receiver": names.dashboard, "matchers": [one_of("node", nodes)], "routes": delivery}
            )
    children += _delivery(severity, monitor, policy, names, [])
    if names.operator and severity in OPERATOR_SEVERITIES:
        children.insert(0, {"receiver": names.operator, "continue": True})
    if children:
        route["routes"] = children
    return route


def _node_windows(
    monitor: TrainingJobMonitor, policy: EffectivePolicy, resolved: dict[str, list[str]]
) -> dict[str, list[str]]:
    """node -> names of the maintenance windows that cover it."""
    out: dict[str, list[str]] = {}
    for w in policy.maintenance_windows:
        nodes = sorted(set(w.nodes) | set(resolved.get(w.name, [])))
        for n in nodes:
            out.setdefault(n, []).append(window_name(monitor, w))
    return out


def monitor_route(
    monitor: TrainingJobMonitor,
    policy: EffectivePolicy,
    names: Names,
    resolved_nodes: dict[str, list[str]] | None = None,
    match_namespace: bool = True,
) -> Route:
    """The sub-tree for one monitor. `resolved_nodes` maps a maintenance window to the nodes its
    nodeSelector matched (the operator knows them; the CLI does not)."""
    node_windows = _node_windows(monitor, policy, resolved_nodes or {})
    matchers = [eq("training_job", monitor.name)]
    if match_namespace:
        matchers.insert(0, eq("namespace", monitor.namespace))
    return {
        "receiver": names.dashboard,
        "group_by": list(GROUP_BY),
        "matchers": matchers,
        "routes": [_severity_route(s, monitor, policy, names, node_windows) for s in SEVERITIES],
    }
