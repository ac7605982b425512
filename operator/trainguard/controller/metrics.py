"""The operator's own metrics (`trainguard_operator_*`) and the nodes' fault scores (`trainguard_node_*`),
served on their own port for Prometheus.

The registry is passed in, so tests read a fresh one and two operators in one process never share
counters. Nothing here decides anything: the handlers, the admission webhook, the P0 loop and the
receiver report what happened through these methods, at their edges.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trainguard.catalog.metrics import GOODPUT_METRICS_BY_NAME
from trainguard.remediation.goodput import CAUSES, monitor_goodput

log = logging.getLogger("trainguard.metrics")

DEFAULT_METRICS_ADDR = ":8081"
"""Next to the liveness endpoint (:8080), the receiver (8443) and the webhook (9443)."""

USER_ERRORS = frozenset({"InvalidSpec", "PolicyNotFound", "InvalidPolicy"})
"""Degraded reasons that are the monitor's own input, not the operator failing: a reconcile that ends
in one of them succeeded at saying so, and is not a reconcile error."""

RECONCILE_RESULTS = ("success", "rejected", "error", "skipped", "repeated")
RESYNC_OUTCOMES = ("in_place", "rendered", "written", "left_to_reconcile", "reconciling")
"""What the periodic resync found of one monitor (controller/handlers.py's resync): its inputs unchanged
since a pass found its objects in place (nothing rendered, no request); rendered and compared with the
caches, nothing to write; something to write, which a reconcile (counted as one) applied; a new monitor
left to its own handler's first reconcile, not begun yet (controller/reconciles_begun.py); a monitor a
reconcile holds the lock of at that moment, which the caches cannot show finished."""
SIGNAL_SOURCES = ("alertmanager", "fastpath")
SIGNAL_RESULTS = ("accepted", "unauthorized", "invalid", "standby", "failed")


def reconcile_result(status: Mapping[str, Any] | None) -> str:
    """success (Ready), rejected (the monitor's own input is wrong) or error (the operator could not
    apply: the API refused, CRDs missing, or the reconcile raised and `status` is None)."""
    if status is None:
        return "error"
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    if (conditions.get("Ready") or {}).get("status") == "True":
        return "success"
    reason = (conditions.get("Degraded") or {}).get("reason")
    return "rejected" if reason in USER_ERRORS else "error"


def parse_addr(addr: str) -> tuple[str, int] | None:
    """`[host]:port` -> (host, port), the host defaulting to every interface; "" -> None (off)."""
    if not addr:
        return None
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--metrics-addr {addr!r}: expected [HOST]:PORT, such as :8081 or 127.0.0.1:8081")
    return host.strip("[]") or "0.0.0.0", int(port)


class CacheCounts(Protocol):
    """kube.watch.Counts: what one watch cache asked of the API."""

    lists: int
    watches: int
    relists: int
    errors: int
    quiet: int


class WatchCacheCollector(Collector):
    """The watch caches' own counts, read at each scrape (state-free: the caches keep the numbers). A
    `lists` that grows in steady state means a cache keeps listing again (410s, or errors)."""

    def __init__(self, counts: Callable[[], Mapping[str, CacheCounts]]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        families = {
            "lists": (
                "trainguard_operator_watch_cache_lists",
                "LIST requests a watch cache made (one at start)",
            ),
            "watches": ("trainguard_operator_watch_cache_watches", "WATCH requests a watch cache made"),
            "relists": ("trainguard_operator_watch_cache_relists", "Lists again after a 410 Gone"),
            "errors": (
                "trainguard_operator_watch_cache_errors",
                "Failed lists or watches (retried with backoff)",
            ),
            "quiet": (
                "trainguard_operator_watch_cache_quiet",
                "Watches that brought nothing for 150 s, not even a bookmark, and were opened again",
            ),
        }
        current = self.counts()
        for attr, (name, text) in families.items():
            family = CounterMetricFamily(name, text, labels=["resource"])
            for resource, c in sorted(current.items()):
                family.add_metric([resource], float(getattr(c, attr)))
            yield family


class NodeFaults(Protocol):
    """remediation/lemon.py's Verdict: a node's faults in the platform's window, and whether it is a lemon."""

    @property
    def faults(self) -> int: ...

    @property
    def lemon(self) -> bool: ...


class NodeFaultsCollector(Collector):
    """Each node's faults in the platform's window and its lemon verdict, read from the node cache at each
    scrape (state-free: the history lives on the nodes, so every replica exports the same)."""

    def __init__(self, scores: Callable[[], Iterable[tuple[str, NodeFaults]]]) -> None:
        self.scores = scores

    def collect(self) -> Iterator[Metric]:
        faults = GaugeMetricFamily(
            "trainguard_node_faults",
            "Faults trainguard acted on per node within the platform's lemon window (--lemon-window)",
            labels=["node"],
        )
        lemon = GaugeMetricFamily(
            "trainguard_node_lemon",
            "1 when the node's faults in the window reach the platform's threshold (--lemon-faults): it is "
            "never a spare and is listed for repair",
            labels=["node"],
        )
        try:
            current = list(self.scores())
        except Exception as exc:  # a cache not synced yet costs these series this scrape, never the rest
            log.debug("node fault scores not read: %s", exc)
            current = []
        for node, verdict in current:
            faults.add_metric([node], float(verdict.faults))
            lemon.add_metric([node], 1.0 if verdict.lemon else 0.0)
        yield faults
        yield lemon


class Gate(Protocol):
    """remediation/urgency.py's Urgency: the remediation-first gate's own counts."""

    holds: int
    waits: int
    waited_s: float
    forced_open: int


class RemediationFirstCollector(Collector):
    """The remediation-first gate's counts, read at each scrape (state-free: the gate keeps them): what
    the fast path's holds cost the reconciles, and how often a stream of signals hit the gate's bound."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def collect(self) -> Iterator[Metric]:
        g = self.gate
        for name, text, got in (
            ("trainguard_operator_remediation_first_holds",
             "Holds a signal that may act opened (one per job per 30 s at most)", g.holds),
            ("trainguard_operator_remediation_first_waits",
             "Reconciles and resyncs that waited on a hold before they started", g.waits),
            ("trainguard_operator_remediation_first_wait_seconds",
             "Seconds those reconciles and resyncs waited in all", g.waited_s),
            ("trainguard_operator_remediation_first_forced_open",
             "Times the gate, closed for a whole hold, was opened for as long: signals kept coming", g.forced_open),
        ):  # fmt: skip
            family = CounterMetricFamily(name, text)
            family.add_metric([], float(got))
            yield family


def _leaders_monitors(
    monitors: Callable[[], Iterable[Mapping[str, Any]]], leader: Callable[[], bool], what: str
) -> list[Mapping[str, Any]] | None:
    """The monitors in (namespace, name) order on the leader; None on a standby, or when the cache has not
    synced yet (this scrape goes without `what`, the next one has it)."""
    if not leader():
        return None
    try:
        bodies = list(monitors())
    except Exception as exc:
        log.warning("%s not exported this scrape: the monitors could not be read: %s", what, exc)
        return None
    return sorted(bodies, key=lambda b: (b["metadata"]["namespace"], b["metadata"]["name"]))


class GoodputCollector(Collector):
    """Each monitored job's goodput (remediation/goodput.py), read from the monitors at each scrape:
    state-free, the records and status.goodput in the API keep the numbers, so the counters go on
    across operator restarts. Only the leader exports them: a standby's cache may lag, and with every
    replica exporting, a sum over the replicas would count each second twice. When the leader changes,
    the series move to the new leader's target (another `pod` label): `sum by (namespace,
    training_job, cause) (increase(...))` over a window is right across the change, since increase()
    counts from each series' first sample."""

    def __init__(
        self,
        monitors: Callable[[], Iterable[Mapping[str, Any]]],
        leader: Callable[[], bool],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.monitors = monitors
        self.leader = leader
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        bodies = _leaders_monitors(self.monitors, self.leader, "goodput")
        if bodies is None:
            return
        job = ["namespace", "training_job"]
        lost = CounterMetricFamily(*_named("trainguard_job_lost_seconds"), labels=[*job, "cause"])
        productive = CounterMetricFamily(*_named("trainguard_job_productive_seconds"), labels=job)
        ettr = GaugeMetricFamily(*_named("trainguard_job_ettr_ratio"), labels=job)
        unknown = GaugeMetricFamily(*_named("trainguard_job_restarts_redo_unknown"), labels=job)
        now = self.clock()
        for body in bodies:
            key = [str(body["metadata"]["namespace"]), str(body["metadata"]["name"])]
            account = monitor_goodput(body, now)
            for cause in CAUSES:
                lost.add_metric([*key, cause], account.lost[cause])
            productive.add_metric(key, account.productive)
            if account.ettr is not None:
                ettr.add_metric(key, account.ettr)
            unknown.add_metric(key, float(account.redo_unknown))
        yield from (lost, productive, ettr, unknown)


class UnmonitoredPodsCollector(Collector):
    """Each monitor's pods that run without the exporter (status.podsUnmonitored, kept by the pod-count
    pass), read from the monitors at each scrape. The operator's own injection failures count in
    trainguard_operator_injection_failures_total; a pod the apiserver let through without asking the
    webhook (it timed out or was unreachable: failurePolicy Ignore), or admitted before its monitor
    existed, shows only here. The leader alone exports them, as the goodput: one series per job."""

    def __init__(
        self, monitors: Callable[[], Iterable[Mapping[str, Any]]], leader: Callable[[], bool]
    ) -> None:
        self.monitors = monitors
        self.leader = leader

    def collect(self) -> Iterator[Metric]:
        bodies = _leaders_monitors(self.monitors, self.leader, "unmonitored pods")
        if bodies is None:
            return
        family = GaugeMetricFamily(
            "trainguard_operator_pods_unmonitored",
            "Pods a monitor selects that run without the trainguard exporter (status.podsUnmonitored): no "
            "GPU signal or fast path covers them until they are recreated",
            labels=["namespace", "training_job"],
        )
        for body in bodies:
            count = (body.get("status") or {}).get("podsUnmonitored") or 0
            family.add_metric(
                [str(body["metadata"]["namespace"]), str(body["metadata"]["name"])], float(count)
            )
        yield family


def _named(name: str) -> tuple[str, str]:
    """A goodput family's name (a counter's without `_total`, which prometheus_client adds) and its help,
    from the catalogue."""
    metric = GOODPUT_METRICS_BY_NAME.get(f"{name}_total") or GOODPUT_METRICS_BY_NAME[name]
    return name, metric.help


class OperatorMetrics:
    """Every family the operator exports, registered in `registry`."""

    def __init__(
        self,
        registry: CollectorRegistry,
        leader: Callable[[], bool] | None = None,
        caches: Callable[[], Mapping[str, CacheCounts]] | None = None,
        node_faults: Callable[[], Iterable[tuple[str, NodeFaults]]] | None = None,
        monitors: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
    ) -> None:
        """`monitors` (the watch cache's) gives each job's goodput, exported while `leader` says so."""
        self.registry = registry
        if caches is not None:
            registry.register(WatchCacheCollector(caches))
        if node_faults is not None:
            registry.register(NodeFaultsCollector(node_faults))
        if monitors is not None:
            registry.register(GoodputCollector(monitors, leader or (lambda: True)))
            registry.register(UnmonitoredPodsCollector(monitors, leader or (lambda: True)))
        self.reconciles = Counter(
            "trainguard_operator_reconcile",
            "Monitor reconciles by result: success, rejected (the monitor's input is invalid), error, "
            "skipped (its namespace is being deleted), repeated (kopf handed over a creation again, at a "
            "generation already reconciled to Ready: nothing done)",
            ["result"],
            registry=registry,
        )
        self.reconcile_errors = Counter(
            "trainguard_operator_reconcile_errors",
            "Monitor reconciles the operator failed (API refusal, missing CRDs, an exception)",
            registry=registry,
        )
        self.resyncs = Counter(
            "trainguard_operator_resyncs",
            "Monitors the periodic resync passed over, by outcome: in_place (nothing rendered, no request), "
            "rendered (nothing to write), written (a reconcile, counted as one, applied what differed), "
            "left_to_reconcile (new, and its own handler has not begun its first reconcile), reconciling "
            "(a reconcile of it was in flight)",
            ["outcome"],
            registry=registry,
        )
        self.reconcile_duration = Histogram(
            "trainguard_operator_reconcile_duration_seconds",
            "Time to reconcile one monitor, status write included",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=registry,
        )
        self.remediation_steps = Counter(
            "trainguard_operator_remediation_steps",
            "Remediation steps entering a phase (Planned, then InProgress, Succeeded, ...)",
            ["kind", "phase"],
            registry=registry,
        )
        self.signals = Counter(
            "trainguard_operator_signals_received",
            "Posts to the remediation receiver by source (alertmanager, fastpath) and result",
            ["source", "result"],
            registry=registry,
        )
        self.webhook_duration = Histogram(
            "trainguard_operator_webhook_duration_seconds",
            "Time to answer one sidecar-injection admission request (the apiserver waits 5 s at most)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=registry,
        )
        self.injection_failures = Counter(
            "trainguard_operator_injection_failures",
            "Pods a monitor selected that were admitted without the exporter because injection failed",
            registry=registry,
        )
        self.leader = Gauge(
            "trainguard_operator_leader", "1 on the replica that acts, 0 on a standby", registry=registry
        )
        if leader is not None:
            self.leader.set_function(lambda: 1.0 if leader() else 0.0)
        # every result at 0 from the start, so rate() and increase() see the first one
        for result in RECONCILE_RESULTS:
            self.reconciles.labels(result=result)
        for outcome in RESYNC_OUTCOMES:
            self.resyncs.labels(outcome=outcome)
        for source in SIGNAL_SOURCES:
            for signal_result in SIGNAL_RESULTS:
                self.signals.labels(source=source, result=signal_result)

    def reconciled(self, status: Mapping[str, Any] | None, seconds: float, result: str | None = None) -> None:
        """`result` when the status cannot say: "skipped" (the namespace is being deleted), "repeated"."""
        result = result or reconcile_result(status)
        self.reconciles.labels(result=result).inc()
        if result == "error":
            self.reconcile_errors.inc()
        self.reconcile_duration.observe(seconds)

    def resynced(self, outcome: str) -> None:
        self.resyncs.labels(outcome=outcome).inc()

    def step(self, kind: str, phase: str) -> None:
        self.remediation_steps.labels(kind=kind, phase=phase).inc()

    def signal(self, source: str, result: str) -> None:
        self.signals.labels(source=source, result=result).inc()

    def admitted(self, seconds: float) -> None:
        self.webhook_duration.observe(seconds)

    def injection_failed(self) -> None:
        self.injection_failures.inc()


def serve(addr: str, registry: CollectorRegistry) -> WSGIServer | None:
    """Serve /metrics on `addr` on a daemon thread. A port already taken (several replicas on one host)
    costs the metrics, never the operator: logged, and None."""
    where = parse_addr(addr)
    if where is None:
        return None
    host, port = where
    try:
        server, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        log.error("the metrics endpoint cannot listen on %s:%d: %s", host, port, exc)
        return None
    log.info("operator metrics on http://%s:%d/metrics", host, server.server_address[1])
    return server
