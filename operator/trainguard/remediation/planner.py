"""Plans, one signal at a time: on the leader, one thread takes the queued signals in order, so the
cluster-wide cordon cap is decided on one signal at a time. Each plan is written to the monitor's
status before anything is done, then handed to the dispatcher. Deciding a signal removes it from the
monitor's status.pendingSignals (remediation/pending.py), in the record's own write when there is one;
a signal not decided (a standby now, an error) stays there for the leader's PendingPass. A transient
API error is retried with backoff before the signal is left to that pass."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from trainguard.kube.errors import NotSynced
from trainguard.kube.errors import retryable as api_retryable
from trainguard.remediation import pending, records
from trainguard.remediation.dispatch import Dispatcher
from trainguard.remediation.intake import Intake
from trainguard.remediation.model import ClusterState, Signal, StepKind
from trainguard.remediation.plan import plan, quiet
from trainguard.remediation.store import Record, RecordStore, records_of, summary

log = logging.getLogger("trainguard.remediation")

RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0)
"""Backoff between the tries of a signal whose planning met a transient API error."""

PLANNED_MEMORY_S = 3600.0
"""How long a planned cordon counts without its annotation (a cordon that failed is not retried)."""


class PlanningReads(Protocol):
    """What a plan is decided on besides the monitor (ClusterOps, over the node watch cache)."""

    def gpu_node_count(self) -> int: ...

    def cordon_history(self) -> list[tuple[str, float]]: ...

    def spares(self) -> list[str]: ...


class Planner:
    def __init__(
        self,
        store: RecordStore,
        cluster: PlanningReads,
        dispatcher: Dispatcher,
        *,
        leader: Callable[[], bool],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.dispatcher = dispatcher
        self.leader = leader
        self.clock = clock
        self._planned: dict[str, float] = {}
        """Nodes this planner's plans cordon, with when: the cap counts them before their annotations
        reach the node watch cache (plans of every monitor, in the one planning thread)."""

    def handle(self, signal: Signal) -> Record | None:
        """Plan one signal and, when it acts, write its record and hand it to the dispatcher."""
        if not self.leader():
            log.info("not the leader: %s for %s/%s left to the leader", signal.alertname, signal.namespace,
                     signal.training_job)  # fmt: skip
            return None
        ns, name = signal.namespace, signal.training_job
        with self.store.lock(ns, name):
            found = self.store.read(ns, name)
            if found is None:
                log.warning("%s for %s/%s: no valid TrainingJobMonitor of that name; nothing to do",
                            signal.alertname, ns, name)  # fmt: skip
                return None
            body, monitor = found
            now = self.clock()
            state = ClusterState(
                now=now,
                gpu_nodes=self.cluster.gpu_node_count(),
                cordons=self._cordons(now),
                records=tuple(records_of(body)),
                spares=tuple(self.cluster.spares()),
            )
            decided = plan(signal, monitor, state)
            waiting = pending.pending_of(body)
            if quiet(decided):
                log.info("%s for %s/%s: %s", signal.alertname, ns, name, decided.skipped)
                rest = pending.without(waiting, signal, recorded=False)
                if rest != waiting:
                    self.store.api.patch_status("trainingjobmonitors", ns, name, {"pendingSignals": rest})
                return None
            rest = pending.without(waiting, signal, recorded=True)
            record = self.store.save(
                body,
                records.new_record(decided, self.clock()),
                {"pendingSignals": rest} if rest != waiting else None,
            )  # before anything is done
            for step in decided.steps:
                if step.kind == StepKind.CORDON and not decided.dry_run and step.params.get("node"):
                    self._planned.setdefault(step.params["node"], now)
        self.store.announce(body, "RemediationPlanned", summary(record))
        self.dispatcher.dispatch(record, monitor, body)
        return record

    def _cordons(self, now: float) -> tuple[tuple[str, float], ...]:
        """The cordons the node cache shows, and this planner's own the cache may not show yet."""
        seen = dict(self.cluster.cordon_history())
        self._planned = {
            n: t for n, t in self._planned.items() if now - t < PLANNED_MEMORY_S and n not in seen
        }
        return tuple(sorted({**self._planned, **seen}.items(), key=lambda item: item[1]))

    def run(self, intake: Intake, stop: threading.Event) -> None:
        while not stop.is_set():
            signal = intake.next(timeout=0.5)
            if signal is not None:
                self.try_handle(signal, stop.wait)

    def try_handle(self, signal: Signal, wait: Callable[[float], object] = time.sleep) -> bool:
        """handle(), tried again after each of RETRY_DELAYS_S while it meets a transient API error; True
        once it ran through. A signal it gives up on stays pending in the monitor's status."""
        what = f"{signal.alertname} for {signal.namespace}/{signal.training_job}"
        for delay in (*RETRY_DELAYS_S, None):
            try:
                self.handle(signal)
                return True
            except Exception as exc:
                if delay is None or not retryable(exc):
                    log.exception("planning %s failed; it stays pending for the leader's next pass", what)
                    return False
                log.warning("planning %s met a transient error, retried in %.1fs: %s", what, delay, exc)
                if wait(delay):
                    return False  # stopping
        return False


def retryable(exc: BaseException) -> bool:
    """An error worth trying again soon: the API busy or unavailable, the connection lost, a watch cache
    not synced yet; not the API refusing what was asked."""
    return api_retryable(exc) or isinstance(exc, NotSynced)
