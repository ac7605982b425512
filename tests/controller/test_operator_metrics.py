"""The operator's own metrics: each edge reports what happened (a reconcile and its result, an
injection failure, a remediation step moving on, a post to the receiver), and /metrics serves them to
a real HTTP scrape, parsed with prometheus_client's own parser. The API edge is the in-memory stand-in
of tests/controller (the real one is e2e/test_operator_metrics.py); the receiver runs over real TLS."""

from __future__ import annotations

import copy
import json
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import MONITOR, POLICY, monitor_body
from tests.exposition import metric_families
from tests.kube.fakes import FakeKube, namespace_terminating, refused
from tests.remediation.fakes import loop_rig, p0_signal
from tests.remediation.intake import (
    KEY,
    NOW,
    Intake,
    alerts_token,
    am_payload,
    events_token,
    monitors,
    post,
    xid,
)
from trainguard.catalog.kubernetes import FAULT_HISTORY
from trainguard.controller import handlers
from trainguard.controller.admission import admit
from trainguard.controller.metrics import (
    OperatorMetrics,
    RemediationFirstCollector,
    parse_addr,
    reconcile_result,
    serve,
)
from trainguard.kube.errors import NotSynced
from trainguard.kube.watch import Counts
from trainguard.remediation import lemon
from trainguard.remediation.lemon import LemonPolicy
from trainguard.remediation.receiver import Receiver, ReceiverConfig
from trainguard.remediation.urgency import Urgency

FAMILIES = {
    "trainguard_operator_reconcile",
    "trainguard_operator_reconcile_errors",
    "trainguard_operator_resyncs",
    "trainguard_operator_reconcile_duration_seconds",
    "trainguard_operator_remediation_steps",
    "trainguard_operator_signals_received",
    "trainguard_operator_webhook_duration_seconds",
    "trainguard_operator_injection_failures",
    "trainguard_operator_leader",
}


def value(metrics: OperatorMetrics, name: str, **labels: str) -> float:
    got = metrics.registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


# ---- the endpoint ---------------------------------------------------------------------------------


def test_metrics_answer_a_real_scrape_with_every_family_and_the_leader() -> None:
    leading = [True]
    metrics = OperatorMetrics(CollectorRegistry(), leader=lambda: leading[0])
    server = serve("127.0.0.1:0", metrics.registry)
    assert server is not None
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        metrics.reconciled({"conditions": [{"type": "Ready", "status": "True"}]}, 0.2)
        families = metric_families(url)
        assert set(families) >= FAMILIES
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for s in families["trainguard_operator_reconcile"].samples
        }
        assert samples[("trainguard_operator_reconcile_total", (("result", "success"),))] == 1
        assert samples[("trainguard_operator_reconcile_total", (("result", "error"),))] == 0
        assert families["trainguard_operator_leader"].samples[0].value == 1
        leading[0] = False  # read at each scrape
        assert metric_families(url)["trainguard_operator_leader"].samples[0].value == 0
    finally:
        server.shutdown()
        server.server_close()


def test_a_port_already_taken_costs_the_metrics_not_the_operator() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert serve(f"127.0.0.1:{port}", CollectorRegistry()) is None


@pytest.mark.parametrize(
    ("addr", "expected"),
    [
        (":8081", ("0.0.0.0", 8081)),
        ("127.0.0.1:9000", ("127.0.0.1", 9000)),
        ("[::1]:81", ("::1", 81)),
        ("", None),
    ],
)
def test_metrics_addr(addr: str, expected: tuple[str, int] | None) -> None:
    assert parse_addr(addr) == expected


@pytest.mark.parametrize("addr", ["8081", "host:", ":http", ":70000"])
def test_a_wrong_metrics_addr_is_refused_naming_the_flag(addr: str) -> None:
    with pytest.raises(ValueError, match="--metrics-addr"):
        parse_addr(addr)


# ---- reconciles -----------------------------------------------------------------------------------


def test_each_reconcile_counts_its_result_and_only_operator_failures_are_errors() -> None:
    metrics = OperatorMetrics(CollectorRegistry())
    ns, name = MONITOR["metadata"]["namespace"], MONITOR["metadata"]["name"]
    ok = FakeKube(monitor_body(), POLICY)
    handlers.reconcile(ok, ok, ns, name, settings=handlers.MonitorSettings(metrics=metrics))  # type: ignore[arg-type]
    no_policy = FakeKube(monitor_body())  # the user's mistake: Degraded, not an operator error
    handlers.reconcile(no_policy, no_policy, ns, name, settings=handlers.MonitorSettings(metrics=metrics))  # type: ignore[arg-type]
    forbidden = FakeKube(monitor_body(), POLICY, refuse={"PodMonitor": refused(403, "no")})
    handlers.reconcile(forbidden, forbidden, ns, name, settings=handlers.MonitorSettings(metrics=metrics))  # type: ignore[arg-type]
    down = FakeKube(monitor_body(), POLICY, refuse={"PrometheusRule": refused(503, "etcd")})
    with pytest.raises(Exception, match="503"):
        handlers.reconcile(down, down, ns, name, settings=handlers.MonitorSettings(metrics=metrics))  # type: ignore[arg-type]
    going = FakeKube(monitor_body(), POLICY, refuse={"PodMonitor": namespace_terminating(ns)})
    handlers.reconcile(going, going, ns, name, settings=handlers.MonitorSettings(metrics=metrics))  # type: ignore[arg-type]  # returns: kopf does not retry

    reconciles = "trainguard_operator_reconcile_total"
    assert value(metrics, reconciles, result="success") == 1
    assert value(metrics, reconciles, result="rejected") == 1
    assert value(metrics, reconciles, result="error") == 2  # the refused apply and the one that raised
    assert value(metrics, reconciles, result="skipped") == 1  # the namespace being deleted
    assert value(metrics, "trainguard_operator_reconcile_errors_total") == 2
    assert value(metrics, "trainguard_operator_reconcile_duration_seconds_count") == 5
    assert going.status is None


def test_an_event_refused_in_a_namespace_being_deleted_is_not_logged_as_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Refusing(FakeKube):
        """An apiserver that refuses the Event: the namespace is being deleted."""

        def post_event(self, *args: Any, **kw: Any) -> None:
            raise namespace_terminating(MONITOR["metadata"]["namespace"])

    post = handlers.announcer(Refusing(monitor_body()), monitor_body())  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO):
        post("Applied", "applied PodMonitor")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

    class Broken(FakeKube):
        """An apiserver that refuses the Event: the operator may not post it."""

        def post_event(self, *args: Any, **kw: Any) -> None:
            raise refused(403, "events is forbidden: cannot create")

    handlers.announcer(Broken(monitor_body()), monitor_body())("Applied", "applied PodMonitor")  # type: ignore[arg-type]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        "could not post the Applied Event"
    ]


def test_reconcile_result_reads_the_conditions() -> None:
    def status(ready: str, reason: str) -> dict[str, Any]:
        return {"conditions": [{"type": "Ready", "status": ready}, {"type": "Degraded", "reason": reason}]}

    assert reconcile_result(status("True", "AsExpected")) == "success"
    assert reconcile_result(status("False", "InvalidSpec")) == "rejected"
    assert reconcile_result(status("False", "MissingCRDs")) == "error"
    assert reconcile_result(None) == "error"


# ---- admission ------------------------------------------------------------------------------------


def test_only_a_failed_injection_is_counted_as_one() -> None:
    pod = {"metadata": {"namespace": "ml", "labels": {"app": "llama-pretrain"}}, "spec": {"containers": [{"name": "t", "image": "t:1"}]}}  # fmt: skip
    failures: list[None] = []

    def broken(ns: str) -> list[dict[str, Any]]:
        raise TimeoutError("the API did not answer")

    common: dict[str, Any] = {"post_event": lambda *a: None, "receiver_url": "https://op:8443/v1/events",
                              "sidecar_image": "i", "native_sidecar": True, "failed": lambda: failures.append(None)}  # fmt: skip
    assert admit(pod, monitors_in=lambda ns: [copy.deepcopy(MONITOR)], **common) is not None
    assert admit(pod, monitors_in=lambda ns: [], **common) is None  # matched nothing: no failure
    assert failures == []
    assert admit(pod, monitors_in=broken, **common) is None
    assert len(failures) == 1


# ---- the P0 loop ----------------------------------------------------------------------------------


def test_remediation_steps_are_counted_once_per_phase_they_enter() -> None:
    responder, kube, _ = loop_rig()
    metrics = OperatorMetrics(CollectorRegistry())
    responder.store.on_step = metrics.step
    record = responder.handle(p0_signal("GPUCriticalXid"))
    assert record is not None and responder.idle()
    done = kube.records("ml", "llama-pretrain")[0]
    kinds = [s["kind"] for s in done["steps"]]
    assert kinds, done
    for step in done["steps"]:
        kind = step["kind"]
        assert value(
            metrics, "trainguard_operator_remediation_steps_total", kind=kind, phase="Planned"
        ) == kinds.count(kind)
        assert value(
            metrics, "trainguard_operator_remediation_steps_total", kind=kind, phase=step["phase"]
        ) == kinds.count(kind)
    # every save that moved no step on counted nothing: the total is one entry per phase reached
    entered = sum(
        s.value
        for f in metrics.registry.collect()
        if f.name == "trainguard_operator_remediation_steps"
        for s in f.samples
        if s.name.endswith("_total")
    )
    phases_seen: set[tuple[int, str]] = set()
    for write in kube.status_writes:
        for i, step in enumerate(write["remediations"][0]["steps"]):
            phases_seen.add((i, step["phase"]))
    assert entered == len(phases_seen)


# ---- the receiver ---------------------------------------------------------------------------------


@pytest.fixture
def observed(certs: Path) -> Iterator[tuple[Intake, OperatorMetrics]]:
    metrics = OperatorMetrics(CollectorRegistry())
    config = ReceiverConfig("127.0.0.1", 0, str(certs / "tls.crt"), str(certs / "tls.key"), KEY)
    state = {"standby": False}
    receiver = Receiver(
        config, lambda signals: None, accepting=lambda: not state["standby"], clock=lambda: NOW,
        observe=metrics.signal, monitors=monitors(),
    )  # fmt: skip
    receiver.start()
    it = Intake(receiver, str(certs / "ca.crt"))
    try:
        yield it, metrics
        state["standby"] = True
        assert post(it, "/v1/alerts", am_payload(xid()), alerts_token())[0] == 503
        assert (
            value(
                metrics, "trainguard_operator_signals_received_total", source="alertmanager", result="standby"
            )
            == 1
        )
    finally:
        receiver.stop()


def test_posts_are_counted_by_source_and_result(observed: tuple[Intake, OperatorMetrics]) -> None:
    it, metrics = observed
    assert post(it, "/v1/alerts", am_payload(xid()), alerts_token())[0] == 200
    assert post(it, "/v1/alerts", am_payload(xid()), events_token())[0] == 401  # the other purpose's token
    assert post(it, "/v1/events", {"not": "an event"}, events_token())[0] == 400
    assert post(it, "/v1/events", {}, None)[0] == 401
    assert post(it, "/v1/nothing", {}, alerts_token())[0] == 404  # no source: not counted

    def count(source: str, result: str) -> float:
        return value(metrics, "trainguard_operator_signals_received_total", source=source, result=result)

    assert count("alertmanager", "accepted") == 1
    assert count("alertmanager", "unauthorized") == 1
    assert count("fastpath", "invalid") == 1
    assert count("fastpath", "unauthorized") == 1
    total = sum(
        s.value
        for f in metrics.registry.collect()
        if f.name == "trainguard_operator_signals_received"
        for s in f.samples
        if s.name.endswith("_total")
    )
    assert total == 4


def test_the_watch_caches_counts_are_read_at_each_scrape() -> None:
    """A state-free collector: the caches keep the numbers, each scrape reads them as they are."""
    counts = {"pods": Counts(lists=1, watches=3), "nodes": Counts(lists=1, watches=2, quiet=1)}
    metrics = OperatorMetrics(CollectorRegistry(), caches=lambda: counts)
    assert value(metrics, "trainguard_operator_watch_cache_lists_total", resource="pods") == 1
    assert value(metrics, "trainguard_operator_watch_cache_quiet_total", resource="nodes") == 1
    counts["pods"].lists += 1  # it listed again
    assert value(metrics, "trainguard_operator_watch_cache_lists_total", resource="pods") == 2
    assert value(metrics, "trainguard_operator_watch_cache_watches_total", resource="nodes") == 2


def test_the_nodes_fault_scores_are_read_from_the_node_cache_at_each_scrape() -> None:
    """A state-free collector: the history lives on the nodes, each scrape scores them as they are."""
    day = 86400
    history = [{"ts": int(NOW) - age * day, "cause": "GPULost", "record": f"r{age}"} for age in (1, 2, 40)]
    nodes = [
        {"metadata": {"name": "gpu-a", "annotations": {FAULT_HISTORY: json.dumps(history)}}},
        {"metadata": {"name": "gpu-b"}},
    ]
    policy = [LemonPolicy(faults=2)]
    metrics = OperatorMetrics(CollectorRegistry(), node_faults=lambda: lemon.scores(nodes, NOW, policy[0]))
    assert value(metrics, "trainguard_node_faults", node="gpu-a") == 2, "the one 40 days old aged out"
    assert value(metrics, "trainguard_node_lemon", node="gpu-a") == 1
    assert metrics.registry.get_sample_value("trainguard_node_faults", {"node": "gpu-b"}) is None
    policy[0] = LemonPolicy(faults=3)
    assert value(metrics, "trainguard_node_lemon", node="gpu-a") == 0

    def unsynced() -> list[Any]:
        raise NotSynced("nodes")

    quiet = OperatorMetrics(CollectorRegistry(), node_faults=unsynced)
    assert quiet.registry.get_sample_value("trainguard_node_faults", {"node": "gpu-a"}) is None
    assert quiet.registry.get_sample_value("trainguard_operator_leader") is not None, "the rest still scraped"


def test_the_remediation_first_gate_is_exported_as_it_counts() -> None:
    metrics = OperatorMetrics(CollectorRegistry())
    gate = Urgency(30.0)
    metrics.registry.register(RemediationFirstCollector(gate))
    gate.begin(("ml", "llama-pretrain"))
    threading.Timer(0.2, gate.end, args=(("ml", "llama-pretrain"),)).start()
    waited = gate.wait()
    assert value(metrics, "trainguard_operator_remediation_first_holds_total") == 1
    assert value(metrics, "trainguard_operator_remediation_first_waits_total") == 1
    assert value(metrics, "trainguard_operator_remediation_first_wait_seconds_total") == waited > 0.1
    assert value(metrics, "trainguard_operator_remediation_first_forced_open_total") == 0
