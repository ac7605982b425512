"""Records out: each record is carried out by an executor on a pool thread, one thread per record at
most. A record handed over again (a new leader's resume, a second pass) while it runs is ignored, and
one resumed from the watch cache is read again from the API first: the cache may still show a record
as unfinished that its executor finished a moment ago."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor as Pool
from typing import Any

from trainguard.api import TrainingJobMonitor
from trainguard.clients import alertmanager
from trainguard.remediation import notices, records, tokens
from trainguard.remediation.executor import Executor
from trainguard.remediation.ops import ClusterOps
from trainguard.remediation.store import Record, RecordStore, summary

log = logging.getLogger("trainguard.remediation")


class Dispatcher:
    def __init__(
        self,
        store: RecordStore,
        cluster: ClusterOps,
        pool: Pool,
        *,
        key: Callable[[], bytes | None],
        alertmanager_url: str | None = None,
        executor_factory: Callable[..., Executor] = Executor,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.pool = pool
        self.key = key
        """The operator key the sidecars' tokens derive from (None until the receiver has one)."""
        self.alertmanager_url = alertmanager_url
        self.executor_factory = executor_factory
        self._running: set[str] = set()
        self._guard = threading.Lock()

    def running(self, record_id: str) -> bool:
        with self._guard:
            return record_id in self._running

    def dispatch(
        self, record: Record, monitor: TrainingJobMonitor, body: dict[str, Any], *, reread: bool = False
    ) -> bool:
        """Carry `record` out on a pool thread; False when it already runs. With `reread`, the record is
        read again from the API before it runs, and left alone if it has finished meanwhile."""
        with self._guard:
            if record["id"] in self._running:
                return False
            self._running.add(record["id"])
        ns, name = monitor.namespace, monitor.name

        def notify(r: Record, message: str) -> None:
            self.notify({**r, "namespace": ns, "trainingJob": name}, message)

        executor = self.executor_factory(self.cluster, self.store.saver(ns, name), self._token, notify=notify)

        def work() -> None:
            try:
                current: Record | None = self.store.current(ns, name, record["id"]) if reread else record
                if current is None or (reread and records.is_finished(current)):
                    return  # finished meanwhile (a fresh record runs even finished: a dry run's details)
                done = executor.run(current, monitor)
                self.store.announce(body, f"Remediation{done.get('phase', '')}", summary(done))
            except Exception:
                log.exception("remediation %s stopped; it resumes at the next pass", record["id"])
            finally:
                with self._guard:
                    self._running.discard(record["id"])

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
