"""Alertmanager receivers: one per policy receiver, in each output's form and way of reaching Secrets."""

from __future__ import annotations

from typing import Any

from trainguard.api.common import SecretKeyRef
from trainguard.api.policy import Receiver
from trainguard.render.policy import EffectivePolicy

SECRETS_DIR = "/etc/alertmanager/secrets"


def _secret_file(ref: SecretKeyRef | None) -> str:
    assert ref is not None  # the Receiver validator requires the reference for the type
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


def _secret_ref(ref: SecretKeyRef | None) -> dict[str, str]:
    assert ref is not None  # the Receiver validator requires the reference for the type
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
