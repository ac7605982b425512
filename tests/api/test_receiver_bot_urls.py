"""DingTalk and Feishu bots take their own message format, so a receiver must go through a relay."""

from __future__ import annotations

import pytest

from tests.conftest import POLICY, merged
from trainguard.api import AlertPolicy, InvalidInput, parse_object
from trainguard.api.policy import BOT_API_URL, Receiver


def receiver(type_: str, url: str) -> dict[str, object]:
    return merged(POLICY, **{"spec.receivers": [{"name": "im", "type": type_, "url": url}]})


@pytest.mark.parametrize(
    ("type_", "url"),
    [
        ("dingtalk", "https://oapi.dingtalk.com/robot/send?access_token=abc"),
        ("dingtalk", "https://OAPI.DingTalk.com/robot/send"),
        ("dingtalk", "https://oapi.dingtalk.com:443/robot/send"),
        ("feishu", "https://open.feishu.cn/open-apis/bot/v2/hook/abc"),
        ("feishu", "https://open.larksuite.com/open-apis/bot/v2/hook/abc"),
        ("feishu", "http://open.feishu.cn"),
        ("webhook", "https://open.feishu.cn/open-apis/bot/v2/hook/abc"),
    ],
)
def test_a_url_straight_at_a_bot_api_says_a_relay_is_needed(type_: str, url: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        parse_object(receiver(type_, url))
    found = {p.path: p.message for p in exc.value.problems}
    assert "relay" in found["spec.receivers[0].url"]
    assert "prometheus-webhook-dingtalk" in found["spec.receivers[0].url"]


@pytest.mark.parametrize(
    ("type_", "url"),
    [
        ("dingtalk", "http://prometheus-webhook-dingtalk.monitoring:8060/dingtalk/ops/send"),
        ("feishu", "https://relay.example.org/open.feishu.cn/hook"),
        ("dingtalk", "https://oapi.dingtalk.com.relay.example.org/send"),
    ],
)
def test_a_relay_url_is_accepted(type_: str, url: str) -> None:
    assert isinstance(parse_object(receiver(type_, url)), AlertPolicy)


def test_the_docstring_no_longer_suggests_the_bot_itself() -> None:
    assert "relay" in (Receiver.__doc__ or "") and "their bot or" not in (Receiver.__doc__ or "")
    assert BOT_API_URL.startswith("(?i)^")
