"""The operator's periodic work, on the leader only: a resync of every monitor and of the operator's own
objects (it repairs hand edits of owned objects), the pod count in status and the namespaces' trainguard.io/monitored label
(controller/namespace_labels.py), all read from the watch caches; and `Loop`, the thread each other
feature's pass runs on.

kopf timers would do this per object, but kopf puts a finalizer on every object that has a timer: with
the operator uninstalled first, monitors then hang in Terminating and block namespace deletion. One
loop over a list needs no finalizer.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainguard.api import monitor_of
from trainguard.controller.reconcile import (
    PODS_WITHOUT_EXPORTER,
    ReconcileReads,
    monitored_pods,
    recorded_problem,
    unmonitored_pods,
    without_exporter_message,
    workload_problem,
)

log = logging.getLogger("trainguard.periodic")


class MonitorReads(ReconcileReads, Protocol):
    def monitors(self) -> list[dict[str, Any]]: ...

    def monitor(self, namespace: str, name: str) -> dict[str, Any] | None: ...


class StatusWriter(Protocol):
    def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> None: ...


@dataclass
class Periodic:
    kube: StatusWriter
    reads: MonitorReads
    leader: Callable[[], bool]
    reconcile: Callable[[str, str], None]
    lock: Callable[[str, str], Any]
    resync: Callable[[dict[str, Any]], object] | None = None
    """The resync of one monitor from the body its cache holds (handlers.resync: it writes only what
    differs); without it the resync reconciles each by name."""
    resync_s: float = 120.0
    pods_s: float = 15.0
    on_pass: Callable[[], object] | None = None
    """Also run on the leader at the pod-count cadence (the P0 loop resumes unfinished records)."""
    label_namespaces: Callable[[], object] | None = None
    """Run on the leader at the pod-count cadence: NamespaceLabels.sweep."""
    announce: Callable[[dict[str, Any], str, str], None] | None = None
    """Posts an Event about a monitor (its body, reason, message): pods found without the exporter."""
    operator_objects: Callable[[], object] | None = None
    """Run on the leader at each resync, before the monitors: applies the objects of the operator's own,
    not of a monitor (the shared rule group, controller/run.py's apply_shared_rules), so that one deleted
    or edited by hand is repaired like a monitor's; Kube.apply skips one in place without a request."""
    clock: Callable[[], float] = time.monotonic
    _next_resync: float = 0.0
    _next_pods: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        now = self.clock()
        self._next_resync = now + self.resync_s
        self._next_pods = now + min(5.0, self.pods_s)

    def tick(self) -> None:
        """One pass: whatever is due, if this replica leads."""
        now = self.clock()
        resync, pods = now >= self._next_resync, now >= self._next_pods
        if not (resync or pods) or not self.leader():
            return
        monitors = self.reads.monitors()
        if resync:
            self._next_resync = now + self.resync_s
            if self.operator_objects is not None:
                self._guarded("resync of the operator's objects", "*", "*", self.operator_objects)
            for m in monitors:
                ns, name = _key(m)
                one = (
                    functools.partial(self._resync, ns, name)
                    if self.resync
                    else functools.partial(self.reconcile, ns, name)
                )
                self._guarded("resync", ns, name, one)
        if pods:
            self._next_pods = now + self.pods_s
            if self.on_pass is not None:
                self._guarded("resume", "*", "*", self.on_pass)
            if self.label_namespaces is not None:
                self._guarded("namespace labels", "*", "*", self.label_namespaces)
            for m in monitors:
                ns, name = _key(m)
                self._guarded("pod count", ns, name, functools.partial(self._count_pods, ns, name))

    def _resync(self, ns: str, name: str) -> None:
        """The resync of the monitor as its cache holds it now, not as the pass's list held it: a pass
        over 2,000 monitors takes a minute during a burst, and a monitor whose first reconcile finished
        meanwhile looked from the list as if it had no status (the resync reconciled 634 monitors again
        in one 2,000-monitor apply for that alone)."""
        body = self.reads.monitor(ns, name)
        if body is not None and self.resync is not None:  # None: deleted since the list
            self.resync(body)

    @staticmethod
    def _guarded(what: str, ns: str, name: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception:
            log.exception("%s of %s/%s failed; retried next time", what, ns, name)

    def _count_pods(self, ns: str, name: str) -> None:
        """Keeps status.podsMonitored current between reconciles, and reconciles a monitor whose
        workloadRef started or stopped resolving (an owner created after its monitor, or deleted). Reads
        the monitor as its cache holds it now, as _resync does."""
        body = self.reads.monitor(ns, name)
        if body is None:
            return
        monitor = monitor_of(body)
        if monitor is None or monitor.spec.selector.is_empty():
            return  # the monitor's own reconcile reports it as Degraded
        found, recorded = workload_problem(self.reads, monitor), recorded_problem(body)
        if found is not None and recorded is not None and found != recorded:
            self.reconcile(ns, name)
            return
        status = body.get("status") or {}
        count, bare = monitored_pods(self.reads, monitor), unmonitored_pods(self.reads, monitor)
        if len(bare) > int(status.get("podsUnmonitored") or 0) and self.announce is not None:
            self.announce(body, PODS_WITHOUT_EXPORTER, without_exporter_message(bare))
        counts = {"podsMonitored": count, "podsUnmonitored": len(bare)}
        if {k: status.get(k, 0) for k in counts} != counts:
            with self.lock(ns, name):
                self.kube.patch_status("trainingjobmonitors", ns, name, counts)

    def run(self, interval_s: float = 1.0) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.tick()
            except Exception:
                log.exception("periodic pass failed; retried next time")

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="trainguard-periodic", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()


def _key(monitor: dict[str, Any]) -> tuple[str, str]:
    meta = monitor.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "?")


@dataclass
class Loop:
    """One piece of the leader's periodic work on a thread of its own, so that no other piece delays it:
    a resync pass over hundreds of monitors (a minute at 500) or a report stuck on a slow Prometheus must
    not hold back the P0 loop's detection of a node that went down."""

    name: str
    every_s: float
    work: Callable[[], object]
    leader: Callable[[], bool]
    first_s: float = 5.0
    """The first pass comes sooner: a new leader resumes the records its predecessor left unfinished."""
    _stop: threading.Event = field(default_factory=threading.Event)

    def tick(self) -> None:
        if not self.leader():
            return
        try:
            self.work()
        except Exception:
            log.exception("%s pass failed; retried next time", self.name)

    def run(self) -> None:
        wait = min(self.first_s, self.every_s)
        while not self._stop.wait(wait):
            self.tick()
            wait = self.every_s

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name=f"trainguard-{self.name}", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()
