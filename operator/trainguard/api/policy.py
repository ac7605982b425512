"""AlertPolicy: thresholds, receivers, routing, escalation, quiet hours and maintenance windows."""

from __future__ import annotations

import re
import zoneinfo
from typing import Literal

from pydantic import AwareDatetime, Field, field_validator, model_validator

from trainguard.api.common import (
    Condition,
    Duration,
    LabelSelector,
    Metadata,
    Model,
    SecretKeyRef,
    cel,
    cel_rules,
    cel_string,
)
from trainguard.api.promql import promql_problem
from trainguard.catalog import ALERT_NAMES, ALERTS_BY_NAME
from trainguard.catalog.alerts import OPERATOR_ALERT_NAMES

Severity = Literal["P0", "P1", "P2", "P3"]
AlertName = Literal[ALERT_NAMES]  # type: ignore[valid-type]
ReceiverRole = Literal["phone", "sms", "im", "email", "ticket"]

_RULE_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_RECEIVER_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_HHMM = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
RESERVED_RULE_LABELS = ("alertname", "namespace", "priority", "severity", "training_job")
BOT_API_URL = r"(?i)^https?://([^/?#@]*@)?(oapi\.dingtalk\.com|open\.feishu\.cn|open\.larksuite\.com)\.?(:[0-9]*)?([/?#]|$)"
"""The DingTalk and Feishu (Lark) bot APIs: they take their own message format, not Alertmanager's."""
BOT_API_MESSAGE = (
    "DingTalk and Feishu bots do not accept Alertmanager's webhook payload: point url at a relay "
    "that translates it (for example prometheus-webhook-dingtalk), not at the bot API"
)
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
AllowlistName = Literal[ALERT_NAMES + OPERATOR_ALERT_NAMES]  # type: ignore[valid-type]
DEFAULT_ALLOWLIST = ("GPUMemoryCritical", "GPUNodeDown", "GPUOutOfMemory", "TrainingInterrupted")


class AlertOverride(Model):
    """Changes to one catalogue alert; anything left out keeps the catalogue default."""

    name: AlertName = Field(description="A catalogue alert name.")
    enabled: bool | None = None
    severity: Severity | None = None
    for_: Duration | None = Field(default=None, alias="for")
    threshold: float | None = Field(
        default=None, description="The alert's main parameter (see docs/alerts.md)."
    )
    params: dict[str, float] = Field(
        default_factory=dict, description="Other named parameters of the alert (see docs/alerts.md)."
    )

    @model_validator(mode="after")
    def _params_known(self) -> AlertOverride:
        known = [p.name for p in ALERTS_BY_NAME[self.name].params]
        unknown = sorted(set(self.params) - set(known))
        if unknown:
            allowed = ", ".join(known) if known else "none"
            raise ValueError(f"{self.name} has no parameter {', '.join(unknown)}; its parameters: {allowed}")
        if self.threshold is not None and not known:
            raise ValueError(f"{self.name} has no threshold; tune it through the monitor's baseline settings")
        return self


PROMETHEUS_LABEL_NAME = r"^[a-zA-Z][a-zA-Z0-9_]*$|^_[a-zA-Z0-9][a-zA-Z0-9_]*$"
PROMETHEUS_LABEL_MESSAGE = (
    "Prometheus label names: letters, digits and _, not starting with a digit or with __ "
    "(a bad one makes Prometheus drop the whole rule group)"
)


class CustomRule(Model):
    """A PromQL alert of the user's own. `$selector` in expr expands to this job's label matchers."""

    name: str = Field(pattern=_RULE_NAME, max_length=128)
    expr: str = Field(min_length=1, max_length=8192)
    for_: Duration = Field(default="0s", alias="for")
    severity: Severity
    summary: str = Field(default="", max_length=1024)
    description: str = Field(default="", max_length=4096)
    labels: dict[str, str] = Field(default_factory=dict, max_length=32)

    @field_validator("expr")
    @classmethod
    def _expr_is_promql(cls, v: str) -> str:
        problem = promql_problem(v)
        if problem:
            raise ValueError(
                f"not valid PromQL: {problem} (check it with promtool check rules, or in Prometheus' "
                "query page with $selector replaced by the job's matchers)"
            )
        return v

    @field_validator("labels")
    @classmethod
    def _labels_not_reserved(cls, v: dict[str, str]) -> dict[str, str]:
        reserved = set(RESERVED_RULE_LABELS) & set(v)
        if reserved:
            raise ValueError(f"labels must not set {', '.join(sorted(reserved))}; trainguard sets them")
        bad = sorted(k for k in v if not re.fullmatch(PROMETHEUS_LABEL_NAME, k))
        if bad:
            raise ValueError(f"label names {', '.join(map(repr, bad))} are not {PROMETHEUS_LABEL_MESSAGE}")
        return v

    @field_validator("name")
    @classmethod
    def _not_a_catalogue_alert(cls, v: str) -> str:
        if v in ALERT_NAMES:
            raise ValueError(f"{v} is a catalogue alert; override it under alerts instead")
        return v

    model_config = cel_rules(
        cel(
            f"!{list(RESERVED_RULE_LABELS)}.exists(k, k in self.labels)",
            f"labels must not set {', '.join(RESERVED_RULE_LABELS)}; trainguard sets them",
            ".labels",
        ),
        cel(
            f"self.labels.all(k, k.matches({cel_string(PROMETHEUS_LABEL_NAME)}))",
            f"label names must be {PROMETHEUS_LABEL_MESSAGE}",
            ".labels",
        ),
        cel(
            f"!(self.name in {list(ALERT_NAMES)})",
            "name is a catalogue alert; override it under alerts instead",
            ".name",
        ),
    )


class Receiver(Model):
    """Where notifications go. DingTalk and Feishu need a relay that translates Alertmanager's webhook
    payload into their bots' format (for example prometheus-webhook-dingtalk); url is the relay's."""

    name: str = Field(pattern=_RECEIVER_NAME, max_length=63)
    type: Literal["webhook", "slack", "wecom", "dingtalk", "feishu", "pagerduty", "email"]
    roles: list[ReceiverRole] = Field(
        default_factory=list,
        max_length=5,
        description="What the receiver stands for in the default routes: phone and sms (P0), im (P0, P1), "
        "email and ticket (P2).",
    )
    url: str | None = Field(default=None, pattern=r"^https?://", max_length=2048)
    url_secret_ref: SecretKeyRef | None = None
    channel: str | None = Field(default=None, max_length=256, description="Slack channel.")
    routing_key_secret_ref: SecretKeyRef | None = Field(default=None, description="PagerDuty routing key.")
    to: str | None = Field(default=None, max_length=1024, description="Email address, or WeCom user.")
    from_: str | None = Field(default=None, alias="from", max_length=256)
    smarthost: str | None = Field(default=None, pattern=r"^[^:]+:[0-9]+$", max_length=256)
    auth_password_secret_ref: SecretKeyRef | None = None
    corp_id: str | None = Field(default=None, max_length=256, description="WeCom corporation id.")
    agent_id: str | None = Field(default=None, max_length=256, description="WeCom agent id.")
    api_secret_secret_ref: SecretKeyRef | None = Field(default=None, description="WeCom API secret.")
    send_resolved: bool | None = Field(
        default=None,
        description="Send a message when an alert resolves. Unset: where it helps, by role and type: "
        "an im receiver when a page (P0) resolves, a pagerduty receiver always (it closes the incident), "
        "a receiver without a role always; phone, sms, email and ticket never.",
    )

    @model_validator(mode="after")
    def _fields_for_type(self) -> Receiver:
        has_url = self.url is not None or self.url_secret_ref is not None
        if self.url is not None and self.url_secret_ref is not None:
            raise ValueError("set url or urlSecretRef, not both")
        if self.type in ("webhook", "dingtalk", "feishu", "slack") and not has_url:
            raise ValueError(f"a {self.type} receiver needs url or urlSecretRef")
        if self.type == "pagerduty" and self.routing_key_secret_ref is None:
            raise ValueError("a pagerduty receiver needs routingKeySecretRef")
        if self.type == "email" and not (self.to and self.from_ and self.smarthost):
            raise ValueError("an email receiver needs to, from and smarthost")
        if self.type == "wecom" and not (self.corp_id and self.api_secret_secret_ref):
            raise ValueError("a wecom receiver needs corpId and apiSecretSecretRef")
        return self

    @field_validator("url")
    @classmethod
    def _not_a_bot_api(cls, v: str | None) -> str | None:
        if v is not None and re.match(BOT_API_URL, v):
            raise ValueError(BOT_API_MESSAGE)
        return v

    model_config = cel_rules(
        cel("!(has(self.url) && has(self.urlSecretRef))", "set url or urlSecretRef, not both"),
        cel(
            "!(self.type in ['webhook', 'dingtalk', 'feishu', 'slack']) || has(self.url) || has(self.urlSecretRef)",
            "webhook, dingtalk, feishu and slack receivers need url or urlSecretRef",
        ),
        cel(
            "self.type != 'pagerduty' || has(self.routingKeySecretRef)",
            "a pagerduty receiver needs routingKeySecretRef",
        ),
        cel(
            "self.type != 'email' || (has(self.to) && has(self.from) && has(self.smarthost))",
            "an email receiver needs to, from and smarthost",
        ),
        cel(
            "self.type != 'wecom' || (has(self.corpId) && has(self.apiSecretSecretRef))",
            "a wecom receiver needs corpId and apiSecretSecretRef",
        ),
        cel(f"!has(self.url) || !self.url.matches({cel_string(BOT_API_URL)})", BOT_API_MESSAGE, ".url"),
    )


class SeverityRoute(Model):
    """Replaces the default receivers of one severity."""

    severity: Severity
    receivers: list[str] = Field(
        default_factory=list, max_length=8, description="Receiver names; empty: none."
    )
    group_wait: Duration | None = None
    group_interval: Duration | None = None
    repeat_interval: Duration | None = None


class Escalation(Model):
    enabled: bool = True
    after: Duration = Field(
        default="15m", description="Unacknowledged this long, a P1 alert is raised to P0."
    )


class QuietHours(Model):
    """At night the phone and IM receivers are muted, except for the allowlisted alerts, which page
    (reach every phone and sms receiver) whatever their severity."""

    enabled: bool = False
    timezone: str = Field(
        default="UTC", max_length=64, description="An IANA time zone, such as Asia/Shanghai."
    )
    start: str = Field(default="22:00", pattern=_HHMM)
    end: str = Field(default="07:00", pattern=_HHMM)
    weekdays: list[Literal[WEEKDAYS]] = Field(  # type: ignore[valid-type]
        default_factory=list, max_length=7, description="Days the quiet hours start on; empty: every day."
    )
    # a plain default, not a factory: the CRD carries it, so the apiserver fills the same list (a
    # factory's default in the CRD would be [], and nothing would page at night)
    allowlist: list[AllowlistName] = Field(  # type: ignore[valid-type]
        default=list(DEFAULT_ALLOWLIST),
        max_length=64,
        description="Alerts that still page at night, whatever their severity (by default: OOM risk, an OOM "
        "error, a node offline, an interrupted training). Catalogue alerts, or those the operator posts "
        f"itself: {', '.join(OPERATOR_ALERT_NAMES)}.",
    )

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, v: str) -> str:
        try:
            zoneinfo.ZoneInfo(v)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {v!r}; use an IANA name such as UTC or Europe/Berlin"
            ) from None
        return v

    @model_validator(mode="after")
    def _not_empty(self) -> QuietHours:
        if self.start == self.end:
            raise ValueError("start and end must differ")
        return self

    model_config = cel_rules(cel("self.start != self.end", "start and end must differ"))


class MaintenanceWindow(Model):
    """Mutes the alerts of the selected nodes between start and end."""

    name: str = Field(pattern=_RECEIVER_NAME, max_length=63)
    start: AwareDatetime = Field(description="RFC 3339 with offset, e.g. 2026-12-01T02:00:00Z.")
    end: AwareDatetime
    nodes: list[str] = Field(default_factory=list, max_length=256, description="Node names.")
    node_selector: LabelSelector | None = Field(
        default=None, description="Node labels; resolved by the operator."
    )

    @model_validator(mode="after")
    def _valid_window(self) -> MaintenanceWindow:
        if self.end <= self.start:
            raise ValueError("end must be after start")
        if not self.nodes and (self.node_selector is None or self.node_selector.is_empty()):
            raise ValueError("name the nodes: set nodes or nodeSelector")
        return self

    model_config = cel_rules(
        cel("timestamp(self.end) > timestamp(self.start)", "end must be after start", ".end"),
        cel(
            "size(self.nodes) > 0 || (has(self.nodeSelector) && (size(self.nodeSelector.matchLabels) > 0"
            " || size(self.nodeSelector.matchExpressions) > 0))",
            "name the nodes: set nodes or nodeSelector",
        ),
    )


class Inhibition(Model):
    node_down: bool = Field(default=True, description="GPUNodeDown silences the other alerts of that node.")
    job_p0: bool = Field(default=True, description="A P0 of a job silences that job's P1 to P3.")
    supersede: bool = Field(
        default=True, description="A stronger alert silences milder ones of the same signal."
    )


class Retention(Model):
    """Hints for how long trainguard keeps what it records."""

    remediation_records: int = Field(
        default=50, ge=1, le=50, description="Records kept in a monitor's status."
    )
    resolved_alert_history: Duration = "7d"


class AlertPolicySpec(Model):
    alerts: list[AlertOverride] = Field(default_factory=list, max_length=64)
    custom_rules: list[CustomRule] = Field(default_factory=list, max_length=64)
    receivers: list[Receiver] = Field(default_factory=list, max_length=32)
    routes: list[SeverityRoute] = Field(default_factory=list, max_length=4)
    escalation: Escalation = Field(default_factory=Escalation)
    quiet_hours: QuietHours = Field(default_factory=QuietHours)
    maintenance_windows: list[MaintenanceWindow] = Field(default_factory=list, max_length=32)
    inhibition: Inhibition = Field(default_factory=Inhibition)
    retention: Retention = Field(default_factory=Retention)
    runbook_base_url: str = Field(
        default="https://github.com/trainguard/trainguard/blob/main/docs/alerts.md",
        max_length=1024,
        pattern=r"^https?://",
    )

    @model_validator(mode="after")
    def _references_resolve(self) -> AlertPolicySpec:
        receivers = [r.name for r in self.receivers]
        dupes = sorted({n for n in receivers if receivers.count(n) > 1})
        if dupes:
            raise ValueError(f"receivers: duplicate name {', '.join(dupes)}")
        for i, route in enumerate(self.routes):
            missing = [n for n in route.receivers if n not in receivers]
            if missing:
                raise ValueError(
                    f"routes[{i}].receivers: {', '.join(missing)} is not a receiver of this policy "
                    f"(receivers: {', '.join(receivers) or 'none'})"
                )
        severities = [r.severity for r in self.routes]
        if len(set(severities)) != len(severities):
            raise ValueError("routes: at most one route per severity")
        names = [a.name for a in self.alerts]
        if len(set(names)) != len(names):
            raise ValueError("alerts: each alert may be overridden once")
        return self

    model_config = cel_rules(
        cel(
            "self.routes.all(r, r.receivers.all(n, self.receivers.exists(x, x.name == n)))",
            "every receiver a route names must be defined under receivers",
            ".routes",
        ),
        cel(
            "self.receivers.all(r, self.receivers.exists_one(x, x.name == r.name))",
            "receiver names must be unique",
            ".receivers",
        ),
        cel(
            "self.routes.all(r, self.routes.exists_one(x, x.severity == r.severity))",
            "at most one route per severity",
            ".routes",
        ),
        cel(
            "self.alerts.all(a, self.alerts.exists_one(x, x.name == a.name))",
            "alerts: each alert may be overridden once",
            ".alerts",
        ),
    )


class AlertPolicyStatus(Model):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list, max_length=16)
    monitors: int = 0


class AlertPolicy(Model):
    api_version: Literal["trainguard.io/v1alpha1"] = "trainguard.io/v1alpha1"
    kind: Literal["AlertPolicy"] = "AlertPolicy"
    metadata: Metadata
    spec: AlertPolicySpec = Field(default_factory=AlertPolicySpec)
    status: AlertPolicyStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace
