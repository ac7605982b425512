"""The circuit breaker's edge, on the leader: observe the GPU nodes of each pool in the node cache,
step the breakers (remediation/guardrails.py, pure), log each transition and page the platform while
one is open (`TrainguardRemediationBreakerOpen`, posted to Alertmanager and refreshed each pass).

The state lives in this object on the leader only. A replica that stops leading forgets it; a new
leader starts with every breaker armed and re-evaluates from the node state on its first pass or
signal, which is safe: a pool still down opens its breaker again at once (only the re-arm time
starts over). The manual reset is the time written in the ConfigMap trainguard-guardrails of the
operator's namespace (`trainguard guardrails reset`), read on each pass.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from trainguard.catalog.severity import GRADE
from trainguard.clients import alertmanager
from trainguard.remediation import notices
from trainguard.remediation.guardrails import Guardrails, PoolBreaker, observe, pool_name, step

log = logging.getLogger("trainguard.remediation")

RESET_CONFIGMAP = "trainguard-guardrails"
"""The ConfigMap, in the operator's namespace, whose data `reset-at` (unix seconds) re-arms every
breaker opened before it (`trainguard guardrails reset`)."""
RESET_KEY = "reset-at"


class PoolReads(Protocol):
    """(node, pool, ready) of every GPU node, from the node cache (remediation/cluster.py)."""

    def pools(self, label: str) -> list[tuple[str, str, bool]]: ...


def reset_time(data: dict[str, str] | None) -> float | None:
    """The reset time a ConfigMap's data holds, or None (absent or unreadable)."""
    try:
        return float((data or {})[RESET_KEY])
    except (KeyError, ValueError):
        return None


class Breaker:
    def __init__(
        self,
        reads: PoolReads,
        guardrails: Guardrails,
        *,
        leader: Callable[[], bool],
        reset: Callable[[], float | None] = lambda: None,
        alertmanager_url: str | None = None,
        clock: Callable[[], float] = time.time,
        post: Callable[..., Any] = alertmanager.post_alerts,
        severity_style: str = GRADE,
    ) -> None:
        self.reads = reads
        self.guardrails = guardrails
        self.leader = leader
        self.reset = reset
        self.alertmanager_url = alertmanager_url
        self.clock = clock
        self.post = post
        self.severity_style = severity_style
        """The platform's severity style (catalog/severity.py) the page is posted in."""
        self.state: dict[str, PoolBreaker] = {}
        self.reset_at: float | None = None
        self._rearmed: list[tuple[str, PoolBreaker]] = []
        """Breakers re-armed since the last pass (by a signal's evaluation too): their pages to resolve."""
        self._lock = threading.Lock()

    def evaluate(self) -> dict[str, str]:
        """Step the breakers on the node cache now; the open ones, pool -> why (for the planner)."""
        with self._lock:
            return self._evaluate()[0]

    def _evaluate(self) -> tuple[dict[str, str], list[tuple[str, PoolBreaker]]]:
        now = self.clock()
        label = self.guardrails.pool_label
        seen = observe((pool, ready) for _, pool, ready in self.reads.pools(label))
        before = self.state
        self.state = step(before, seen, now, self.guardrails.breaker, self.reset_at)
        for pool, b in self.state.items():
            if pool not in before:
                log.error("circuit breaker open for %s: %s; trainguard cordons nothing there until it re-arms",
                          pool_name(pool, self.guardrails), b.reason)  # fmt: skip
        closed = [(pool, b) for pool, b in before.items() if pool not in self.state]
        for pool, _ in closed:
            log.warning("circuit breaker re-armed for %s", pool_name(pool, self.guardrails))
        self._rearmed += closed
        return {pool: b.reason for pool, b in self.state.items()}, closed

    def run(self) -> dict[str, int]:
        """One periodic pass: read the manual reset, step, page while open, resolve what re-armed."""
        if not self.leader():
            with self._lock:
                self.state, self._rearmed = {}, []
            return {"open": 0, "rearmed": 0}
        try:
            self.reset_at = self.reset()
        except Exception as exc:  # the reset is a convenience: a failed read must not stop the breaker
            log.warning("reading the guardrails reset (ConfigMap %s) failed: %s", RESET_CONFIGMAP, exc)
        with self._lock:
            open_, _ = self._evaluate()
            state, closed, self._rearmed = dict(self.state), self._rearmed, []
        if self.alertmanager_url and (state or closed):
            now = self.clock()
            label = self.guardrails.pool_label
            alerts = [
                notices.breaker_open(p, label, b.opened_at, b.reason, now) for p, b in sorted(state.items())
            ]
            alerts += [
                notices.breaker_open(p, label, b.opened_at, b.reason, now, resolved=True) for p, b in closed
            ]
            try:
                self.post(self.alertmanager_url, alerts, severity_style=self.severity_style)
            except Exception as exc:
                log.error("paging the circuit breaker to Alertmanager failed: %s", exc)
        return {"open": len(open_), "rearmed": len(closed)}
