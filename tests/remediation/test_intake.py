"""The intake's durable hand-over, on the P0 loop as the operator wires it over the Kubernetes edge's fake
(tests/remediation/fakes.py loop_rig): a signal that could be acted on is in its monitor's
status.pendingSignals when `receive` returns (when the receiver answers 200), a failed write raises
NotRecorded (a 503), an irrelevant signal costs no write, and twelve copies of one fault are one entry.
The planner thread is not started: what `receive` left is all there is until the test plans it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.clock import T0
from tests.kube.fakes import refused
from tests.remediation.fakes import loop_rig, p0_signal
from tests.remediation.test_pending import XID, copies
from trainguard.kube.errors import NotSynced
from trainguard.remediation.loop import RemediationLoop
from trainguard.remediation.model import Signal, Source
from trainguard.remediation.pending import NotRecorded
from trainguard.remediation.plan import record_id

NS, JOB = "ml", "llama-pretrain"


def pending_writes(kube: Any) -> list[Any]:
    return [w["pendingSignals"] for w in kube.status_writes if "pendingSignals" in w]


def pending_in(kube: Any) -> list[dict[str, Any]]:
    """The monitor's pending signals, read from the fake's store (not through a read a test broke)."""
    return list(
        (kube.objects[("TrainingJobMonitor", NS, JOB)].get("status") or {}).get("pendingSignals") or []
    )


def queued(loop: RemediationLoop) -> list[Signal]:
    out = []
    while (s := loop.intake.next(timeout=0)) is not None:
        out.append(s)
    return out


def test_a_signal_is_in_the_monitors_status_when_receive_returns() -> None:
    loop, kube, _ = loop_rig()
    signal = p0_signal("GPUCriticalXid")
    loop.receive([signal])
    assert [e["id"] for e in pending_in(kube)] == [record_id(signal)]
    assert pending_in(kube)[0]["labels"]["node"] == "gpu-a" and kube.records(NS, JOB) == []
    assert queued(loop) == [signal], "and queued for the planner"


def test_signals_that_could_never_be_acted_on_cost_no_write_and_are_not_planned() -> None:
    loop, kube, _ = loop_rig()
    p2 = Signal("TrainingThroughputLow", "P2", {**XID, "alertname": "TrainingThroughputLow", "severity": "P2"},
                "f-p2", Source.ALERTMANAGER, T0)  # fmt: skip
    resolved = Signal(**{**p0_signal("GPUCriticalXid").__dict__, "firing": False})
    other_job = p0_signal("GPUCriticalXid")
    other_job = Signal(**{**other_job.__dict__, "labels": {**other_job.labels, "training_job": "nobody"}})
    loop.receive([p2, resolved, other_job] * 1000)
    assert kube.status_writes == [] and queued(loop) == []


def test_a_monitor_the_cache_does_not_know_or_holds_invalid_has_nothing_to_do() -> None:
    loop, kube, _ = loop_rig()
    body = kube.get_monitor(NS, JOB)
    for cached in ([], [body | {"spec": {**body["spec"], "mode": "not-a-mode"}}]):
        kube.monitors_in = lambda namespace, timeout=None, cached=cached: cached  # type: ignore[method-assign]
        loop.receive([p0_signal("GPUCriticalXid")])
    assert kube.status_writes == [] and queued(loop) == []


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param({"get_monitor": refused(503, "etcdserver: leader changed")}, id="read refused"),
        pytest.param({"patch_status": refused(500, "Internal error")}, id="write refused"),
        pytest.param({"patch_status": ConnectionResetError("reset by peer")}, id="connection lost"),
        pytest.param({"monitors_in": NotSynced("monitors not listed yet")}, id="cache not synced"),
    ],
)
def test_a_failed_write_raises_not_recorded_and_queues_nothing(broken: dict[str, Exception]) -> None:
    loop, kube, _ = loop_rig()
    for method, exc in broken.items():

        def fail(*args: Any, exc: Exception = exc, **kw: Any) -> Any:
            raise exc

        setattr(kube, method, fail)
    with pytest.raises(NotRecorded):
        loop.receive([p0_signal("GPUCriticalXid")])
    assert queued(loop) == []


def test_a_monitor_deleted_since_the_cache_saw_it_has_nothing_to_do() -> None:
    loop, kube, _ = loop_rig()
    cached = kube.monitors_in(NS)
    kube.objects.clear()
    kube.monitors_in = lambda namespace, timeout=None: cached  # type: ignore[method-assign]
    loop.receive([p0_signal("GPUCriticalXid")])
    assert kube.status_writes == [] and queued(loop) == []


def test_a_full_list_refuses_a_new_fault() -> None:
    loop, _, _ = loop_rig()
    loop.receive([Signal(**{**p0_signal("GPUCriticalXid", f"gpu-{i}").__dict__, "fingerprint": f"f{i}"})
                  for i in range(32)])  # fmt: skip
    with pytest.raises(NotRecorded, match="32 pending"):
        loop.receive([p0_signal("GPULost", "gpu-z")])


def test_one_patch_per_monitor_per_request() -> None:
    loop, kube, _ = loop_rig()
    loop.receive(
        [
            p0_signal("GPUCriticalXid", "gpu-a"),
            p0_signal("GPULost", "gpu-b"),
            p0_signal("GPUCriticalXid", "gpu-c"),
        ]
    )
    assert len(pending_writes(kube)) == 1 and len(pending_in(kube)) == 3


def test_twelve_copies_of_one_fault_posted_at_once_are_one_entry_written_once() -> None:
    loop, kube, _ = loop_rig()
    signals = copies()
    start = threading.Barrier(len(signals))
    errors: list[BaseException] = []

    def post(s: Signal) -> None:
        start.wait()
        try:
            loop.receive([s])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=post, args=(s,)) for s in signals]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(pending_in(kube)) == 1
    # the sidecar's copy (the earlier start) may replace Alertmanager's once: two writes at most
    assert 1 <= len(pending_writes(kube)) <= 2
    assert pending_in(kube)[0]["source"] == "sidecar"
    for s in queued(loop):
        loop.handle(s)
    assert len(kube.records(NS, JOB)) == 1 and pending_in(kube) == []
