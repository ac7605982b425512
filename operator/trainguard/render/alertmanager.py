"""Alertmanager routing for monitors: routes by severity, inhibition, quiet hours, maintenance windows.

The route tree is built once in Alertmanager's own (snake_case) shape; `alertmanager_yml` wraps it in a
complete configuration and `alertmanager_config_spec` converts it to a prometheus-operator
AlertmanagerConfig, whose names are local to the object.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from trainguard.api.monitor import TrainingJobMonitor
from trainguard.api.policy import MaintenanceWindow, QuietHours, Receiver
from trainguard.catalog import ALERTS, SEVERITIES
from trainguard.render.policy import PAGING_ROLES, EffectivePolicy, PolicyReceiver

GROUP_BY = ["namespace", "training_job", "alertname", "node"]
DASHBOARD = "trainguard-dashboard"
SECRETS_DIR = "/etc/alertmanager/secrets"

TIMING: dict[str, dict[str, str]] = {
    "P0": {"group_wait": "5s", "group_interval": "1m", "repeat_interval": "30m"},
    "P1": {"group_wait": "30s", "group_interval": "5m", "repeat_interval": "2h"},
    "P2": {"group_wait": "1m", "group_interval": "10m", "repeat_interval": "12h"},
    "P3": {"group_wait": "5m", "group_interval": "30m", "repeat_interval": "24h"},
}
SUMMARY_TIMING = {"group_by": ["namespace", "training_job"], "group_interval": "1h", "repeat_interval": "12h"}
"""Quiet-hours digest for IM: one notification per job and hour instead of one per alert."""

Route = dict[str, Any]


def _eq(name: str, value: str) -> str:
    return f'{name}="{value}"'


_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def _re(name: str, values: Sequence[str]) -> str:
    """An anchored alternation; only RE2's metacharacters are escaped, so names stay readable."""
    pattern = "|".join(_RE2_SPECIAL.sub(r"\\\1", v) for v in values)
    return f'{name}=~"{pattern}"'


@dataclass(frozen=True)
class Names:
    """How receivers and time intervals are named in one output."""

    receiver: Callable[[PolicyReceiver], str]
    interval: Callable[[str], str]
    dashboard: str


def _quiet_name(monitor: TrainingJobMonitor) -> str:
    return f"{monitor.namespace}/{monitor.name}/quiet-hours"


def _window_name(monitor: TrainingJobMonitor, window: MaintenanceWindow) -> str:
    return f"{monitor.namespace}/{monitor.name}/maintenance-{window.name}"


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
    quiet_name = names.interval(_quiet_name(monitor))
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
                {"receiver": base["receiver"], "matchers": [_re("alertname", policy.quiet_hours.allowlist)]}
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
    route: Route = {"receiver": names.dashboard, "matchers": [_eq("severity", severity)], **timing}
    children: list[Route] = []
    # nodes under maintenance: the same delivery, muted during their windows
    by_windows: dict[tuple[str, ...], list[str]] = {}
    for node, covering in sorted(node_windows.items()):
        by_windows.setdefault(tuple(covering), []).append(node)
    for windows, nodes in by_windows.items():
        delivery = _delivery(severity, monitor, policy, names, [names.interval(w) for w in windows])
        if delivery:
            children.append(
                {"receiver": names.dashboard, "matchers": [_re("node", nodes)], "routes": delivery}
            )
    children += _delivery(severity, monitor, policy, names, [])
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
            out.setdefault(n, []).append(_window_name(monitor, w))
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
    matchers = [_eq("training_job", monitor.name)]
    if match_namespace:
        matchers.insert(0, _eq("namespace", monitor.namespace))
    return {
        "receiver": names.dashboard,
        "group_by": list(GROUP_BY),
        "matchers": matchers,
        "routes": [_severity_route(s, monitor, policy, names, node_windows) for s in SEVERITIES],
    }


NODE_DOWN_INHIBIT: dict[str, Any] = {
    # a node that is down explains every other alert on it, whichever job raised it; the target must
    # have a node, since Alertmanager counts two missing labels as equal
    "source_matchers": [_eq("alertname", "GPUNodeDown")],
    "target_matchers": ['alertname!="GPUNodeDown"', 'node=~".+"'],
    "equal": ["node"],
}


def inhibit_rules(
    monitor: TrainingJobMonitor, policy: EffectivePolicy, match_namespace: bool = True
) -> list[dict[str, Any]]:
    """The monitor's inhibitions. The node-down rule is cluster-wide, so not among them when
    `match_namespace` (plain Alertmanager: added once, see alertmanager_yml); prometheus-operator
    scopes an AlertmanagerConfig's rules to its namespace anyway."""
    job = [_eq("training_job", monitor.name)]
    if match_namespace:
        job.insert(0, _eq("namespace", monitor.namespace))
    rules: list[dict[str, Any]] = []
    if policy.inhibition.node_down and not match_namespace:
        rules.append(NODE_DOWN_INHIBIT)
    if policy.inhibition.job_p0:
        rules.append(
            {
                "source_matchers": [*job, _eq("severity", "P0")],
                "target_matchers": [*job, _re("severity", ["P1", "P2", "P3"])],
                "equal": ["namespace", "training_job"],
            }
        )
    if policy.inhibition.supersede:
        enabled = {a.name for a in policy.enabled_alerts()}
        for a in ALERTS:
            targets = [t for t in a.supersedes if t in enabled]
            if a.name in enabled and targets:
                rules.append(
                    {
                        "source_matchers": [*job, _eq("alertname", a.name)],
                        "target_matchers": [*job, _re("alertname", targets)],
                        "equal": list(a.scope.labels),
                    }
                )
    return rules


# ---- time intervals -----------------------------------------------------------------------------


def _times(start: str, end: str) -> list[dict[str, str]]:
    if start < end:
        return [{"start_time": start, "end_time": end}]
    out = [{"start_time": start, "end_time": "24:00"}]
    if end != "00:00":
        out.append({"start_time": "00:00", "end_time": end})
    return out


def quiet_hours_interval(q: QuietHours, with_location: bool) -> list[dict[str, Any]]:
    """Quiet hours as Alertmanager time intervals. Without `location` (AlertmanagerConfig has none),
    times and weekdays are moved to UTC with the zone's standard offset: an hour off in
    daylight-saving time."""
    start, end, day_shift = q.start, q.end, 0
    if not with_location and q.timezone != "UTC":
        offset = zoneinfo.ZoneInfo(q.timezone).utcoffset(datetime(2026, 1, 15)) or timedelta()
        shift = -int(offset.total_seconds() // 60)

        def minutes(hhmm: str) -> int:
            h, m = map(int, hhmm.split(":"))
            return h * 60 + m + shift

        def hhmm(total: int) -> str:
            total %= 24 * 60
            return f"{total // 60:02d}:{total % 60:02d}"

        day_shift = minutes(start) // (24 * 60)  # -1, 0 or 1: the UTC day the local evening starts on
        start, end = hhmm(minutes(start)), hhmm(minutes(end))
    days = [_DAYS[(_DAYS.index(d) + day_shift) % 7] for d in q.weekdays]
    out: list[dict[str, Any]] = []
    times = _times(start, end)
    if days and start > end:
        # the part after midnight belongs to the day after each named day
        out.append({"times": times[:1], "weekdays": days})
        if len(times) > 1:
            out.append({"times": times[1:], "weekdays": [_DAYS[(_DAYS.index(d) + 1) % 7] for d in days]})
    else:
        entry: dict[str, Any] = {"times": times}
        if days:
            entry["weekdays"] = days
        out.append(entry)
    if with_location and q.timezone != "UTC":
        for e in out:
            e["location"] = q.timezone
    return out


_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def maintenance_interval(w: MaintenanceWindow) -> list[dict[str, Any]]:
    """An absolute window as one interval a UTC day (Alertmanager has no absolute ranges)."""
    start = w.start.astimezone(zoneinfo.ZoneInfo("UTC"))
    end = w.end.astimezone(zoneinfo.ZoneInfo("UTC"))
    out = []
    day = start.replace(hour=0, minute=0, second=0, microsecond=0)
    while day < end:
        nxt = day + timedelta(days=1)
        lo = max(start, day)
        hi = min(end, nxt)
        out.append(
            {
                "times": [
                    {
                        "start_time": lo.strftime("%H:%M"),
                        "end_time": "24:00" if hi == nxt else hi.strftime("%H:%M"),
                    }
                ],
                "days_of_month": [str(day.day)],
                "months": [str(day.month)],
                "years": [str(day.year)],
            }
        )
        day = nxt
    return out


def time_intervals(
    monitor: TrainingJobMonitor, policy: EffectivePolicy, names: Names, with_location: bool
) -> list[dict[str, Any]]:
    out = []
    if policy.quiet_hours.enabled:
        out.append(
            {
                "name": names.interval(_quiet_name(monitor)),
                "time_intervals": quiet_hours_interval(policy.quiet_hours, with_location),
            }
        )
    for w in policy.maintenance_windows:
        out.append(
            {"name": names.interval(_window_name(monitor, w)), "time_intervals": maintenance_interval(w)}
        )
    return out


# ---- receivers ----------------------------------------------------------------------------------


def _secret_file(ref: Any) -> str:
    return f"{SECRETS_DIR}/{ref.name}/{ref.key}"


def plain_receiver(name: str, r: Receiver) -> dict[str, Any]:
    """A receiver of alertmanager.yml; Secret references become files under /etc/alertmanager/secrets."""
    resolved: dict[str, Any] = {"send_resolved": r.send_resolved}
    if r.type in ("webhook", "dingtalk", "feishu"):
        cfg = resolved | ({"url": r.url} if r.url else {"url_file": _secret_file(r.url_secret_ref)})
        return {"name": name, "webhook_configs": [cfg]}
    if r.type == "slack":
        cfg = resolved | ({"api_url": r.url} if r.url else {"api_url_file": _secret_file(r.url_secret_ref)})
        if r.channel:
            cfg["channel"] = r.channel
        return {"name": name, "slack_configs": [cfg]}
    if r.type == "pagerduty":
        cfg = resolved | {"routing_key_file": _secret_file(r.routing_key_secret_ref)}
        if r.url:
            cfg["url"] = r.url
        return {"name": name, "pagerduty_configs": [cfg]}
    if r.type == "email":
        cfg = resolved | {"to": r.to, "from": r.from_, "smarthost": r.smarthost}
        if r.auth_password_secret_ref:
            cfg["auth_password_file"] = _secret_file(r.auth_password_secret_ref)
        return {"name": name, "email_configs": [cfg]}
    # wecom
    cfg = resolved | {"corp_id": r.corp_id, "api_secret_file": _secret_file(r.api_secret_secret_ref)}
    for key, value in (("agent_id", r.agent_id), ("to_user", r.to), ("api_url", r.url)):
        if value:
            cfg[key] = value
    return {"name": name, "wechat_configs": [cfg]}


def _plain_names() -> Names:
    return Names(receiver=lambda r: r.key, interval=lambda n: n, dashboard=DASHBOARD)


def alertmanager_yml(
    monitors: Sequence[tuple[TrainingJobMonitor, EffectivePolicy]],
    resolved_nodes: dict[tuple[str, str], dict[str, list[str]]] | None = None,
) -> dict[str, Any]:
    """A complete alertmanager.yml for a plain Alertmanager serving every given monitor."""
    names = _plain_names()
    receivers: dict[str, dict[str, Any]] = {DASHBOARD: {"name": DASHBOARD}}
    routes: list[Route] = []
    inhibits: list[dict[str, Any]] = []
    intervals: list[dict[str, Any]] = []
    for monitor, policy in monitors:
        for r in policy.receivers:
            receivers.setdefault(r.key, plain_receiver(r.key, r.receiver))
        nodes = (resolved_nodes or {}).get((monitor.namespace, monitor.name), {})
        routes.append(monitor_route(monitor, policy, names, nodes))
        if policy.inhibition.node_down and NODE_DOWN_INHIBIT not in inhibits:
            inhibits.insert(0, NODE_DOWN_INHIBIT)
        inhibits += inhibit_rules(monitor, policy)
        intervals += time_intervals(monitor, policy, names, with_location=True)
    config: dict[str, Any] = {
        "route": {
            "receiver": DASHBOARD,
            "group_by": list(GROUP_BY),
            **TIMING["P3"],
            "routes": routes,
        },
        "receivers": list(receivers.values()),
        "inhibit_rules": inhibits,
    }
    if intervals:
        config["time_intervals"] = intervals
    return config


# ---- AlertmanagerConfig (prometheus-operator) ---------------------------------------------------

_CAMEL = re.compile(r"_([a-z])")


def _camel(key: str) -> str:
    return _CAMEL.sub(lambda m: m.group(1).upper(), key)


def _matcher(text: str) -> dict[str, str]:
    m = re.match(r'^([a-zA-Z_][a-zA-Z0-9_]*)(=~|!~|!=|=)"(.*)"$', text)
    if m is None:  # pragma: no cover - every matcher here is built by _eq or _re
        raise ValueError(text)
    return {"name": m.group(1), "matchType": m.group(2), "value": m.group(3)}


def _amc_route(route: Route) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in route.items():
        if key == "matchers":
            out["matchers"] = [_matcher(m) for m in value]
        elif key == "routes":
            out["routes"] = [_amc_route(r) for r in value]
        else:
            out[_camel(key)] = value
    return out


def _amc_interval(entry: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in entry.items():
        if key == "times":
            out["times"] = [{"startTime": t["start_time"], "endTime": t["end_time"]} for t in value]
        elif key == "days_of_month":
            out["daysOfMonth"] = [{"start": int(d), "end": int(d)} for d in value]
        else:
            out[_camel(key)] = value
    return out


def _secret_ref(ref: Any) -> dict[str, str]:
    return {"name": ref.name, "key": ref.key}


def amc_receiver(name: str, r: Receiver, inline_secret: str) -> dict[str, Any]:
    """A receiver of an AlertmanagerConfig. Slack's URL must come from a Secret there, so an inline
    one is read from the monitor's generated receiver Secret (`inline_secret`)."""
    base: dict[str, Any] = {"sendResolved": r.send_resolved}
    if r.type in ("webhook", "dingtalk", "feishu"):
        cfg = base | ({"url": r.url} if r.url else {"urlSecret": _secret_ref(r.url_secret_ref)})
        return {"name": name, "webhookConfigs": [cfg]}
    if r.type == "slack":
        api = (
            _secret_ref(r.url_secret_ref)
            if r.url_secret_ref
            else {"name": inline_secret, "key": f"{r.name}-url"}
        )
        cfg = base | {"apiURL": api}
        if r.channel:
            cfg["channel"] = r.channel
        return {"name": name, "slackConfigs": [cfg]}
    if r.type == "pagerduty":
        cfg = base | {"routingKey": _secret_ref(r.routing_key_secret_ref)}
        if r.url:
            cfg["url"] = r.url
        return {"name": name, "pagerdutyConfigs": [cfg]}
    if r.type == "email":
        cfg = base | {"to": r.to, "from": r.from_, "smarthost": r.smarthost}
        if r.auth_password_secret_ref:
            cfg["authPassword"] = _secret_ref(r.auth_password_secret_ref)
        return {"name": name, "emailConfigs": [cfg]}
    cfg = base | {"corpID": r.corp_id, "apiSecret": _secret_ref(r.api_secret_secret_ref)}
    for key, value in (("agentID", r.agent_id), ("toUser", r.to), ("apiURL", r.url)):
        if value:
            cfg[key] = value
    return {"name": name, "wechatConfigs": [cfg]}


def inline_secret_data(policy: EffectivePolicy) -> dict[str, str]:
    """Values an AlertmanagerConfig can only read from a Secret but the policy gave inline."""
    return {
        f"{r.receiver.name}-url": r.receiver.url
        for r in policy.receivers
        if r.receiver.type == "slack" and r.receiver.url
    }


def alertmanager_config_spec(
    monitor: TrainingJobMonitor,
    policy: EffectivePolicy,
    inline_secret: str,
    resolved_nodes: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """The spec of the monitor's AlertmanagerConfig; prometheus-operator adds the namespace matcher."""
    local = Names(
        receiver=lambda r: r.receiver.name,
        interval=lambda n: n.rsplit("/", 1)[-1],
        dashboard="dashboard",
    )
    route = monitor_route(monitor, policy, local, resolved_nodes, match_namespace=False)
    receivers = [{"name": "dashboard"}]
    seen = {"dashboard"}
    for r in reversed(policy.receivers):
        if r.receiver.name not in seen:
            seen.add(r.receiver.name)
            receivers.append(amc_receiver(r.receiver.name, r.receiver, inline_secret))
    spec: dict[str, Any] = {
        "route": _amc_route(route),
        "receivers": receivers[:1] + sorted(receivers[1:], key=lambda x: x["name"]),
        "inhibitRules": [
            {
                "sourceMatch": [_matcher(m) for m in rule["source_matchers"]],
                "targetMatch": [_matcher(m) for m in rule["target_matchers"]],
                "equal": rule["equal"],
            }
            for rule in inhibit_rules(monitor, policy, match_namespace=False)
        ],
    }
    intervals = time_intervals(monitor, policy, local, with_location=False)
    if intervals:
        spec["muteTimeIntervals"] = [
            {"name": i["name"], "timeIntervals": [_amc_interval(e) for e in i["time_intervals"]]}
            for i in intervals
        ]
    return spec
