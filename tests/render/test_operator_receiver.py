"""Alertmanager posts a job's P0 and P1 alerts to the operator's receiver, authenticated with the
monitor's own token from its Secret; the sidecar mounts only its own token and the CA."""

from __future__ import annotations

from typing import Any

from tests.conftest import monitor, policy
from trainguard import IMAGE
from trainguard.catalog.kubernetes import MANAGED_BY, MANAGED_BY_VALUE
from trainguard.render.kubernetes import (
    ALERTS_TOKEN_KEY,
    emptied_receiver_secret,
    fastpath_secret,
    fastpath_secret_name,
    monitor_objects,
    operator_receiver,
    receiver_secret,
)
from trainguard.render.policy import effective_policy
from trainguard.render.sidecar import inject


def amc(with_operator: bool, **changes: Any) -> dict[str, Any]:
    m = monitor(**changes)
    op = operator_receiver(m, "https://trainguard-operator.trainguard-system.svc:8443", with_ca=True)
    objs = monitor_objects(m, effective_policy(m, [policy()]), operator=op if with_operator else None)
    return next(o for o in objs if o["kind"] == "AlertmanagerConfig")["spec"]


def test_p0_and_p1_reach_the_operator_first_and_unmuted() -> None:
    spec = amc(True, **{"metadata.uid": "u-1"})
    routes = {r["matchers"][0]["value"]: r for r in spec["route"]["routes"]}
    for severity in ("P0", "P1"):
        first = routes[severity]["routes"][0]
        assert first == {"receiver": "trainguard-operator", "continue": True}, severity
    for severity in ("P2", "P3"):
        assert all(r.get("receiver") != "trainguard-operator" for r in routes[severity].get("routes", []))


def test_the_operator_receiver_authenticates_with_the_monitors_alerts_token() -> None:
    spec = amc(True)
    receiver = next(r for r in spec["receivers"] if r["name"] == "trainguard-operator")
    hook = receiver["webhookConfigs"][0]
    assert hook["url"] == "https://trainguard-operator.trainguard-system.svc:8443/v1/alerts"
    secret = fastpath_secret_name(monitor())
    assert hook["httpConfig"]["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": secret, "key": ALERTS_TOKEN_KEY},
    }
    assert hook["httpConfig"]["tlsConfig"] == {"ca": {"secret": {"name": secret, "key": "ca.crt"}}}


def test_without_an_operator_nothing_changes() -> None:
    spec = amc(False)
    assert all(r["name"] != "trainguard-operator" for r in spec["receivers"])


def test_the_sidecar_mounts_its_own_token_and_the_ca_but_not_alertmanagers() -> None:
    secret = fastpath_secret(monitor(), "events-token", "alerts-token", "CA PEM")
    assert set(secret["stringData"]) == {"token", "alertmanager-token", "ca.crt"}
    pod = {"metadata": {"namespace": "ml", "labels": {"app": "llama-pretrain"}}, "spec": {"containers": []}}
    changes = inject(
        pod, monitor(), fallback_trace="t", receiver_url="https://op:8443/v1/events", sidecar_image=IMAGE
    )
    assert changes is not None
    volume = next(v for v in changes["spec"]["volumes"] if v["name"] == "trainguard-fastpath-token")
    assert [i["key"] for i in volume["secret"]["items"]] == ["token", "ca.crt"]


def test_every_secret_of_a_monitor_is_labelled_managed_by_trainguard() -> None:
    """deploy/secret-write-policy.yaml lets the operator write no Secret without the label."""
    m = monitor(**{"metadata.uid": "u-1"})
    slack = policy(
        **{
            "spec.receivers": [
                {"name": "chat", "type": "slack", "roles": ["im"], "url": "https://hooks.slack.invalid/x"}
            ]
        }
    )
    received = receiver_secret(m, effective_policy(m, [slack]))
    assert received is not None
    for secret in (received, emptied_receiver_secret(m), fastpath_secret(m, "t", "a", "ca")):
        assert secret["metadata"]["labels"][MANAGED_BY] == MANAGED_BY_VALUE, secret["metadata"]["name"]
