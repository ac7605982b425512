"""A sender as the receiver sees it without a cluster: a TokenReview's status for a pod-bound token,
the pod, the monitor, and fakes of the review and the reads (tests/remediation/test_identity.py,
test_senders.py, and the receiver's tests through intake.py)."""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Any

from trainguard.catalog.events import EVENTS_AUDIENCE
from trainguard.remediation.identity import NODE_NAME, POD_NAME, POD_UID

Obj = dict[str, Any]


def review(
    pod: str = "llama-0",
    uid: str = "uid-llama-0",
    node: str | None = "gpu-a",
    *,
    namespace: str = "ml",
    account: str = "trainer",
    audiences: tuple[str, ...] = (EVENTS_AUDIENCE,),
    authenticated: bool = True,
) -> Obj:
    """A TokenReview's status for a token bound to the pod (node-name as from Kubernetes 1.30)."""
    extra = {POD_NAME: [pod], POD_UID: [uid]} | ({NODE_NAME: [node]} if node is not None else {})
    if not authenticated:
        return {"authenticated": False, "error": "[invalid bearer token, token audiences are invalid]"}
    return {
        "authenticated": True,
        "audiences": list(audiences),
        "user": {"username": f"system:serviceaccount:{namespace}:{account}", "uid": "sa-uid",
                 "groups": ["system:serviceaccounts"], "extra": extra},
    }  # fmt: skip


def pod(
    name: str = "llama-0",
    uid: str = "uid-llama-0",
    node: str = "gpu-a",
    *,
    namespace: str = "ml",
    app: str = "llama",
    account: str = "trainer",
    phase: str = "Running",
    deleting: bool = False,
) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace, "uid": uid, "labels": {"app": app}}
    if deleting:
        meta["deletionTimestamp"] = "2023-11-14T22:13:00Z"
    return {"metadata": meta, "spec": {"nodeName": node, "serviceAccountName": account},
            "status": {"phase": phase}}  # fmt: skip


def monitor_body(name: str = "llama", namespace: str = "ml", app: str = "llama") -> Obj:
    """A TrainingJobMonitor as the watch cache holds it, selecting pods labelled app=`app`."""
    return {
        "apiVersion": "trainguard.io/v1alpha1",
        "kind": "TrainingJobMonitor",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": app}}, "exporter": {"gpuBackend": "simulated"},
                 "policyRefs": [{"name": "default"}]},
    }  # fmt: skip


@dataclass
class FakeReviews:
    """kube.Kube.token_review from a table of tokens; any other token is not authenticated."""

    known: dict[str, Obj] = field(default_factory=dict)
    calls: list[tuple[str, list[str]]] = field(default_factory=list)
    fail: bool = False
    gate: threading.Event | None = None
    """When set, each review waits for it (so that a test can hold one in flight)."""
    entered: threading.Event = field(default_factory=threading.Event)

    def token_review(self, token: str, audiences: list[str]) -> Obj:
        self.calls.append((token, list(audiences)))
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10)
        if self.fail:
            raise ConnectionError("the apiserver is unreachable")
        status = self.known.get(token)
        if status is None:
            return review(authenticated=False)
        if not set(status.get("audiences") or []) & set(audiences):
            return {"authenticated": False, "error": "token audiences are invalid for the target audiences"}
        return copy.deepcopy(status)


@dataclass
class FakeReads:
    """The watch caches' pod and monitor reads. `error` is raised by monitor_uid, as kube.ClusterCache
    raises NotSynced before its first list and Stale when it cannot hear the API."""

    pods: dict[tuple[str, str], Obj] = field(default_factory=dict)
    monitors: dict[tuple[str, str], Obj] = field(default_factory=dict)
    error: Exception | None = None
    uid_reads: int = 0
    """How many times monitor_uid was asked (the receiver asks once per monitor of each post)."""

    def pod(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.pods.get((namespace, name)))

    def monitor(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.monitors.get((namespace, name)))

    def monitor_uid(self, namespace: str, name: str) -> str | None:
        self.uid_reads += 1
        if self.error is not None:
            raise self.error
        uid = ((self.monitors.get((namespace, name)) or {}).get("metadata") or {}).get("uid")
        return str(uid) if uid else None
