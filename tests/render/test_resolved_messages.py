"""Which receivers are told that an alert resolved (docs/rendering.md, "Resolved messages")."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import monitor, policy
from trainguard.api.policy import Receiver
from trainguard.render.alertmanager import alertmanager_yml
from trainguard.render.policy import effective_policy
from trainguard.render.receivers import receiver_name, sends_resolved

HOOK = {"type": "webhook", "url": "http://127.0.0.1:9101/x"}
PD = {"type": "pagerduty", "routingKeySecretRef": {"name": "pd", "key": "k"}}


def receiver(**fields: Any) -> Receiver:
    return Receiver.model_validate({"name": "r", **fields})


@pytest.mark.parametrize(
    ("fields", "page", "other"),
    [
        # a page's end lets the on-call stand down where they work; no one was called for the rest
        (HOOK | {"roles": ["im"]}, True, False),
        # a second call or text, at night, to say there is nothing to do
        (HOOK | {"roles": ["phone", "sms"]}, False, False),
        (HOOK | {"roles": ["email"]}, False, False),
        (HOOK | {"roles": ["ticket"]}, False, False),
        # PagerDuty closes the incident it opened on the resolved event
        (PD | {"roles": ["phone"]}, True, True),
        # named only in explicit routes: nothing is known of it, Alertmanager's default
        (HOOK, True, True),
        # the receiver's own word wins
        (HOOK | {"roles": ["im"], "sendResolved": False}, False, False),
        (HOOK | {"roles": ["ticket"], "sendResolved": True}, True, True),
    ],
)
def test_who_is_told_of_a_resolution(fields: dict[str, Any], page: bool, other: bool) -> None:
    r = receiver(**fields)
    assert sends_resolved(r, "P0") is page
    assert all(sends_resolved(r, s) is other for s in ("P1", "P2", "P3"))


def test_im_has_a_second_receiver_for_pages_only() -> None:
    im = receiver(**HOOK, roles=["im"])
    assert receiver_name("ns/p/im", im, "P0") == "ns/p/im+resolved"
    assert receiver_name("ns/p/im", im, "P1") == "ns/p/im"
    phone = receiver(**HOOK, roles=["phone"])
    assert receiver_name("ns/p/phone", phone, "P0") == "ns/p/phone"


def test_the_rendered_receivers_say_it() -> None:
    m = monitor()
    config = alertmanager_yml([(m, effective_policy(m, [policy()]))])
    resolved = {
        r["name"]: r["webhook_configs"][0]["send_resolved"]
        for r in config["receivers"]
        if "webhook_configs" in r
    }
    assert resolved == {
        "ml/default/oncall-phone": False,
        "ml/default/im": False,
        "ml/default/im+resolved": True,
        "ml/default/email": False,
        "ml/default/ticket": False,
    }
