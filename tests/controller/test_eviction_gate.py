"""The eviction gate at admission, over the watch caches: a drain's eviction of a monitored job's pod
waits for the job's maintenance checkpoint (429), and anything the gate cannot read lets it through."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import kopf
from kopf._cogs.structs import ephemera, references
from kopf._core.engines import admission

from tests.conftest import MONITOR
from tests.kube.fakes import FakeKube, pod
from trainguard.controller.eviction import EvictionGate, answer_eviction
from trainguard.controller.handlers import register
from trainguard.kube import NotSynced
from trainguard.remediation.maintenance import HOLD_MARGIN_S
from trainguard.render.webhook import eviction_webhook_configuration
from trainguard.times import rfc3339

NOW = 1_800_000_000.0
SELECTED = MONITOR["spec"]["selector"]["matchLabels"]
EVICTION = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "llama-0", "namespace": "ml"}}


def node(name: str, cordoned: bool) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"unschedulable": True} if cordoned else {}}  # fmt: skip


def reads(*, cordoned: bool = True, records: list[dict[str, Any]] | None = None) -> FakeKube:
    monitor = copy.deepcopy(MONITOR)
    monitor["status"] = {"remediations": records or []}
    running = pod("ml", "llama-0", SELECTED, spec={"nodeName": "gpu-a"}, status={"phase": "Running"})
    running["metadata"]["creationTimestamp"] = rfc3339(NOW - 3600)
    return FakeKube(monitor, running, node("gpu-a", cordoned))


class Clock:
    def __init__(self) -> None:
        self.t = NOW

    def __call__(self) -> float:
        return self.t


def test_a_drain_is_held_until_the_checkpoint_then_let_through() -> None:
    clock = Clock()
    gate = EvictionGate(clock=clock)
    held = answer_eviction(EVICTION, reads(), gate, 0.1)
    assert not held.allowed
    assert "checkpointing before it leaves node gpu-a" in held.message
    done = {
        "id": "m-1", "class": "maintenance", "node": "gpu-a", "phase": "InProgress", "created": rfc3339(NOW + 2),
        "steps": [{"kind": "RequestCheckpoint", "phase": "Succeeded"}, {"kind": "RestartGang", "phase": "Planned"}],
    }  # fmt: skip
    clock.t += 20
    assert answer_eviction(EVICTION, reads(records=[done]), gate, 0.1).allowed


def test_the_hold_counts_from_the_gates_first_hold() -> None:
    clock = Clock()
    gate = EvictionGate(clock=clock)
    assert not answer_eviction(EVICTION, reads(), gate, 0.1).allowed
    clock.t += 300 + HOLD_MARGIN_S - 1
    assert not answer_eviction(EVICTION, reads(), gate, 0.1).allowed
    clock.t += 1
    assert answer_eviction(EVICTION, reads(), gate, 0.1).allowed


def test_what_the_gate_does_not_hold() -> None:
    gate = EvictionGate(clock=Clock())
    assert answer_eviction(EVICTION, reads(cordoned=False), gate, 0.1).allowed
    other = {**EVICTION, "metadata": {"name": "someone-else", "namespace": "ml"}}
    assert answer_eviction(other, reads(), gate, 0.1).allowed
    assert answer_eviction(EVICTION, None, gate, 0.1).allowed
    # the operator in dry run or off takes no checkpoint: nothing to wait for
    assert answer_eviction(EVICTION, reads(), gate, 0.1, "dry-run").allowed
    assert answer_eviction(EVICTION, reads(), gate, 0.1, "off").allowed
    assert not answer_eviction(EVICTION, reads(), gate, 0.1, "act").allowed


class Unsynced(FakeKube):
    def monitors_in(self, namespace: str, timeout: float | None = None) -> list[dict[str, Any]]:
        raise NotSynced("not listed yet")


class Broken(FakeKube):
    def nodes(self) -> list[dict[str, Any]]:
        raise RuntimeError("boom")


def test_the_gate_fails_open() -> None:
    gate = EvictionGate(clock=Clock())
    assert answer_eviction(EVICTION, Unsynced(), gate, 0.1).allowed
    broken = Broken(*reads()._list("TrainingJobMonitor"), *reads()._list("Pod"))
    assert answer_eviction(EVICTION, broken, gate, 0.1).allowed


def test_the_gate_is_served_at_the_path_its_configuration_names() -> None:
    """kopf routes a webhook request to the handler whose id is the request's path."""
    registry = kopf.OperatorRegistry()
    register(registry)
    hooks = {h.id: h for h in registry._webhooks.get_all_handlers()}
    path = eviction_webhook_configuration(b"ca", url="https://op:9443")["webhooks"][0]["clientConfig"]["url"]
    hook = hooks[path.rsplit("/", 1)[1]]
    assert hook.subresource == "eviction"
    assert hook.operations == ["CREATE"]
    assert hook.reason == "validating"


def review(memo: Any) -> dict[str, Any]:
    """kopf's own admission engine answering the apiserver's AdmissionReview for a pods/eviction CREATE,
    as the webhook server hands it over (the path names the handler)."""

    class Memories:
        async def recall_memo(self, raw_body: Any, *, memobase: Any = None, ephemeral: bool = False) -> Any:
            return memobase

    registry = kopf.OperatorRegistry()
    register(registry)
    pods = references.Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True,
                               subresources=frozenset({"eviction"}), singular="pod", preferred=True)  # fmt: skip
    insights = references.Insights()
    insights.webhook_resources.add(pods)
    memobase = ephemera.Memo()
    memobase.update(memo)
    request = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "eviction",
        "operation": "CREATE", "userInfo": {"username": "system:serviceaccount:kube-system:drainer"},
        "object": EVICTION}}  # fmt: skip
    answer = asyncio.run(
        admission.serve_admission_request(
            request,  # type: ignore[arg-type]
            webhook="hold-eviction",  # type: ignore[arg-type]
            settings=kopf.OperatorSettings(),
            memories=Memories(),  # type: ignore[arg-type]
            memobase=memobase,  # type: ignore[arg-type]
            registry=registry,
            insights=insights,
            indices={},
        )
    )
    return dict(answer["response"])


def test_the_apiserver_gets_429_and_the_message_then_allowed_without_the_maintenance() -> None:
    held = review({"reads": reads()})
    assert held["allowed"] is False
    assert held["status"]["code"] == 429  # what kubectl drain and the eviction clients retry
    assert "checkpointing before it leaves node gpu-a" in held["status"]["message"]
    assert review({"reads": reads(cordoned=False)}) == {"uid": "u-1", "allowed": True}
    assert review({})["allowed"] is True  # no caches yet: open
