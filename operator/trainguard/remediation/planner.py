"""Plans, one signal at a time: on the leader, one thread takes the queued signals in order, so the
cluster-wide cordon cap is decided on one signal at a time. Each plan is written to the monitor's
status before anything is done, then handed to the dispatcher."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Protocol

from trainguard.remediation import records
from trainguard.remediation.dispatch import Dispatcher
from trainguard.remediation.guardrails import ACT, OFF, Guardrails
from trainguard.remediation.intake import Intake
from trainguard.remediation.model import ClusterState, Signal, StepKind
from trainguard.remediation.plan import plan, quiet
from trainguard.remediation.store import Record, RecordStore, records_of, summary

log = logging.getLogger("trainguard.remediation")

PLANNED_MEMORY_S = 3600.0
"""How long a planned cordon counts without its annotation (a cordon that failed is not retried)."""


class PlanningReads(Protocol):
    """What a plan is decided on besides the monitor (ClusterOps, over the node watch cache)."""

    def gpu_node_count(self) -> int: ...

    def cordon_history(self) -> list[tuple[str, float]]: ...

    def spares(self) -> list[str]: ...

    def held_cordons(self) -> list[str]: ...

    def pools(self, label: str) -> list[tuple[str, str, bool]]: ...


class Planner:
    def __init__(
        self,
        store: RecordStore,
        cluster: PlanningReads,
        dispatcher: Dispatcher,
        *,
        leader: Callable[[], bool],
        clock: Callable[[], float] = time.time,
        guardrails: Guardrails | None = None,
        mode: Callable[[], str] = lambda: ACT,
        breaker: Callable[[], Mapping[str, str]] = dict,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.dispatcher = dispatcher
        self.leader = leader
        self.clock = clock
        self.guardrails = guardrails or Guardrails()
        self.mode = mode
        """The operator-wide mode now: act, dry-run or off (--remediation-mode)."""
        self.breaker = breaker
        """The open circuit breakers, pool -> why, stepped on the node cache now (remediation/breaker.py)."""
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
        mode = self.mode()
        if mode == OFF:
            log.info("%s for %s/%s: remediation is off operator-wide (--remediation-mode off); nothing planned",
                     signal.alertname, ns, name)  # fmt: skip
            return None
        with self.store.lock(ns, name):
            found = self.store.read(ns, name)
            if found is None:
                log.warning("%s for %s/%s: no valid TrainingJobMonitor of that name; nothing to do",
                            signal.alertname, ns, name)  # fmt: skip
                return None
            body, monitor = found
            now = self.clock()
            cordons = self._cordons(now)
            pools = {node: pool for node, pool, _ in self.cluster.pools(self.guardrails.pool_label)}
            state = ClusterState(
                now=now,
                gpu_nodes=self.cluster.gpu_node_count(),
                cordons=cordons,
                records=tuple(records_of(body)),
                spares=tuple(self.cluster.spares()),
                guardrails=replace(self.guardrails, mode=mode),
                held=frozenset(self.cluster.held_cordons()) | frozenset(self._planned),
                pools=pools,
                pool_sizes=dict(Counter(pools.values())),
                open_breakers=dict(self.breaker()),
            )
            decided = plan(signal, monitor, state)
            if quiet(decided):
                log.info("%s for %s/%s: %s", signal.alertname, ns, name, decided.skipped)
                return None
            record = self.store.save(
                body, records.new_record(decided, self.clock())
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
            if signal is None:
                continue
            try:
                self.handle(signal)
            except Exception:
                log.exception(
                    "planning %s for %s/%s failed", signal.alertname, signal.namespace, signal.training_job
                )
