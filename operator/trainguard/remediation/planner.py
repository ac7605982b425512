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
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from trainguard.api import PolicyProblem, TrainingJobMonitor, policies_for
from trainguard.api.common import LabelSelector
from trainguard.api.monitor import WorkloadRef
from trainguard.catalog import ALERTS_BY_NAME
from trainguard.catalog.severity import grade_labels
from trainguard.kube.errors import NotSynced
from trainguard.kube.errors import retryable as api_retryable
from trainguard.kube.workloads import Workload
from trainguard.remediation import pending, records
from trainguard.remediation.dispatch import Dispatcher
from trainguard.remediation.guardrails import ACT, OFF, Guardrails
from trainguard.remediation.intake import Intake
from trainguard.remediation.model import ClusterState, Signal, Source, StepKind
from trainguard.remediation.plan import DISABLED, UNVERIFIED, plan, quiet, triage
from trainguard.remediation.store import Record, RecordStore, records_of, summary
from trainguard.remediation.urgency import Urgency, cordon_pending
from trainguard.render.policy import effective_policy

log = logging.getLogger("trainguard.remediation")

PLAN_ATTEMPTS = 3
"""Plans of one signal tried when the monitor keeps changing under the record's conditional write."""
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0)
"""Backoff between the tries of a signal whose planning met a transient API error."""

PLANNED_MEMORY_S = 3600.0
"""The longest a planned cordon counts without its annotation, however long its record waits."""
PLANNED_GRACE_S = 2.0
"""How long a planned cordon counts without its annotation after its record's run ended: the node watch
cache is that much behind at most. A record that ended without cordoning (its fault unconfirmed, a failed
step) or a node uncordoned since stop counting, as the annotations do."""


class PlanningReads(Protocol):
    """What a plan is decided on besides the monitor (ClusterOps, over the pod and node watch caches)."""

    def gpu_node_count(self) -> int: ...

    def cordon_history(self) -> list[tuple[str, float]]: ...

    def spares(self) -> list[str]: ...

    def job_nodes(self, namespace: str, selector: LabelSelector) -> set[str]: ...

    def unready_nodes(self) -> set[str]: ...
    def held_cordons(self) -> list[str]: ...

    def workload(self, namespace: str, ref: WorkloadRef, selector: LabelSelector) -> Workload: ...

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
        policy: Callable[[str, str], dict[str, Any] | None] = lambda namespace, name: None,
        guardrails: Guardrails | None = None,
        mode: Callable[[], str] = lambda: ACT,
        breaker: Callable[[], Mapping[str, str]] = dict,
        urgency: Urgency | None = None,
    ) -> None:
        self.store = store
        self.urgency = urgency
        """Ended for a signal's job once it is planned, unless its record has a cordon still to make (the
        record store ends it then): remediation/urgency.py."""
        self.policy = policy
        """An AlertPolicy by namespace and name (the watch cache): the fast path's and the operator's own
        signals carry the catalogue's severity, which the monitor's policies may lower or disable."""
        self.cluster = cluster
        self.dispatcher = dispatcher
        self.leader = leader
        self.clock = clock
        self.guardrails = guardrails or Guardrails()
        self.mode = mode
        """The operator-wide mode now: act, dry-run or off (--remediation-mode)."""
        self.breaker = breaker
        """The open circuit breakers, pool -> why, stepped on the node cache now (remediation/breaker.py)."""
        self._planned: dict[str, tuple[float, str]] = {}
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
        with self.store.lock(ns, name):
            found = self.store.read(ns, name)
            if found is None:
                log.warning("%s for %s/%s: no valid TrainingJobMonitor of that name; nothing to do",
                            signal.alertname, ns, name)  # fmt: skip
                return None
            body, monitor = found
            if mode == OFF:
                log.info("%s for %s/%s: remediation is off operator-wide (--remediation-mode off); nothing planned",
                         signal.alertname, ns, name)  # fmt: skip
                self._forget(body, signal)
                return None
            signal, disabled = self._as_policy_says(signal, monitor)
            dropped = disabled or triage(signal, monitor)
            if dropped:  # decided before any cluster state is read
                log.info("%s for %s/%s: %s", signal.alertname, ns, name, dropped)
                self._forget(body, signal)
                return None
            now = self.clock()
            cordons = self._cordons(now)
            pools = {node: pool for node, pool, _ in self.cluster.pools(self.guardrails.pool_label)}
            state = ClusterState(
                now=now,
                gpu_nodes=self.cluster.gpu_node_count(),
                cordons=cordons,
                records=tuple(records_of(body)),
                spares=tuple(self.cluster.spares()),
                job_nodes=frozenset(self.cluster.job_nodes(ns, monitor.spec.selector)),
                unready_nodes=frozenset(self.cluster.unready_nodes()),
                guardrails=replace(self.guardrails, mode=mode),
                held=frozenset(self.cluster.held_cordons()) | frozenset(self._planned),
                pools=pools,
                pool_sizes=dict(Counter(pools.values())),
                open_breakers=dict(self.breaker()),
                workload=self._workload(monitor),
            )
            decided = plan(signal, monitor, state)
            if quiet(decided):
                if decided.skipped.startswith(UNVERIFIED):
                    log.warning("%s for %s/%s from %s refused: %s", signal.alertname, ns, name,
                                signal.source, decided.skipped)  # fmt: skip
                else:
                    log.info("%s for %s/%s: %s", signal.alertname, ns, name, decided.skipped)
                self._forget(body, signal)
                return None
            record = self.store.create(
                body,
                records.new_record(decided, self.clock()),
                also=lambda fresh: _without_decided(fresh, signal),
            )  # before anything is done
            for step in decided.steps:
                if step.kind == StepKind.CORDON and not decided.dry_run and step.params.get("node"):
                    self._planned.setdefault(step.params["node"], (now, str(record["id"])))
        self.store.announce(body, "RemediationPlanned", summary(record))
        self.dispatcher.dispatch(record, monitor, body)
        return record

    def _workload(self, monitor: TrainingJobMonitor) -> Workload | None:
        """The monitor's workload owner as the caches show it now; None without a workloadRef."""
        ref = monitor.spec.workload_ref
        if ref is None:
            return None
        return self.cluster.workload(monitor.namespace, ref, monitor.spec.selector)

    def _as_policy_says(self, signal: Signal, monitor: TrainingJobMonitor) -> tuple[Signal, str]:
        """The signal at the severity the monitor's policies give its alert, or why it is dropped (the
        policy disabled it). Alertmanager's alerts already carry the rendered severity (and escalation's
        copies a raised one); the sidecars and the operator's own detection post the catalogue's."""
        if signal.source == Source.ALERTMANAGER or signal.alertname not in ALERTS_BY_NAME:
            return signal, ""
        try:
            policies = policies_for(monitor, self.policy)
        except PolicyProblem as problem:
            log.warning("%s for %s/%s: the catalogue's settings apply, the policies cannot be read: %s",
                        signal.alertname, monitor.namespace, monitor.name, problem)  # fmt: skip
            return signal, ""
        found = [a for a in effective_policy(monitor, policies).alerts if a.name == signal.alertname]
        if not found:
            return signal, ""
        alert = found[0]
        if not alert.enabled:
            return signal, f"{DISABLED} for {signal.alertname} by the monitor's AlertPolicy"
        if alert.severity != signal.severity:
            labels = {**signal.labels, **grade_labels(alert.severity)}
            return replace(signal, severity=alert.severity, labels=labels), ""
        return signal, ""

    def _cordons(self, now: float) -> tuple[tuple[str, float], ...]:
        """The cordons the node cache shows, and this planner's own the cache may not show yet."""
        seen = dict(self.cluster.cordon_history())
        self._planned = {
            n: (t, rid)
            for n, (t, rid) in self._planned.items()
            if n not in seen and now - t < PLANNED_MEMORY_S and _counts(self.dispatcher.ended_since(rid))
        }
        planned = {n: t for n, (t, _) in self._planned.items()}
        return tuple(sorted({**planned, **seen}.items(), key=lambda item: item[1]))

    def run(self, intake: Intake, stop: threading.Event) -> None:
        while not stop.is_set():
            signal = intake.next(timeout=0.5)
            if signal is not None:
                self.try_handle(signal, stop.wait)

    def try_handle(self, signal: Signal, wait: Callable[[float], object] = time.sleep) -> bool:
        """handle(), tried again after each of RETRY_DELAYS_S while it meets a transient API error; True
        once it ran through. A signal it gives up on stays pending in the monitor's status."""
        what = f"{signal.alertname} for {signal.namespace}/{signal.training_job}"
        record: Record | None = None
        try:
            for delay in (*RETRY_DELAYS_S, None):
                try:
                    record = self._attempt(signal)
                    return True
                except Exception as exc:
                    if delay is None or not retryable(exc):
                        log.exception("planning %s failed; it stays pending for the leader's next pass", what)
                        return False
                    log.warning("planning %s met a transient error, retried in %.1fs: %s", what, delay, exc)
                    if wait(delay):
                        return False  # stopping
            return False
        finally:
            if self.urgency is not None and not cordon_pending(record):
                self.urgency.end((signal.namespace, signal.training_job))

    def _attempt(self, signal: Signal) -> Record | None:
        for _ in range(PLAN_ATTEMPTS):
            try:
                return self.handle(signal)
            except records.Superseded as exc:  # the monitor changed under the plan's write
                log.info("planning %s again: %s", signal.alertname, exc)
        return None

    def _forget(self, body: dict[str, Any], signal: Signal) -> None:
        """Drop a signal decided without a record from the monitor's pendingSignals."""
        waiting = pending.pending_of(body)
        rest = pending.without(waiting, signal, recorded=False)
        if rest != waiting:
            meta = body["metadata"]
            self.store.api.patch_status("trainingjobmonitors", meta["namespace"], meta["name"],
                                        {"pendingSignals": rest})  # fmt: skip


def _counts(ended_since: float | None) -> bool:
    """Whether a planned cordon still counts: its record runs (or waits to), or ended a moment ago."""
    return ended_since is None or ended_since < PLANNED_GRACE_S


def _without_decided(body: dict[str, Any], signal: Signal) -> dict[str, Any]:
    """The status fields the record's own write also carries: pendingSignals less every entry of the
    fault the record handles (none when nothing changes)."""
    waiting = pending.pending_of(body)
    rest = pending.without(waiting, signal, recorded=True)
    return {"pendingSignals": rest} if rest != waiting else {}


def retryable(exc: BaseException) -> bool:
    """An error worth trying again soon: the API busy or unavailable, the connection lost, a watch cache
    not synced yet; not the API refusing what was asked."""
    return api_retryable(exc) or isinstance(exc, NotSynced)
