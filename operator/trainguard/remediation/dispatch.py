"""Records out: each record is carried out by an executor on a pool thread, one thread per record at
most. A record handed over again (a new leader's resume, a second pass) while it runs is ignored. The
executor reads every record again from the API before it runs it (the watch cache, or the planner's
copy, may be behind), through a store.Saver of its own, and is given this replica's leadership, the
operator's mode, whether the operator is stopping, and the operator key to check the record's signature
with."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor as Pool
from typing import Any

from trainguard.api import TrainingJobMonitor
from trainguard.clients import alertmanager
from trainguard.remediation import notices, tokens
from trainguard.remediation.executor import Executor
from trainguard.remediation.ops import ClusterOps
from trainguard.remediation.store import Record, RecordStore, summary

log = logging.getLogger("trainguard.remediation")

ENDED_MEMORY_S = 3600.0
"""How long the end of a record's run is remembered (the planner asks about records it planned)."""


class Dispatcher:
    def __init__(
        self,
        store: RecordStore,
        cluster: ClusterOps,
        pool: Pool,
        *,
        key: Callable[[], bytes | None],
        leader: Callable[[], bool],
        mode: Callable[[], str] = lambda: "act",
        alertmanager_url: str | None = None,
        executor_factory: Callable[..., Executor] = Executor,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.pool = pool
        self.key = key
        """The operator key the sidecars' tokens derive from and records are signed with (None until the
        receiver has one)."""
        self.leader = leader
        """Whether this replica leads (each executor asks before every step)."""
        self.mode = mode
        """The operator-wide mode, "act", "dry-run" or "off" (each executor asks before every step)."""
        self.alertmanager_url = alertmanager_url
        self.executor_factory = executor_factory
        self._stopping = threading.Event()
        self._running: set[str] = set()
        self._ended: dict[str, float] = {}
        """Record id -> when (time.monotonic) its executor last returned, for `ended_since`."""
        self._guard = threading.Lock()

    def ended_since(self, record_id: str) -> float | None:
        """Seconds since the record's executor last returned here; None while it runs or if it never ran
        on this replica."""
        with self._guard:
            ended = None if record_id in self._running else self._ended.get(record_id)
        return None if ended is None else time.monotonic() - ended

    def running(self, record_id: str) -> bool:
        with self._guard:
            return record_id in self._running

    def stop(self) -> None:
        """The operator is stopping: running executors stop at their next step or poll, writing nothing
        (the next leader resumes their records), and nothing more is dispatched."""
        self._stopping.set()

    def dispatch(self, record: Record, monitor: TrainingJobMonitor, body: dict[str, Any]) -> bool:
        """Carry `record` out on a pool thread; False when it already runs here or the operator is
        stopping. The executor reads it again from the API and leaves it alone if it finished or someone
        else has it."""
        with self._guard:
            if record["id"] in self._running or self._stopping.is_set():
                return False
            self._running.add(record["id"])
        ns, name = monitor.namespace, monitor.name

        def notify(r: Record, message: str) -> None:
            self.notify({**r, "namespace": ns, "trainingJob": name}, message)

        saver = self.store.saver(ns, name)
        executor = self.executor_factory(self.cluster, saver, self._token, read=saver.read, key=self.key,
                                         leader=self.leader, mode=self.mode, notify=notify,
                                         stopping=self._stopping.is_set)  # fmt: skip

        def work() -> None:
            try:
                done = executor.run(record, monitor)
                if not executor.stopped:
                    self.store.announce(body, f"Remediation{done.get('phase', '')}", summary(done))
            except Exception:
                log.exception("remediation %s stopped; it resumes at the next pass", record["id"])
            finally:
                with self._guard:
                    self._running.discard(record["id"])
                    now = time.monotonic()
                    self._ended = {k: t for k, t in self._ended.items() if now - t < ENDED_MEMORY_S}
                    self._ended[record["id"]] = now

        self.pool.submit(work)
        return True

    def idle(self, timeout: float = 10.0) -> bool:
        """Wait until no record is being carried out (tests, and a graceful stop)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._guard:
                if not self._running:
                    return True
            time.sleep(0.01)
        return False

    def notify(self, record: Record, message: str) -> None:
        """A NOTIFY step: what trainguard did not do and why, as a P0 for the job's receivers."""
        if not self.alertmanager_url:
            log.warning(
                "no --alertmanager-url: the notice of %s is only in the record: %s", record.get("id"), message
            )
            return
        alertmanager.post_alerts(self.alertmanager_url, [notices.withheld(record, message)])

    def _token(self, namespace: str, name: str) -> str:
        key = self.key()
        if key is None:
            raise RuntimeError("no operator key: the sidecars' token cannot be derived")
        return tokens.derive(key, tokens.EVENTS, namespace, name)
