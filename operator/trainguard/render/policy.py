"""Merging a monitor's AlertPolicies, in the order it names them, into one effective policy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainguard.api.monitor import TrainingJobMonitor
from trainguard.api.policy import (
    AlertPolicy,
    CustomRule,
    Escalation,
    Inhibition,
    MaintenanceWindow,
    QuietHours,
    Receiver,
    SeverityRoute,
)
from trainguard.api.policy import AlertPolicySpec as _Spec
from trainguard.catalog import ALERTS, MODE_PROFILES, SEVERITIES, Alert

DEFAULT_ROLES_BY_SEVERITY: dict[str, tuple[str, ...]] = {
    "P0": ("phone", "sms", "im"),
    "P1": ("im",),
    "P2": ("email", "ticket"),
    "P3": (),
}
"""docs/architecture.md, "Routing defaults": which receiver roles each severity reaches when no route
says otherwise."""

PAGING_ROLES = frozenset({"phone", "sms"})


@dataclass(frozen=True)
class EffectiveAlert:
    alert: Alert
    enabled: bool
    severity: str
    for_: str
    params: dict[str, float]

    @property
    def name(self) -> str:
        return self.alert.name

    def p(self, name: str) -> float:
        return self.params[name]


@dataclass(frozen=True)
class PolicyReceiver:
    """A receiver with the policy it came from, which makes its name unique cluster-wide."""

    policy: str
    namespace: str
    receiver: Receiver

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.policy}/{self.receiver.name}"


@dataclass(frozen=True)
class EffectivePolicy:
    alerts: tuple[EffectiveAlert, ...]
    custom_rules: tuple[CustomRule, ...]
    receivers: tuple[PolicyReceiver, ...]
    routes: dict[str, SeverityRoute]
    escalation: Escalation
    quiet_hours: QuietHours
    maintenance_windows: tuple[MaintenanceWindow, ...]
    inhibition: Inhibition
    runbook_base_url: str

    def enabled_alerts(self) -> list[EffectiveAlert]:
        return [a for a in self.alerts if a.enabled]

    def receiver(self, name: str) -> PolicyReceiver:
        # later policies win on a name clash, as for every other setting
        for r in reversed(self.receivers):
            if r.receiver.name == name:
                return r
        raise KeyError(name)

    def receivers_for(self, severity: str) -> list[PolicyReceiver]:
        """Receivers a severity notifies: its explicit route, else the receivers with a matching role."""
        route = self.routes.get(severity)
        if route is not None:
            return [self.receiver(n) for n in route.receivers]
        roles = set(DEFAULT_ROLES_BY_SEVERITY[severity])
        return [r for r in self._unique_receivers() if roles & set(r.receiver.roles)]

    def _unique_receivers(self) -> list[PolicyReceiver]:
        seen: dict[str, PolicyReceiver] = {}
        for r in self.receivers:
            seen[r.receiver.name] = r
        return list(seen.values())


def effective_policy(monitor: TrainingJobMonitor, policies: Sequence[AlertPolicy]) -> EffectivePolicy:
    """Catalogue defaults, filtered by the monitor's mode, then each policy's overrides in order."""
    mode = monitor.spec.mode
    overrides: dict[str, dict[str, object]] = {}
    custom: dict[str, CustomRule] = {}
    receivers: list[PolicyReceiver] = []
    routes: dict[str, SeverityRoute] = {}
    windows: dict[str, MaintenanceWindow] = {}
    spec = _Spec()
    escalation, quiet, inhibition, runbook = (
        spec.escalation,
        spec.quiet_hours,
        spec.inhibition,
        spec.runbook_base_url,
    )
    for policy in policies:
        s = policy.spec
        for o in s.alerts:
            merged = overrides.setdefault(o.name, {"params": {}})
            for key in ("enabled", "severity", "for_"):
                value = getattr(o, key)
                if value is not None:
                    merged[key] = value
            params = dict(merged["params"])  # type: ignore[call-overload]
            if o.threshold is not None:
                params[_primary(o.name)] = o.threshold
            params.update(o.params)
            merged["params"] = params
        for rule in s.custom_rules:
            custom[rule.name] = rule
        receivers.extend(PolicyReceiver(policy.name, policy.namespace, r) for r in s.receivers)
        for route in s.routes:
            routes[route.severity] = route
        for w in s.maintenance_windows:
            windows[w.name] = w
        if _given(s, "escalation"):
            escalation = s.escalation
        if _given(s, "quiet_hours"):
            quiet = s.quiet_hours
        if _given(s, "inhibition"):
            inhibition = s.inhibition
        if _given(s, "runbook_base_url"):
            runbook = s.runbook_base_url

    alerts = []
    for a in ALERTS:
        change = overrides.get(a.name, {})
        params = {p.name: p.default for p in a.params}
        params.update(MODE_PROFILES[mode].get(a.name, {}))
        params.update(change.get("params", {}))  # type: ignore[call-overload]
        alerts.append(
            EffectiveAlert(
                alert=a,
                enabled=bool(change.get("enabled", mode in a.modes)),
                severity=str(change.get("severity", a.severity)),
                for_=str(change.get("for_", a.for_)),
                params=params,
            )
        )
    assert set(routes) <= set(SEVERITIES)
    return EffectivePolicy(
        alerts=tuple(alerts),
        custom_rules=tuple(custom.values()),
        receivers=tuple(receivers),
        routes=routes,
        escalation=escalation,
        quiet_hours=quiet,
        maintenance_windows=tuple(windows.values()),
        inhibition=inhibition,
        runbook_base_url=runbook,
    )


def _given(spec: _Spec, name: str) -> bool:
    """A section overrides the earlier policies' when it was written and differs from its defaults: the
    apiserver fills every defaulted section into a stored policy (the CRD carries the defaults), so a
    policy read back from the cluster has them all set, and "set" alone would let the last policy's
    defaults undo an earlier one's quiet hours or escalation."""
    if name not in spec.model_fields_set:
        return False
    field = type(spec).model_fields[name]
    return bool(getattr(spec, name) != field.get_default(call_default_factory=True))


def _primary(alert_name: str) -> str:
    for a in ALERTS:
        if a.name == alert_name:
            return a.params[0].name
    raise KeyError(alert_name)
