"""The P0 loop put together: intake (the receiver's and the detection's signals), one planning thread,
the dispatcher's executor threads, and the periodic passes. Each part lives in its own module and is
tested alone; this is only their wiring, which the operator starts and stops as one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from trainguard.catalog.severity import GRADE
from trainguard.remediation.breaker import Breaker
from trainguard.remediation.detect import NodeDownSettings
from trainguard.remediation.dispatch import Dispatcher
from trainguard.remediation.executor import Executor, FaultHistory
from trainguard.remediation.guardrails import ACT, Guardrails
from trainguard.remediation.intake import Intake, MonitorCache, Pager
from trainguard.remediation.model import Signal
from trainguard.remediation.ops import ClusterOps
from trainguard.remediation.passes import (
    CordonNoticePass,
    EscalationPass,
    FleetReads,
    PendingPass,
    PolicyReads,
    ResumePass,
    WatchPass,
)
from trainguard.remediation.planner import Planner
from trainguard.remediation.store import MonitorAPI, Record, RecordStore
from trainguard.remediation.urgency import Urgency

PAGING_WORKERS = 2


class LoopReads(FleetReads, PolicyReads, MonitorCache, Protocol):
    """Everything the intake and the passes read (kube.ClusterCache)."""


class RemediationLoop:
    def __init__(
        self,
        api: MonitorAPI,
        reads: LoopReads,
        cluster: ClusterOps,
        *,
        key: Callable[[], bytes | None],
        leader: Callable[[], bool],
        lock: Callable[[str, str], Any],
        clock: Callable[[], float] = time.time,
        workers: int = 4,
        executor_factory: Callable[..., Executor] = Executor,
        alertmanager_url: str | None = None,
        on_step: Callable[[str, str], None] = lambda kind, phase: None,
        guardrails: Guardrails | None = None,
        mode: Callable[[], str] = lambda: ACT,
        reset: Callable[[], float | None] = lambda: None,
        node_down: NodeDownSettings | None = None,
        history: FaultHistory | None = None,
        severity_style: str = GRADE,
        urgency: Urgency | None = None,
    ) -> None:
        """`guardrails` are the platform's limits (operator flags); `mode` the operator-wide mode now
        (act, dry-run, off); `reset` reads the time of the last manual reset of the circuit breaker; `history`
        is Prometheus's record of the jobs' alerts, the second witness of a GPU fault; `severity_style`
        the platform's style of the severity label of every alert posted to Alertmanager
        (catalog/severity.py, --severity-style); `urgency` the reconciles' gate the fast path holds from a
        signal's arrival to its cordon (remediation/urgency.py)."""
        style = severity_style
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="trainguard-remediation")
        # pages on their own threads: executors block up to emergencyCheckpointTimeout, and a new P0's
        # page must not wait behind running remediations
        self.paging = ThreadPoolExecutor(max_workers=PAGING_WORKERS, thread_name_prefix="trainguard-paging")
        self.store = RecordStore(api, lock, on_step, key=key, clock=clock, urgency=urgency)
        pager = Pager(alertmanager_url, clock, severity_style=style) if alertmanager_url else None
        self.intake = Intake(
            self.paging, pager, store=self.store, monitors=reads, clock=clock, urgency=urgency
        )
        self.dispatcher = Dispatcher(self.store, cluster, self.pool, key=key, leader=leader, mode=mode,
                                     alertmanager_url=alertmanager_url, executor_factory=executor_factory,
                                     clock=clock, history=history, severity_style=style)  # fmt: skip
        guard = guardrails or Guardrails()
        self.breaker = Breaker(cluster, guard, leader=leader, reset=reset, alertmanager_url=alertmanager_url,
                               clock=clock, severity_style=style)  # fmt: skip
        self.planner = Planner(self.store, cluster, self.dispatcher, leader=leader, clock=clock, guardrails=guard,
                               mode=mode, breaker=self.breaker.evaluate, policy=reads.policy, urgency=urgency)  # fmt: skip
        self.resume = ResumePass(reads, self.dispatcher, leader)
        self.pending = PendingPass(reads, self.intake, leader, clock)
        self.watch = WatchPass(reads, self.intake, leader, alertmanager_url, clock,
                               settings=node_down or NodeDownSettings(), severity_style=style)  # fmt: skip
        self.escalate = EscalationPass(reads, leader, alertmanager_url, clock, severity_style=style)
        self.cordon_notices = CordonNoticePass(
            reads, cluster, leader, alertmanager_url, clock, severity_style=style
        )
        self._stop = threading.Event()

    def receive(self, signals: list[Signal]) -> None:
        """The receiver's callback: returns once the signals that could be acted on are in their monitors'
        status (raises pending.NotRecorded, a 503, when they could not be written)."""
        self.intake.receive(signals)

    def submit(self, signals: list[Signal]) -> None:
        """Queue signals without recording them (the detection pass finds its faults again each pass)."""
        self.intake.submit(signals)

    def handle(self, signal: Signal) -> Record | None:
        return self.planner.handle(signal)

    def passes(self) -> None:
        """One periodic round, in order: resume unfinished records first, plan the pending signals no
        planner decided, then step the circuit breaker, escalate, announce (detection runs on its own,
        faster loop: `detect`)."""
        self.resume.run()
        self.pending.run()
        self.breaker.run()
        self.escalate.run()
        self.cordon_notices.run()

    def detect(self) -> None:
        """The detection pass, on a loop of its own at a shorter period: it reads only the caches, and
        node down is timed by how often it looks (docs/p0-response.md#node-down)."""
        self.watch.run()

    def idle(self, timeout: float = 10.0) -> bool:
        return self.dispatcher.idle(timeout)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.planner.run, args=(self.intake, self._stop),
                                  name="trainguard-planner", daemon=True)  # fmt: skip
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()
        self.dispatcher.stop()  # the executors stop within a poll: the process can exit in its grace period
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.paging.shutdown(wait=False, cancel_futures=True)
