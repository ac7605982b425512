"""The Alertmanager route tree of a monitor: severity routes, delivery to each receiver, quiet-hours and
maintenance muting, and the morning report's route.

A severity route matches the alert's grade in `priority` (catalog/severity.py), which every rule and
every alert the operator posts carries in both severity styles: the same tree routes either.

The tree is built once in Alertmanager's own (snake_case) shape with structured matchers; the
assemblers in render/alertmanager.py write it out for each output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog import ALERTS, SEVERITIES
from trainguard.catalog.alerts import Scope
from trainguard.catalog.severity import PRIORITY
from trainguard.render.matchers import eq, one_of
from trainguard.render.policy import PAGING_ROLES, EffectivePolicy, PolicyReceiver
from trainguard.render.receivers import receiver_name
from trainguard.render.time_intervals import quiet_hours_name, window_name

GROUP_BY = ["namespace", "training_job", "alertname", "node"]
JOB_GROUP_BY = ["namespace", "training_job", "alertname"]
"""How P2 and P3 reach people: one mail or ticket per alert of a job, listing its nodes, where one per
node and alert told the same story several times (a slow data loader on every pod of the job)."""
RACK_GROUP_BY = ["namespace", "training_job"]
"""How a rack-level alert and the per-node alerts it supersedes reach people: in one group of the job.
The rack alert carries a rack and no node, its detail a node and no rack, so only the job's labels are
shared; while it fires it inhibits them (render/inhibition.py), and the group's next notification
names the rack instead of one more node."""

TIMING: dict[str, dict[str, str]] = {
    # group_interval: a P0 that fires again on a node, after its first resolved, joins the group that
    # still holds it (Alertmanager removes an empty group up to 30 s after its last notification) and
    # waits for the group's next tick, so the interval bounds how late the repeat pages; shorter than
    # the evaluation interval, a tick falls between the resolving evaluation and the firing one, or the
    # tick finds the alert firing as last notified and the repeat waits for repeat_interval
    "P0": {"group_wait": "5s", "group_interval": "10s", "repeat_interval": "30m"},
    "P1": {"group_wait": "30s", "group_interval": "5m", "repeat_interval": "2h"},
    "P2": {"group_wait": "1m", "group_interval": "10m", "repeat_interval": "12h"},
    "P3": {"group_wait": "5m", "group_interval": "30m", "repeat_interval": "24h"},
}
MORNING_REPORT = "TrainguardMorningReport"
"""The alert the operator posts at the end of a monitor's quiet hours: what fired overnight, in its
annotations (diagnosis/morning.py). It carries `night`, the local end of the quiet hours it
covers, so that each night's report is a group of its own."""
REPORT_TIMING: dict[str, Any] = {
    "group_by": ["namespace", "training_job", "alertname", "night"],
    "group_wait": "10s",
    "group_interval": "5m",
    "repeat_interval": "24h",
}
"""One notification per report: it is active until the next night starts, less than a day."""
REPORT_ROLES = frozenset({"im", "email"})
QUIETED_ROLES = PAGING_ROLES | {"im"}

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


def _unique(receivers: Sequence[PolicyReceiver]) -> list[PolicyReceiver]:
    """One per name, the later policy's winning, as EffectivePolicy.receiver resolves names."""
    seen: dict[str, PolicyReceiver] = {}
    for r in receivers:
        seen[r.receiver.name] = r
    return list(seen.values())


def paging_receivers(policy: EffectivePolicy) -> list[PolicyReceiver]:
    """The receivers that ring a phone (a phone or sms role): at night they ring for the allowlist only,
    whatever the alert's severity."""
    return [r for r in _unique(policy.receivers) if PAGING_ROLES & set(r.receiver.roles)]


def report_receivers(policy: EffectivePolicy) -> list[PolicyReceiver]:
    """Where the morning report goes: the receivers with an im or email role."""
    return [r for r in _unique(policy.receivers) if REPORT_ROLES & set(r.receiver.roles)]


def _quieted(r: PolicyReceiver) -> bool:
    """Receivers quiet hours silence: the phone and IM (e-mail and tickets wake no one)."""
    return bool(QUIETED_ROLES & set(r.receiver.roles))


def _delivery(
    severity: str,
    monitor: TrainingJobMonitor,
    policy: EffectivePolicy,
    names: Names,
    mutes: Sequence[str],
) -> list[Route]:
    """One route per receiver, each with continue, so every receiver of the severity is notified.

    With quiet hours, the phone and IM receivers of the severity are muted at night; at night the
    allowlist reaches them anyway and, whatever the severity, every paging receiver too. The rest of
    the night is in the morning report (diagnosis/morning.py); e-mail and tickets are
    delivered by night as by day. Maintenance windows (`mutes`) mute every route, night ones included.
    """
    own = policy.receivers_for(severity)
    quiet = policy.quiet_hours.enabled
    quiet_name = names.interval(quiet_hours_name(monitor))
    night_only = [p for p in paging_receivers(policy) if p.key not in {r.key for r in own}] if quiet else []
    out: list[Route] = []
    for r in own:
        base: Route = {"receiver": _name(names, r, severity)}
        if mutes:
            base["mute_time_intervals"] = list(mutes)
        base["continue"] = True
        if not quiet or not _quieted(r):
            out.append(base)
            continue
        # by day: as usual
        out.append(base | {"mute_time_intervals": [*mutes, quiet_name]})
        out.append(_night(r, severity, policy=policy, names=names, mutes=mutes, quiet_name=quiet_name))
    # at night the allowlist rings the phone whatever its severity
    out += [
        _night(p, severity, policy=policy, names=names, mutes=mutes, quiet_name=quiet_name)
        for p in night_only
    ]
    return out


def _name(names: Names, r: PolicyReceiver, severity: str) -> str:
    """The receiver's name in a route of `severity`: its variant told of resolutions where it has one."""
    return receiver_name(names.receiver(r), r.receiver, severity)


def _night(
    r: PolicyReceiver,
    severity: str,
    *,
    policy: EffectivePolicy,
    names: Names,
    mutes: Sequence[str],
    quiet_name: str,
) -> Route:
    return (
        {
            "receiver": _name(names, r, severity),
            "matchers": [one_of("alertname", policy.quiet_hours.allowlist)],
        }
        | ({"mute_time_intervals": list(mutes)} if mutes else {})
        | {"active_time_intervals": [quiet_name], "continue": True}
    )


def _report_route(monitor: TrainingJobMonitor, policy: EffectivePolicy, names: Names) -> Route | None:
    """The morning report's own route, after the severity routes (it has no `priority`, so it matches
    none of them): to the im and email receivers, one group per night (the report's `night` label), muted during
    quiet hours so that its end (it lasts until the next night starts) notifies no one."""
    if not policy.quiet_hours.enabled:
        return None
    quiet_name = names.interval(quiet_hours_name(monitor))
    delivery: list[Route] = [
        {"receiver": names.receiver(r), "mute_time_intervals": [quiet_name], "continue": True}
        for r in report_receivers(policy)
    ]
    route: Route = {
        "receiver": names.dashboard,
        "matchers": [eq("alertname", MORNING_REPORT)],
        **REPORT_TIMING,
    }
    if delivery:
        route["routes"] = delivery
    return route


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
    route: Route = {"receiver": names.dashboard, "matchers": [eq(PRIORITY, severity)], **timing}
    children: list[Route] = []
    if names.operator and severity in OPERATOR_SEVERITIES:
        # the operator acts on each node's alerts as they come: its groups stay per node and alert
        children.append({"receiver": names.operator, "continue": True})
    people = _maintenance(severity, monitor, policy, names, node_windows)
    delivery = _delivery(severity, monitor, policy, names, [])
    if delivery:
        # after the nodes under maintenance, which mute the per-node alerts of a family there: the
        # rack alert has no node, and copying the maintenance routes into the family doubled them
        people += [
            {"receiver": names.dashboard, "matchers": [one_of("alertname", family)],
             "group_by": list(RACK_GROUP_BY), "routes": delivery}
            for family in rack_families(policy, severity)
        ]  # fmt: skip
        people += delivery
    if severity not in OPERATOR_SEVERITIES:
        people = [r if "group_by" in r else r | {"group_by": list(JOB_GROUP_BY)} for r in people]
    children += people
    if children:
        route["routes"] = children
    return route


def rack_families(policy: EffectivePolicy, severity: str) -> list[list[str]]:
    """Each enabled rack-scope alert of `severity` with the alerts of that severity it supersedes: one
    event, one group (an alert a policy moved to another severity is routed, and grouped, there)."""
    graded = {a.alert.name for a in policy.enabled_alerts() if a.severity == severity}
    return [
        [a.name, *(t for t in a.supersedes if t in graded)]
        for a in ALERTS
        if a.scope is Scope.RACK and a.name in graded
    ]


def _maintenance(
    severity: str,
    monitor: TrainingJobMonitor,
    policy: EffectivePolicy,
    names: Names,
    node_windows: dict[str, list[str]],
) -> list[Route]:
    """The nodes under maintenance: the severity's delivery, muted during their windows."""
    out: list[Route] = []
    by_windows: dict[tuple[str, ...], list[str]] = {}
    for node, covering in sorted(node_windows.items()):
        by_windows.setdefault(tuple(covering), []).append(node)
    for windows, nodes in by_windows.items():
        delivery = _delivery(severity, monitor, policy, names, [names.interval(w) for w in windows])
        if delivery:
            out.append({"receiver": names.dashboard, "matchers": [one_of("node", nodes)], "routes": delivery})
    return out


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
    routes = [_severity_route(s, monitor, policy, names, node_windows) for s in SEVERITIES]
    report = _report_route(monitor, policy, names)
    return {
        "receiver": names.dashboard,
        "group_by": list(GROUP_BY),
        "matchers": matchers,
        "routes": [*routes, report] if report else routes,
    }
