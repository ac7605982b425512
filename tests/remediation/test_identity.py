"""The fast path's sender decision, pure: a TokenReview's answer read as a pod's identity, then that
pod and the event's monitor deciding what the operator takes from the event."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.remediation.identities import monitor_body, pod, review
from trainguard.api import monitor_of
from trainguard.catalog.events import EVENTS_AUDIENCE
from trainguard.remediation.identity import (
    NODE_NAME,
    Refused,
    SenderIdentity,
    admit,
    identity_from_review,
    token_expiry,
)
from trainguard.remediation.model import Signal
from trainguard.remediation.signals import from_fastpath, signal_fingerprint

NOW = 1_700_000_100.0
IDENTITY = SenderIdentity("ml", "trainer", "llama-0", "uid-llama-0", "gpu-a")


def xid_event(**labels: str) -> Signal:
    base = {"alertname": "GPUCriticalXid", "severity": "P0", "namespace": "ml", "training_job": "llama",
            "pod": "llama-0", "node": "gpu-a", "gpu": "3", "xid": "79"}  # fmt: skip
    return from_fastpath({"source": "sidecar", "labels": base | labels, "startsAt": NOW}, NOW)


MONITOR = monitor_of(monitor_body())


def refused(status: int, call: Any, *args: Any) -> str:
    with pytest.raises(Refused) as info:
        call(*args)
    assert info.value.status == status, info.value.reason
    return info.value.reason


# ---- the review ----------------------------------------------------------------------------------


def test_a_pod_bound_token_names_the_pod_its_uid_and_its_node() -> None:
    assert identity_from_review(review(), EVENTS_AUDIENCE) == IDENTITY


def test_before_kubernetes_1_30_the_identity_has_no_node() -> None:
    assert identity_from_review(review(node=None), EVENTS_AUDIENCE).node is None


def test_an_unauthenticated_review_is_401() -> None:
    reason = refused(401, identity_from_review, review(authenticated=False), EVENTS_AUDIENCE)
    assert "not a valid ServiceAccount token" in reason


def test_a_token_for_another_audience_is_401() -> None:
    status = review(audiences=("https://kubernetes.default.svc",))
    assert "audience" in refused(401, identity_from_review, status, EVENTS_AUDIENCE)


@pytest.mark.parametrize("username", ["alice", "system:serviceaccount:ml", "system:serviceaccount::x",
                                      "system:serviceaccount:ml:a:b", "system:node:gpu-a"])  # fmt: skip
def test_a_user_that_is_no_service_account_is_401(username: str) -> None:
    status = review()
    status["user"]["username"] = username
    assert "ServiceAccount" in refused(401, identity_from_review, status, EVENTS_AUDIENCE)


@pytest.mark.parametrize(
    "drop", ["authentication.kubernetes.io/pod-name", "authentication.kubernetes.io/pod-uid"]
)
def test_a_token_not_bound_to_a_pod_is_401(drop: str) -> None:
    status = review()
    del status["user"]["extra"][drop]
    assert "not bound to a pod" in refused(401, identity_from_review, status, EVENTS_AUDIENCE)


def test_an_extra_with_two_values_counts_as_none() -> None:
    status = review()
    status["user"]["extra"][NODE_NAME] = ["gpu-a", "gpu-b"]
    assert identity_from_review(status, EVENTS_AUDIENCE).node is None


def _jwt(claims: dict[str, Any]) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


def test_the_expiry_is_read_from_the_tokens_exp_claim() -> None:
    assert token_expiry(_jwt({"exp": 1_700_000_600, "aud": [EVENTS_AUDIENCE]})) == 1_700_000_600.0
    assert token_expiry(_jwt({"aud": "x"})) is None
    assert token_expiry(_jwt({"exp": True})) is None
    assert token_expiry("opaque") is None
    assert token_expiry("a.!!!.c") is None


# ---- the pod and the monitor ---------------------------------------------------------------------


def test_a_pod_of_the_job_is_admitted_with_its_own_pod_and_node() -> None:
    signal = xid_event()
    admitted = admit(IDENTITY, signal, pod(), MONITOR)
    assert admitted.signal == signal
    assert admitted.overwritten == {}


def test_a_pod_of_the_job_on_node_a_posting_node_b_is_taken_as_node_a() -> None:
    claimed = xid_event(node="gpu-b", pod="llama-7")
    admitted = admit(IDENTITY, claimed, pod(), MONITOR)
    assert admitted.signal.labels["node"] == "gpu-a"
    assert admitted.signal.labels["pod"] == "llama-0"
    assert admitted.signal.fingerprint == signal_fingerprint(admitted.signal.labels) != claimed.fingerprint
    assert admitted.overwritten == {"node": ("gpu-b", "gpu-a"), "pod": ("llama-7", "llama-0")}
    assert {k: v for k, v in admitted.signal.labels.items() if k not in ("node", "pod")} == {
        k: v for k, v in claimed.labels.items() if k not in ("node", "pod")
    }


def test_an_event_without_node_or_pod_gets_them_from_the_identity() -> None:
    bare = from_fastpath({"source": "sidecar", "labels": {"alertname": "TrainingStalled", "severity": "P0",
                          "namespace": "ml", "training_job": "llama"}, "startsAt": NOW}, NOW)  # fmt: skip
    admitted = admit(IDENTITY, bare, pod(), MONITOR)
    assert (admitted.signal.labels["pod"], admitted.signal.labels["node"]) == ("llama-0", "gpu-a")
    assert admitted.overwritten == {}


def test_before_1_30_the_node_is_the_one_the_pod_is_bound_to() -> None:
    no_node = SenderIdentity("ml", "trainer", "llama-0", "uid-llama-0", None)
    admitted = admit(no_node, xid_event(node="gpu-b"), pod(node="gpu-c"), MONITOR)
    assert admitted.signal.labels["node"] == "gpu-c"


def test_a_pod_of_another_job_is_403() -> None:
    other = SenderIdentity("ml", "trainer", "bert-0", "uid-bert-0", "gpu-a")
    reason = refused(403, admit, other, xid_event(), pod("bert-0", "uid-bert-0", app="bert"), MONITOR)
    assert reason == "pod ml/bert-0 is not a pod of ml/llama (the monitor's selector does not match it)"


def test_a_pod_of_another_namespace_is_403() -> None:
    other = SenderIdentity("team-b", "trainer", "llama-0", "uid-b", "gpu-a")
    reason = refused(403, admit, other, xid_event(), pod(namespace="team-b", uid="uid-b"), MONITOR)
    assert reason == "the sender is pod team-b/llama-0, not a pod of namespace ml"


def test_a_deleted_pod_is_403() -> None:
    assert refused(403, admit, IDENTITY, xid_event(), None, MONITOR) == "pod ml/llama-0 does not exist"


def test_a_pod_of_that_name_recreated_since_the_token_is_403() -> None:
    reason = refused(403, admit, IDENTITY, xid_event(), pod(uid="uid-new"), MONITOR)
    assert "not the pod the token was issued to" in reason


@pytest.mark.parametrize(("kw", "why"), [({"deleting": True}, "is being deleted"),
                                          ({"phase": "Succeeded"}, "has finished (Succeeded)"),
                                          ({"phase": "Failed"}, "has finished (Failed)")])  # fmt: skip
def test_a_pod_that_is_not_live_is_403(kw: dict[str, Any], why: str) -> None:
    assert refused(403, admit, IDENTITY, xid_event(), pod(**kw), MONITOR) == f"pod ml/llama-0 {why}"


def test_a_token_of_another_service_account_is_403() -> None:
    reason = refused(403, admit, IDENTITY, xid_event(), pod(account="default"), MONITOR)
    assert reason == "pod ml/llama-0 runs as ServiceAccount default, not trainer"


def test_a_node_in_the_token_other_than_the_pods_is_403() -> None:
    reason = refused(403, admit, IDENTITY, xid_event(), pod(node="gpu-z"), MONITOR)
    assert reason == "pod ml/llama-0 is bound to node gpu-z, its token names node gpu-a"


def test_an_event_of_a_monitor_that_does_not_exist_is_403() -> None:
    assert (
        refused(403, admit, IDENTITY, xid_event(training_job="nope"), pod(), None)
        == "no TrainingJobMonitor ml/nope"
    )
    # a monitor handed in that is not the one the event names does not count either
    assert "no TrainingJobMonitor ml/nope" in refused(
        403, admit, IDENTITY, xid_event(training_job="nope"), pod(), MONITOR
    )


def test_an_unbound_pod_without_a_node_in_its_token_is_403() -> None:
    no_node = SenderIdentity("ml", "trainer", "llama-0", "uid-llama-0", None)
    assert (
        refused(403, admit, no_node, xid_event(), pod(node=""), MONITOR)
        == "pod ml/llama-0 is not bound to a node"
    )
