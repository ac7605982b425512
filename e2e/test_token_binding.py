"""A monitor's tokens are bound to the monitor object, not only its name: deleted and created again under
the same name (a new metadata.uid), the one operator process that served the first writes the second a
new Secret, and its receiver refuses the first one's Alertmanager token. Against the local control
plane's kube-apiserver, the real operator and its receiver."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from e2e.cluster import Cluster
from e2e.monitors import MON, NAME, quickstart, ready
from e2e.receiver import alert_payload, post
from tests.processes import wait_for

pytestmark = pytest.mark.e2e


def fastpath_secret(cluster: Cluster, ns: str) -> dict[str, Any] | None:
    """The monitor's fast-path Secret: its owner's uid and its Alertmanager token (None while absent)."""
    try:
        secret = cluster.core.read_namespaced_secret(f"{NAME}-fastpath", ns)
    except Exception as exc:
        if getattr(exc, "status", None) == 404:
            return None
        raise
    owners = [r.uid for r in secret.metadata.owner_references or []]
    return {"owners": owners, "alerts": base64.b64decode(secret.data["alertmanager-token"]).decode()}


def resolved(ns: str) -> dict[str, Any]:
    """Alertmanager's post of a resolved alert of the job: taken in (200) when the token holds, and acted
    on by nothing."""
    body = alert_payload(ns, "gpu-none")
    body["status"] = body["alerts"][0]["status"] = "resolved"
    return body


def test_a_monitor_created_again_refuses_the_old_monitors_token_and_takes_its_new_one(
    operator: Cluster, ns: str
) -> None:
    monitor, policy = quickstart(ns)
    operator.apply([copy.deepcopy(monitor), policy])
    first = wait_for("monitor Ready", lambda: ready(operator, ns))
    first_uid = first["metadata"]["uid"]
    old = wait_for(
        "the first monitor's Secret",
        lambda: (s := fastpath_secret(operator, ns)) and s["owners"] == [first_uid] and s,
    )
    assert post(operator, "/v1/alerts", resolved(ns), old["alerts"])[0] == 200

    # deleted (as kubectl does: the Secret goes with it, by the garbage collector): the token holds nothing
    operator.dynamic.delete(operator.dynamic.resources.get(api_version=MON[0], kind=MON[1]), name="llama-pretrain",
                            namespace=ns)  # fmt: skip
    wait_for("the monitor gone", lambda: operator.get(*MON, ns, "llama-pretrain") is None, timeout=30)
    status, answer = wait_for(
        "the receiver's cache sees the monitor gone",
        lambda: (r := post(operator, "/v1/alerts", resolved(ns), old["alerts"]))[0] != 200 and r,
        timeout=10,
    )
    assert (status, answer) == (401, {"error": "the token is not valid for this endpoint and monitor"})

    # created again under its name: another object, its own tokens, written by the same operator process
    operator.apply([copy.deepcopy(monitor)])
    second = wait_for("the monitor created again Ready", lambda: ready(operator, ns), timeout=60)
    second_uid = second["metadata"]["uid"]
    assert second_uid != first_uid
    new = wait_for(
        "the Secret of the monitor created again",
        lambda: (s := fastpath_secret(operator, ns)) and s["owners"] == [second_uid] and s,
        timeout=60,
    )
    assert new["alerts"] != old["alerts"]
    wait_for(
        "the new monitor's token taken",
        lambda: post(operator, "/v1/alerts", resolved(ns), new["alerts"])[0] == 200,
        timeout=10,
    )
    status, answer = post(operator, "/v1/alerts", resolved(ns), old["alerts"])
    assert (status, answer) == (401, {"error": "the token is not valid for this endpoint and monitor"})
