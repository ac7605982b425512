"""Alertmanager configuration for monitors, assembled for a plain Alertmanager (`alertmanager_yml`) or
for prometheus-operator (`alertmanager_config_spec`, an AlertmanagerConfig whose names are local to
the object).

The parts are built once, in alertmanager.yml's shape with structured matchers: the route tree in
render/routing.py, inhibition in render/inhibition.py, time intervals in render/time_intervals.py and
receivers in render/receivers.py. Here they are only written out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.api.monitor import TrainingJobMonitor
from trainguard.render.inhibition import NODE_DOWN_INHIBIT, InhibitRule, inhibit_rules
from trainguard.render.policy import EffectivePolicy
from trainguard.render.receivers import amc_receivers, plain_receivers
from trainguard.render.routing import GROUP_BY, TIMING, Names, Route, monitor_route
from trainguard.render.time_intervals import time_intervals

DASHBOARD = "trainguard-dashboard"
"""The catch-all receiver of alertmanager.yml: notifies no one, the alerts stay visible in the UI."""


def plain_route(route: Route) -> dict[str, Any]:
    """A route in alertmanager.yml's form: matchers as text."""
    out = dict(route)
    if "matchers" in route:
        out["matchers"] = [m.text() for m in route["matchers"]]
    if "routes" in route:
        out["routes"] = [plain_route(r) for r in route["routes"]]
    return out


def alertmanager_yml(
    monitors: Sequence[tuple[TrainingJobMonitor, EffectivePolicy]],
    resolved_nodes: dict[tuple[str, str], dict[str, list[str]]] | None = None,
) -> dict[str, Any]:
    """A complete alertmanager.yml for a plain Alertmanager serving every given monitor."""
    names = Names(receiver=lambda r: r.key, interval=lambda n: n, dashboard=DASHBOARD)
    receivers: dict[str, dict[str, Any]] = {DASHBOARD: {"name": DASHBOARD}}
    routes: list[Route] = []
    inhibits: list[InhibitRule] = []
    intervals: list[dict[str, Any]] = []
    for monitor, policy in monitors:
        for r in policy.receivers:
            for receiver in plain_receivers(r.key, r.receiver):
                receivers.setdefault(receiver["name"], receiver)
        nodes = (resolved_nodes or {}).get((monitor.namespace, monitor.name), {})
        routes.append(monitor_route(monitor, policy, names, nodes))
        if policy.inhibition.node_down and NODE_DOWN_INHIBIT not in inhibits:
            inhibits.insert(0, NODE_DOWN_INHIBIT)
        inhibits += inhibit_rules(monitor, policy)
        intervals += time_intervals(monitor, policy, names.interval, with_location=True)
    config: dict[str, Any] = {
        "route": {
            "receiver": DASHBOARD,
            "group_by": list(GROUP_BY),
            **TIMING["P3"],
            "routes": [plain_route(r) for r in routes],
        },
        "receivers": list(receivers.values()),
        "inhibit_rules": [rule.plain() for rule in inhibits],
    }
    if intervals:
        config["time_intervals"] = intervals
    return config


# ---- AlertmanagerConfig (prometheus-operator) ---------------------------------------------------

_CAMEL = re.compile(r"_([a-z])")


def _camel(key: str) -> str:
    return _CAMEL.sub(lambda m: m.group(1).upper(), key)


def _amc_route(route: Route) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in route.items():
        if key == "matchers":
            out["matchers"] = [m.resource() for m in value]
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


OPERATOR_RECEIVER = "trainguard-operator"


@dataclass(frozen=True)
class OperatorReceiver:
    """Where Alertmanager posts the job's P0 and P1 alerts for the operator to act on: its receiver's
    base URL and the Secret (in the monitor's namespace) holding the bearer token and the CA."""

    url: str
    secret: str
    token_key: str = "alertmanager-token"
    ca_key: str | None = "ca.crt"

    def resource(self) -> dict[str, Any]:
        http: dict[str, Any] = {
            "authorization": {"type": "Bearer", "credentials": {"name": self.secret, "key": self.token_key}}
        }
        if self.ca_key:
            http["tlsConfig"] = {"ca": {"secret": {"name": self.secret, "key": self.ca_key}}}
        webhook = {"url": self.url.rstrip("/") + "/v1/alerts", "sendResolved": True, "httpConfig": http}
        return {"name": OPERATOR_RECEIVER, "webhookConfigs": [webhook]}


def alertmanager_config_spec(
    monitor: TrainingJobMonitor,
    policy: EffectivePolicy,
    inline_secret: str,
    resolved_nodes: dict[str, list[str]] | None = None,
    operator: OperatorReceiver | None = None,
) -> dict[str, Any]:
    """The spec of the monitor's AlertmanagerConfig; prometheus-operator adds the namespace matcher."""
    local = Names(
        receiver=lambda r: r.receiver.name,
        interval=lambda n: n.rsplit("/", 1)[-1],
        dashboard="dashboard",
        operator=OPERATOR_RECEIVER if operator is not None else None,
    )
    route = monitor_route(monitor, policy, local, resolved_nodes, match_namespace=False)
    receivers = [{"name": "dashboard"}]
    seen = {"dashboard", OPERATOR_RECEIVER}
    if operator is not None:
        receivers.append(operator.resource())
    for r in reversed(policy.receivers):
        if r.receiver.name not in seen:
            seen.add(r.receiver.name)
            receivers += amc_receivers(r.receiver.name, r.receiver, inline_secret)
    spec: dict[str, Any] = {
        "route": _amc_route(route),
        "receivers": receivers[:1] + sorted(receivers[1:], key=lambda x: x["name"]),
        "inhibitRules": [rule.resource() for rule in inhibit_rules(monitor, policy, match_namespace=False)],
    }
    intervals = time_intervals(monitor, policy, local.interval, with_location=False)
    if intervals:
        spec["muteTimeIntervals"] = [
            {"name": i["name"], "timeIntervals": [_amc_interval(e) for e in i["time_intervals"]]}
            for i in intervals
        ]
    return spec
