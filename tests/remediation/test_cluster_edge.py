"""The remediation edge without a cluster: sidecar control against a real exporter in this process, the
taint's read-modify-write on a conflict against a stand-in for kube.Kube's node calls that answers as
the apiserver does, and the pure helpers."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.exporter.running import running_exporter
from tests.processes import free_port
from trainguard.catalog.kubernetes import FAULTY_TAINT
from trainguard.kube import ApiError
from trainguard.kube.objects import label_value, new_pods_placement, taints_with
from trainguard.remediation.cluster import Cluster
from trainguard.remediation.sidecars import ControlError, SidecarControl

TOKEN = "t0k3n"


@pytest.fixture
def sidecar(tmp_path: Path) -> Any:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    with running_exporter(
        "--backend", "none", "--no-host", "--fastpath-token-file", str(token), sdk_tcp=False
    ) as running:
        yield running


def test_control_and_read_control_speak_the_exporters_protocol(sidecar: Any) -> None:
    edge = SidecarControl(timeout=2)
    view = edge.control(sidecar.url, TOKEN, {"pause": True, "checkpoint": "full"})
    assert view["pause"] is True and view["checkpoint"] == "full"
    advice = [{"advice": "clip_gradients", "record": "r1"}]
    edge.control(sidecar.url, TOKEN, {"advisories": advice})
    read = edge.read_control(sidecar.url, TOKEN)
    assert read["advisories"] == advice and read["pause"] is True and read["resume_from"] is None


def test_the_sidecar_holds_a_pinned_resume_from(sidecar: Any) -> None:
    """The executor posts the pin and checks the answer: the sidecar holds it (pinned) and says so on
    a later read; a pin it cannot use is a 400, so the executor's detail names that sidecar."""
    edge = SidecarControl()
    pin = {"step": 900, "kind": "full", "path": "/ckpt/900", "ts": 1_700_000_000.0}
    view = edge.control(sidecar.url, TOKEN, {"resume_from": pin})
    assert view["resume_from"] == pin and view["pinned"] is True
    read = edge.read_control(sidecar.url, TOKEN)
    assert read["resume_from"] == pin and read["pinned"] is True
    with pytest.raises(ControlError, match="HTTP 400"):
        edge.control(sidecar.url, TOKEN, {"resume_from": {"path": "/ckpt/900"}})
    cleared = edge.control(sidecar.url, TOKEN, {"resume_from": None})
    assert cleared["pinned"] is False and cleared["resume_from"] is None


def test_a_wrong_token_is_a_control_error(sidecar: Any) -> None:
    edge = SidecarControl()
    with pytest.raises(ControlError, match="HTTP 401"):
        edge.control(sidecar.url, "wrong", {"pause": True})
    with pytest.raises(ControlError, match="HTTP 401"):
        edge.read_control(sidecar.url, "wrong")
    assert edge.read_control(sidecar.url, TOKEN)["pause"] is False


def test_an_unreachable_sidecar_is_a_control_error_within_the_timeout() -> None:
    edge = SidecarControl(timeout=1)
    started = time.monotonic()
    with pytest.raises(ControlError):
        edge.read_control(f"http://127.0.0.1:{free_port()}", TOKEN)
    assert time.monotonic() - started < 2


class Nodes:
    """kube.Kube's node calls for one node: patches with a stale resourceVersion are a 409, as the
    apiserver answers a merge patch that carries metadata.resourceVersion."""

    def __init__(self, taints: list[dict[str, str]], interloper: dict[str, str] | None = None) -> None:
        self.version = 1
        self.taints = taints
        self.interloper = interloper
        self.patches: list[dict[str, Any]] = []

    def read_node(self, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "resourceVersion": str(self.version)},
                "spec": {"taints": [dict(t) for t in self.taints]}}  # fmt: skip

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        self.patches.append(body)
        if self.interloper is not None:  # someone else writes between our read and our patch
            self.taints = [*self.taints, self.interloper]
            self.version += 1
            self.interloper = None
        if body["metadata"]["resourceVersion"] != str(self.version):
            raise ApiError(status=409, reason="Conflict")
        self.taints = body["spec"]["taints"]
        self.version += 1


def test_taint_rereads_on_a_conflict_and_keeps_the_other_writers_taint() -> None:
    other = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    nodes = Nodes([], interloper=other)
    edge = Cluster(nodes, reads=None)  # type: ignore[arg-type]

    assert edge.taint("gpu-a", "GPULost") == f"tainted {FAULTY_TAINT}=GPULost:NoSchedule"
    assert nodes.taints == [other, {"key": FAULTY_TAINT, "value": "GPULost", "effect": "NoSchedule"}]
    assert len(nodes.patches) == 2
    assert edge.taint("gpu-a", "GPULost").startswith("already tainted")
    assert len(nodes.patches) == 2


def test_placement_waits_for_every_new_pod_and_ignores_the_old_gang() -> None:
    def pod(name: str, created: str, node: str = "", deleting: bool = False) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
        if deleting:
            meta["deletionTimestamp"] = "2023-11-14T22:14:00Z"
        return {"metadata": meta, "spec": {"nodeName": node} if node else {}}

    after = 1_700_000_000.5  # 2023-11-14T22:13:20.5Z; pods keep whole seconds
    old = pod("job-0", "2023-11-14T21:00:00Z", "gpu-a", deleting=True)
    same_second = pod("job-0-x", "2023-11-14T22:13:20Z", "gpu-b")
    pending = pod("job-1-y", "2023-11-14T22:13:21Z")
    assert new_pods_placement([old], after) is None
    assert new_pods_placement([old, same_second, pending], after) is None, "one still unscheduled"
    pending["spec"]["nodeName"] = "gpu-c"
    assert new_pods_placement([old, same_second, pending], after) == {"job-0-x": "gpu-b", "job-1-y": "gpu-c"}


def test_taints_and_their_values() -> None:
    mine = {"key": FAULTY_TAINT, "value": "GPULost", "effect": "NoSchedule"}
    assert taints_with([mine], FAULTY_TAINT, "GPUCriticalXid", "NoSchedule") is None, (
        "the first reason stands"
    )
    assert taints_with([], FAULTY_TAINT, "x", "NoSchedule") == [
        {"key": FAULTY_TAINT, "value": "x", "effect": "NoSchedule"}
    ]
    assert label_value("XID 79: fell off the bus!") == "XID-79--fell-off-the-bus"
    assert label_value("") == "fault" and len(label_value("a" * 100)) == 63
