"""The sidecar-injection webhook on kopf's event loop: answered from the watch cache without a thread,
its JSON patch built from the replaced fields (giving the pod what the injection decided), a thread
only for a read that waits, and every other webhook still answered by kopf's admission engine."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import socket
import threading
from typing import Any

import aiohttp
import jsonpatch
import kopf
import pytest

from tests.conftest import MONITOR
from trainguard.catalog.kubernetes import RESUME_FROM
from trainguard.controller import admission
from trainguard.controller.admission import Deferred, json_patch, review_answer
from trainguard.controller.injection import WEBHOOK_ID, AdmissionServer, SidecarInjection
from trainguard.kube import NotSynced
from trainguard.render.sidecar import EXPORTER, INJECTED
from trainguard.render.webhook import mutating_webhook_configuration

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "namespace": "ml",
        "generateName": "llama-pretrain-0-",
        "labels": {"app": "llama-pretrain"},
        "annotations": {"team": "nlp", "a/b~c": "kept"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "llama-pretrain",
                             "uid": "job-uid", "controller": True}],
    },
    "spec": {"containers": [{"name": "trainer", "image": "t:1", "env": [{"name": "EXISTING", "value": "1"}]}],
             "tolerations": [{"key": "gpu", "operator": "Exists"}]},
}  # fmt: skip
CHECKPOINT = '{"kind": "full", "path": "/ckpt/1000", "step": 1000}'


def review(pod: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": "CREATE", "namespace": "ml",
                        "object": copy.deepcopy(pod if pod is not None else POD)}}  # fmt: skip


class Reads:
    """The watch cache: its monitors, or NotSynced while it has not listed; the timeouts it was given."""

    def __init__(self, monitors: list[dict[str, Any]] | None) -> None:
        self.monitors = monitors
        self.timeouts: list[float | None] = []

    def monitors_in(self, namespace: str, timeout: float | None = None) -> list[dict[str, Any]]:
        self.timeouts.append(timeout)
        if self.monitors is None:
            raise NotSynced("not listed")
        return [copy.deepcopy(m) for m in self.monitors]


class Api:
    """The Kube calls the injection may make, each noted with the thread it ran on."""

    def __init__(self, monitors: list[dict[str, Any]], pointer: str | None = None) -> None:
        self.monitors, self.pointer = monitors, pointer
        self.calls: list[tuple[str, str]] = []

    def list_monitors(self, namespace: str, timeout: float | None = None) -> list[dict[str, Any]]:
        self.calls.append(("list", threading.current_thread().name))
        return copy.deepcopy(self.monitors)

    def workload_annotation(self, *where: str, timeout: float | None = None) -> str | None:
        """namespace, apiVersion, kind, name and annotation key, as Kube.workload_annotation takes them."""
        self.calls.append(("get", threading.current_thread().name))
        return self.pointer

    def post_event(self, obj: dict[str, Any], reason: str, message: str, type_: str,
                   timeout: float | None = None) -> None:  # fmt: skip
        self.calls.append((reason, threading.current_thread().name))


def injection(reads: Reads, api: Api) -> SidecarInjection:
    return SidecarInjection(api, reads, receiver_url="https://op:8443/v1/events", sidecar_image="i:1",  # type: ignore[arg-type]
                            native_sidecar=True)  # fmt: skip


def patched(answer: dict[str, Any], pod: dict[str, Any] | None = None) -> dict[str, Any]:
    """The pod as the apiserver makes it with the answer's JSON patch."""
    response = answer["response"]
    assert response["allowed"] is True and response["uid"] == "u-1"
    if "patch" not in response:
        return copy.deepcopy(pod if pod is not None else POD)
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    return dict(jsonpatch.apply_patch(copy.deepcopy(pod if pod is not None else POD), ops))


def restarting(progress: dict[str, Any]) -> dict[str, Any]:
    mon = copy.deepcopy(MONITOR)
    mon["spec"]["workloadRef"] = {"kind": "Job", "name": "llama-pretrain"}
    mon["status"] = {"remediations": [{
        "id": "r", "phase": "InProgress", "created": "2026-12-01T02:59:00Z", "updated": "2026-12-01T02:59:00Z",
        "dryRun": False, "steps": [{"kind": "RestartGang", "phase": "InProgress", "progress": progress}]}]}  # fmt: skip
    return mon


def resume_from(pod: dict[str, Any]) -> str | None:
    """The pointer the exporter was given, which the pod's annotation must say too (ConfirmPlacement
    reads that: the operator's pod cache keeps no environment)."""
    env = {e["name"]: e.get("value") for e in pod["spec"]["initContainers"][-1]["env"]}
    said = (pod["metadata"].get("annotations") or {}).get(RESUME_FROM)
    assert said == env.get("TRAINGUARD_RESUME_FROM"), (said, env.get("TRAINGUARD_RESUME_FROM"))
    return env.get("TRAINGUARD_RESUME_FROM")


# ---- the JSON patch ----


@pytest.mark.parametrize("drop", [(), ("annotations",), ("tolerations",)])
def test_the_patch_gives_the_pod_exactly_the_injections_fields(drop: tuple[str, ...]) -> None:
    """The fields inject() replaces, each whole, and nothing else of the pod touched (kopf's merge of
    the same changes, against which the answer used to be diffed)."""
    pod = copy.deepcopy(POD)
    for field in drop:
        (pod["metadata"] if field == "annotations" else pod["spec"]).pop(field)
    mon = restarting({"count": 2, "createdUpTo": 1, "resumeFrom": CHECKPOINT})
    changes = admission.admit(pod, monitors_in=lambda ns: [mon], post_event=lambda *a: None, receiver_url="u",
                              sidecar_image="i", native_sidecar=True)  # fmt: skip
    assert changes is not None and set(changes["spec"]) >= {
        "initContainers",
        "containers",
        "volumes",
        "tolerations",
    }
    expected = copy.deepcopy(pod)
    expected["metadata"]["annotations"] = changes["metadata"]["annotations"]
    expected["spec"].update(changes["spec"])
    result = jsonpatch.apply_patch(copy.deepcopy(pod), json_patch(pod, changes))
    assert result == expected
    # what kopf's patch of the same changes (the webhook's answer before) gives the pod
    before = kopf.Patch(body=kopf.Body(copy.deepcopy(pod)))  # type: ignore[arg-type]
    before.metadata["annotations"] = changes["metadata"]["annotations"]
    for key, value in changes["spec"].items():
        before.spec[key] = value
    assert jsonpatch.apply_patch(copy.deepcopy(pod), before.as_json_patch()) == result
    if "annotations" not in drop:
        assert result["metadata"]["annotations"]["a/b~c"] == "kept"


def test_a_field_whose_name_needs_escaping_and_a_missing_parent() -> None:
    ops = json_patch({"metadata": {}}, {"metadata": {"a/b~c": 1}, "spec": {"containers": []}})
    assert ops == [{"op": "add", "path": "/metadata/a~1b~0c", "value": 1},
                   {"op": "add", "path": "/spec", "value": {"containers": []}}]  # fmt: skip
    assert jsonpatch.apply_patch({"metadata": {}}, ops) == {
        "metadata": {"a/b~c": 1},
        "spec": {"containers": []},
    }


def test_an_answer_without_changes_allows_the_pod_without_a_patch() -> None:
    answer = review_answer(review(), [])
    assert answer == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "response": {"uid": "u-1", "allowed": True}}  # fmt: skip


# ---- on the loop, a thread only for a read that waits ----


def test_from_the_cache_the_answer_needs_no_thread() -> None:
    reads, api = Reads([MONITOR]), Api([])
    answer = injection(reads, api).answer(review(), wait=False)  # raises Deferred if it needed a thread
    pod = patched(answer)
    assert [c["name"] for c in pod["spec"]["initContainers"]] == [EXPORTER]
    assert pod["metadata"]["annotations"][INJECTED] == "llama-pretrain"
    assert RESUME_FROM not in pod["metadata"]["annotations"] and resume_from(pod) is None, "no restart"
    assert reads.timeouts == [0.0], "the cache read does not wait on the loop"
    assert api.calls == []


def test_a_pod_no_monitor_selects_is_allowed_unchanged() -> None:
    other = copy.deepcopy(POD)
    other["metadata"]["labels"] = {"app": "web"}
    answer = asyncio.run(injection(Reads([MONITOR]), Api([]))(review(other)))
    assert "patch" not in answer["response"] and answer["response"]["allowed"] is True


def test_a_cache_not_listed_yet_is_read_through_the_api_on_a_thread() -> None:
    reads, api = Reads(None), Api([copy.deepcopy(MONITOR)])
    with pytest.raises(Deferred):
        injection(reads, api).answer(review(), wait=False)
    assert api.calls == []
    main = threading.current_thread().name
    pod = patched(asyncio.run(injection(reads, api)(review())))
    assert [c["name"] for c in pod["spec"]["initContainers"]] == [EXPORTER]
    assert [call for call, _ in api.calls] == ["list"] and api.calls[0][1] != main


def test_a_restart_an_older_operator_began_reads_the_workload_on_a_thread() -> None:
    mon = restarting({"count": 2, "createdUpTo": 1})  # no resumeFrom: the pointer is on the workload only
    api = Api([], pointer=CHECKPOINT)
    pod = patched(asyncio.run(injection(Reads([mon]), api)(review())))
    assert resume_from(pod) == CHECKPOINT
    assert [call for call, _ in api.calls] == ["get"] and api.calls[0][1] != threading.current_thread().name


def test_a_restart_this_operator_began_answers_on_the_loop() -> None:
    mon = restarting({"count": 2, "createdUpTo": 1, "resumeFrom": CHECKPOINT})
    api = Api([])
    pod = patched(injection(Reads([mon]), api).answer(review(), wait=False))
    assert resume_from(pod) == CHECKPOINT and api.calls == []


def test_a_failure_on_the_loop_admits_the_pod_and_posts_its_event_from_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("renderer broke")

    monkeypatch.setattr(admission, "inject", broken)
    api = Api([])
    failures: list[None] = []
    subject = injection(Reads([MONITOR]), api)
    subject.metrics = type("M", (), {"injection_failed": lambda self: failures.append(None),
                                     "admitted": lambda self, s: None})()  # fmt: skip
    answer = asyncio.run(subject(review()))  # asyncio.run joins the default executor's threads
    assert answer["response"] == {"uid": "u-1", "allowed": True}
    assert failures == [None]
    assert [call for call, _ in api.calls] == ["InjectionFailed"]
    assert api.calls[0][1] != threading.current_thread().name


# ---- the server: kopf's, the injection routed to it, the rest to kopf ----


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_server_answers_the_injection_itself_and_hands_the_rest_to_kopf() -> None:
    path = mutating_webhook_configuration(b"ca", url="https://op:9443")["webhooks"][0]["clientConfig"]["url"]
    assert path.rsplit("/", 1)[1] == WEBHOOK_ID, "the configuration names the path the server routes"
    to_kopf: list[str | None] = []

    async def kopf_engine(request: Any, *, webhook: Any = None, **context: Any) -> dict[str, Any]:
        to_kopf.append(webhook)
        return {"response": {"uid": "k", "allowed": False}}

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        port = free_port()
        server = AdmissionServer({WEBHOOK_ID: injection(Reads([MONITOR]), Api([]))}, addr="127.0.0.1",
                                 port=port, insecure=True)  # fmt: skip
        serving = server(kopf_engine)
        config = await serving.__anext__()
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(f"{config['url']}/{WEBHOOK_ID}", json=review()) as r:
                    injected = await r.json()
                async with session.post(f"{config['url']}/hold-eviction", json=review()) as r:
                    other = await r.json()
        finally:
            await serving.aclose()
        return injected, other

    injected, other = asyncio.run(scenario())
    pod = patched(injected)
    assert [c["name"] for c in pod["spec"]["initContainers"]] == [EXPORTER]
    assert other == {"response": {"uid": "k", "allowed": False}} and to_kopf == ["hold-eviction"]
