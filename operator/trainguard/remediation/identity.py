"""Who sent a fast-path event, and what the operator takes from it: pure decisions over a TokenReview's
answer, the sender's pod and the monitor the event names.

A sidecar posts with its pod's projected ServiceAccount token (audience `catalog.events.EVENTS_AUDIENCE`).
The apiserver's TokenReview says whether it is valid for that audience and, for a token bound to a pod,
which pod (name and uid) and, from Kubernetes 1.30, which node. `identity_from_review` reads that answer
(401 when it does not name a pod); `admit` checks the pod against the cluster and the monitor (403 naming
why) and replaces the event's `pod` and `node` labels with the identity's: a sidecar reports only what
it sees in its own pod, so the only pod and node it can speak for are its own, and a body naming others
is overwritten rather than refused (the fault it reports is still real, and losing a P0 over a label
would cost more than it protects). A refusal's reason never holds the token.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from trainguard.api.monitor import TrainingJobMonitor
from trainguard.remediation.model import Signal
from trainguard.remediation.signals import signal_fingerprint

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
NODE_NAME = "authentication.kubernetes.io/node-name"
"""Set in tokens bound to a pod from Kubernetes 1.30 (ServiceAccountTokenPodNodeInfo); absent before."""
TAKEN_LABELS = ("pod", "node")
"""The event's labels that come from the sender's identity, whatever the body says."""


class Refused(Exception):
    """Why a sender is not believed: 401 (not a valid pod-bound token for the audience), 403 (a valid
    sender that is not a live pod of the monitor's job) or 503 (the review could not be made: retry)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class SenderIdentity:
    namespace: str
    service_account: str
    pod: str
    pod_uid: str
    node: str | None
    """None where the apiserver does not put the node in the token (before Kubernetes 1.30)."""


def _one(extra: Mapping[str, Any], key: str) -> str | None:
    """A TokenReview extra holds a list of strings; exactly one non-empty value counts."""
    values = extra.get(key)
    if isinstance(values, list) and len(values) == 1 and isinstance(values[0], str) and values[0]:
        return values[0]
    return None


def identity_from_review(status: Mapping[str, Any], audience: str) -> SenderIdentity:
    """The sender a TokenReview's status names, asked with spec.audiences=[audience]; Refused(401)
    unless the token is authenticated for that audience, is a ServiceAccount's and is bound to a pod."""
    if status.get("authenticated") is not True:
        raise Refused(401, f"the bearer is not a valid ServiceAccount token for the audience {audience}")
    if audience not in (status.get("audiences") or []):
        raise Refused(401, f"the token is not for the audience {audience}")
    user = status.get("user") or {}
    username = str(user.get("username") or "")
    namespace, _, account = username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
    if not username.startswith(SERVICE_ACCOUNT_PREFIX) or not namespace or not account or ":" in account:
        raise Refused(401, "the token is not a ServiceAccount's")
    extra = user.get("extra") or {}
    pod, uid = _one(extra, POD_NAME), _one(extra, POD_UID)
    if pod is None or uid is None:
        raise Refused(401, "the token is not bound to a pod (mount a projected serviceAccountToken)")
    return SenderIdentity(namespace, account, pod, uid, _one(extra, NODE_NAME))


def token_expiry(token: str) -> float | None:
    """The `exp` claim (Unix seconds) of a JWT whose signature the apiserver has already verified; None
    when the token holds none that can be read."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def _live(pod: Mapping[str, Any]) -> str | None:
    """Why the pod is not running its containers any more, or None when it is."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "is being deleted"
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        return f"has finished ({phase})"
    return None


@dataclass(frozen=True)
class Admitted:
    signal: Signal
    """The event's signal with the identity's pod and node, its fingerprint recomputed."""
    overwritten: dict[str, tuple[str, str]]
    """label -> (what the body claimed, what the identity says), for the labels that differed."""


def admit(
    identity: SenderIdentity,
    signal: Signal,
    pod: Mapping[str, Any] | None,
    monitor: TrainingJobMonitor | None,
) -> Admitted:
    """The signal as the operator takes it from this sender, or Refused(403) naming why: the event's
    monitor must exist in the sender's namespace, and the sender's pod (read from the cluster by the
    identity's name) must be the same pod (uid), live, of the pod's own ServiceAccount, bound to the
    node the identity names, and selected by the monitor."""
    ns, job = signal.namespace, signal.training_job
    who = f"pod {identity.namespace}/{identity.pod}"
    if ns != identity.namespace:
        raise Refused(403, f"the sender is {who}, not a pod of namespace {ns}")
    if monitor is None or monitor.namespace != ns or monitor.name != job:
        raise Refused(403, f"no TrainingJobMonitor {ns}/{job}")
    if pod is None:
        raise Refused(403, f"{who} does not exist")
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if meta.get("uid") != identity.pod_uid:
        raise Refused(403, f"{who} is not the pod the token was issued to (it was recreated)")
    if (dead := _live(pod)) is not None:
        raise Refused(403, f"{who} {dead}")
    account = spec.get("serviceAccountName")
    if account and account != identity.service_account:
        raise Refused(403, f"{who} runs as ServiceAccount {account}, not {identity.service_account}")
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    if not monitor.spec.selector.matches(labels):
        raise Refused(403, f"{who} is not a pod of {ns}/{job} (the monitor's selector does not match it)")
    bound = str(spec.get("nodeName") or "")
    if identity.node and bound and identity.node != bound:
        raise Refused(403, f"{who} is bound to node {bound}, its token names node {identity.node}")
    node = identity.node or bound
    if not node:
        raise Refused(403, f"{who} is not bound to a node")
    taken = {"pod": identity.pod, "node": node}
    overwritten = {k: (signal.labels[k], v) for k, v in taken.items() if signal.labels.get(k, v) != v}
    accepted = signal.labels | taken
    return Admitted(replace(signal, labels=accepted, fingerprint=signal_fingerprint(accepted)), overwritten)
