"""Alertmanager receivers: one per policy receiver, in each output's form and way of reaching Secrets."""

from __future__ import annotations

from typing import Any

from trainguard.api.common import SecretKeyRef
from trainguard.api.policy import Receiver
from trainguard.render.policy import EffectivePolicy

SECRETS_DIR = "/etc/alertmanager/secrets"

RESOLVED_ROLES = frozenset({"im"})
"""Roles whose receivers are told that a page (a P0) resolved, unless the receiver says otherwise: the
channel where the on-call works learns that the page is over and can stand down. Not of a P1 to P3
(no one was called; the channel would carry every alert twice), and a phone or sms role never (a
second call or text, at night, to say there is nothing to do), nor email and ticket (a mail more for
each alert; a ticket is closed by whoever worked it). docs/rendering.md, "Resolved messages"."""
PAGE = "P0"
RESOLVED_VARIANT = "+resolved"
"""The suffix of a receiver's second Alertmanager receiver, the one with send_resolved, for the grades
it is told of resolutions in (Alertmanager sets send_resolved per receiver, not per route)."""


def sends_resolved(r: Receiver, severity: str) -> bool:
    """Whether `r` is told that an alert of `severity` resolved: its own sendResolved when set; else a
    PagerDuty receiver is (resolving closes the incident it opened, which would stay open and
    escalate), one without a role is (named in explicit routes only, nothing is known of it: as
    Alertmanager's own default), and one with an im role is of a page."""
    if r.send_resolved is not None:
        return r.send_resolved
    if r.type == "pagerduty" or not r.roles:
        return True
    return severity == PAGE and bool(RESOLVED_ROLES & set(r.roles))


def by_grade(r: Receiver) -> bool:
    """Whether `r` is told of some grades' resolutions and not of others': it needs two receivers."""
    return sends_resolved(r, PAGE) != sends_resolved(r, "P1")


def receiver_name(name: str, r: Receiver, severity: str) -> str:
    """The Alertmanager receiver a route of `severity` names for `r`, called `name` in the output."""
    return name + RESOLVED_VARIANT if by_grade(r) and sends_resolved(r, severity) else name


def _secret_file(ref: SecretKeyRef | None) -> str:
    assert ref is not None  # the Receiver validator requires the reference for the type
    return f"{SECRETS_DIR}/{ref.name}/{ref.key}"


def plain_receivers(name: str, r: Receiver) -> list[dict[str, Any]]:
    """The receivers of alertmanager.yml for `r`: one, and its RESOLVED_VARIANT where it is told of
    some grades' resolutions only."""
    if not by_grade(r):
        return [plain_receiver(name, r, sends_resolved(r, PAGE))]
    return [plain_receiver(name, r, False), plain_receiver(name + RESOLVED_VARIANT, r, True)]


def plain_receiver(name: str, r: Receiver, send_resolved: bool) -> dict[str, Any]:
    """A receiver of alertmanager.yml; Secret references become files under /etc/alertmanager/secrets."""
    resolved: dict[str, Any] = {"send_resolved": send_resolved}
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


def _secret_ref(ref: SecretKeyRef | None) -> dict[str, str]:
    assert ref is not None  # the Receiver validator requires the reference for the type
    return {"name": ref.name, "key": ref.key}


def amc_receivers(name: str, r: Receiver, inline_secret: str) -> list[dict[str, Any]]:
    """The receivers of an AlertmanagerConfig for `r`, as plain_receivers."""
    if not by_grade(r):
        return [amc_receiver(name, r, inline_secret, sends_resolved(r, PAGE))]
    return [
        amc_receiver(name, r, inline_secret, False),
        amc_receiver(name + RESOLVED_VARIANT, r, inline_secret, True),
    ]


def amc_receiver(name: str, r: Receiver, inline_secret: str, send_resolved: bool) -> dict[str, Any]:
    """A receiver of an AlertmanagerConfig. Slack's URL must come from a Secret there, so an inline
    one is read from the monitor's generated receiver Secret (`inline_secret`)."""
    base: dict[str, Any] = {"sendResolved": send_resolved}
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
