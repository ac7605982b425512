"""Records out: each record is carried out by an executor on a pool thread, one thread per record at
most. A record handed over again (a new leader's resume, a second pass) while it runs is ignored. The
executor reads every record again from the API before it runs it (the watch cache, or the planner's
copy, may be behind), through a store.Saver of its own, and is given this replica's leadership, the
operator's mode, whether the operator is stopping, the operator key to check and make the record's
signature with, when the record was handed over (a stale one is refused), and this process's memory of
the records it saw finished (one found unfinished again is a replay, refused): see records.py."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor as Pool
from typing import Any

from trainguard.api import TrainingJobMonitor
from trainguard.catalog.severity import GRADE
from trainguard.clients import alertmanager
from trainguard.remediation import notices, records, tokens
from trainguard.remediation.executor import Executor, FaultHistory
from trainguard.remediation.ops import ClusterOps
from trainguard.remediation.store import Record, RecordStore, summary

log = logging.getLogger("trainguard.remediation")

ENDED_MEMORY_S = 3600.0
"""How long the end of a record's run is remembered (the planner asks about records it planned)."""


class FinishedRecords:
    """The records this operator process saw finished, by records.identity, each kept until
    records.horizon: as long as a copy of one of its earlier states could still pass records.stale.
    Thread-safe (the executors and the resume pass share it)."""

    PRUNE_AT = 1024
    """Past this many entries (and past twice what was left at the last pruning), the expired ones are
    dropped: the memory holds about the records finished within a horizon, not every one ever."""

    def __init__(self) -> None:
        self._until: dict[tuple[str, str], float] = {}
        self._prune_at = self.PRUNE_AT
        self._guard = threading.Lock()

    def remember(self, record: Record, now: float) -> None:
        until = records.horizon(record)
        if until <= now:
            return  # every earlier state of it is stale already
        key = records.identity(record)
        with self._guard:
            if len(self._until) >= self._prune_at:
                self._until = {k: t for k, t in self._until.items() if t > now}
                self._prune_at = max(self.PRUNE_AT, 2 * len(self._until))
            self._until[key] = max(until, self._until.get(key, 0.0))

    def knows(self, record: Record, now: float) -> bool:
        with self._guard:
            return self._until.get(records.identity(record), 0.0) > now

    def __len__(self) -> int:
        with self._guard:
            return len(self._until)


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
        history: FaultHistory | None = None,
        clock: Callable[[], float] = time.time,
        severity_style: str = GRADE,
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
        self.severity_style = severity_style
        """The platform's severity style (catalog/severity.py) of the notices posted to Alertmanager."""
        self.executor_factory = executor_factory
        self.history = history
        """Prometheus's record of the jobs' alerts, a GPU fault's second witness (executor.FaultHistory)."""
        self.clock = clock
        """Unix seconds, the records' clock: when a record is handed over."""
        self.finished = FinishedRecords()
        """The records this process saw finished: its executors' and the resume pass's."""
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

    def saw_finished(self, record: Record, monitor: TrainingJobMonitor) -> None:
        """Remember a finished record found in the monitor's status (the resume pass's), if it carries the
        operator's signature: an unsigned one proves nothing, and must not make a real record look
        replayed."""
        now = self.clock()
        key = self.key()
        if key is None or not records.is_finished(record) or records.horizon(record) <= now:
            return
        if self.finished.knows(record, now):
            return
        if records.signed(record, key, monitor.namespace, monitor.name, monitor.metadata.uid or ""):
            self.finished.remember(record, now)

    def stop(self) -> None:
        """The operator is stopping: running executors stop at their next step or poll, writing nothing
        (the next leader resumes their records), and nothing more is dispatched."""
        self._stopping.set()

    def dispatch(self, record: Record, monitor: TrainingJobMonitor, body: dict[str, Any]) -> bool:
        """Carry `record` out on a pool thread; False when it already runs here or the operator is
        stopping. The executor reads it again from the API and leaves it alone if it finished or someone
        else has it."""
        handed = self.clock()
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
                                         finished=self.finished, history=self.history,
                                         stopping=self._stopping.is_set)  # fmt: skip

        def work() -> None:
            try:
                done = executor.run(record, monitor, handed=handed)
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
        alertmanager.post_alerts(
            self.alertmanager_url, [notices.withheld(record, message)], severity_style=self.severity_style
        )

    def _token(self, monitor: TrainingJobMonitor) -> str:
        """The sidecars' token of the monitor the executor read for this step: its uid is the one the
        Secret mounted in the sidecars was derived with (a monitor created again gets new tokens)."""
        key = self.key()
        if key is None:
            raise RuntimeError("no operator key: the sidecars' token cannot be derived")
        return tokens.derive(key, tokens.EVENTS, monitor.namespace, monitor.name, monitor.metadata.uid or "")
