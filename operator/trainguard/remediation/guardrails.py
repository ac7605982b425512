"""The guardrails the platform owns (operator flags and chart values), pure: the operator-wide mode,
the ceiling on the nodes trainguard holds cordoned at once, the rate of new cordons per window, the
budget of each node pool, and the circuit breaker that stops acting on node faults while much of a
pool looks down at once.

A monitor's `spec.remediation` may lower these, never raise them: its `maxCordonedNodes` lowers the
ceiling and adds its own rate per `cordonWindow`; a monitor asking for more gets the operator's.

The breaker's transitions are `step(state, observation, now)`: the edge (remediation/breaker.py) holds
the state on the leader, observes the node cache and posts the page.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

ACT = "act"
DRY_RUN = "dry-run"
OFF = "off"
MODES: tuple[str, ...] = (ACT, DRY_RUN, OFF)
"""The operator-wide mode: act; dry-run (every plan is a dry run, whatever the monitor says); off
(nothing is planned)."""

ALL = ""
"""The pool of a node without the pool label (every GPU node, when no pool label is set)."""


@dataclass(frozen=True)
class Limit:
    """A number of nodes: a count, or a percentage of a group of nodes (rounded down, at least 1)."""

    count: int | None = None
    percent: float | None = None

    def of(self, size: int) -> int:
        if self.count is not None:
            return self.count
        return max(1, math.floor(size * (self.percent or 0.0) / 100.0))

    def __str__(self) -> str:
        return str(self.count) if self.count is not None else f"{self.percent:g}%"


def limit(text: str) -> Limit:
    """'5' or '25%'; ValueError says what is wrong."""
    value = text.strip()
    try:
        if value.endswith("%"):
            percent = float(value[:-1])
            if not 0 < percent <= 100 or not math.isfinite(percent):
                raise ValueError
            return Limit(percent=percent)
        count = int(value)
        if count < 0:
            raise ValueError
        return Limit(count=count)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a count of nodes (0 or more) or a percentage (above 0% up to 100%)"
        ) from None


def share(text: str) -> float:
    """A breaker threshold, '30%' or '0.3', as a fraction; 0 turns the breaker off."""
    value = text.strip()
    try:
        fraction = float(value[:-1]) / 100.0 if value.endswith("%") else float(value)
    except ValueError:
        fraction = -1.0
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"{text!r} is not a share of a pool: 0 (off) to 100%, such as 30%")
    return fraction


@dataclass(frozen=True)
class BreakerConfig:
    share: float = 0.3
    """The share of a pool's nodes down at once that opens its breaker; 0: never."""
    min_down: int = 3
    """The fewest nodes down that open it, whatever the share (one node of three is not a storm)."""
    rearm_s: float = 600.0
    """How long the condition must have been clear before the breaker re-arms by itself."""


@dataclass(frozen=True)
class Guardrails:
    """The platform's limits. The defaults limit nothing (a test's or a library caller's state); the
    operator's flags set the defaults it runs with (controller/command.py)."""

    mode: str = ACT
    max_cordoned: Limit | None = None
    """The ceiling: nodes trainguard holds cordoned at once, cluster-wide (a percentage of GPU nodes)."""
    max_cordons: Limit | None = None
    """The rate: new cordons per `cordon_window_s`, cluster-wide."""
    cordon_window_s: float = 600.0
    pool_label: str = ""
    """The node label that groups GPU nodes into pools; empty: one pool of every GPU node."""
    pool_max_cordoned: Limit | None = None
    """Nodes of one pool trainguard holds cordoned at once (a percentage of the pool's nodes)."""
    breaker: BreakerConfig = field(default_factory=BreakerConfig)


# ---- the cordon guards ----

BREAKER_OPEN = "circuit breaker open"
CORDON_CEILING = "cordon ceiling reached"
POOL_BUDGET = "pool budget reached"
CORDON_CAP = "cordon cap reached"


@dataclass(frozen=True)
class CordonView:
    """What the cordon guards decide on: the planner reads it from the node cache once per signal."""

    gpu_nodes: int = 0
    held: frozenset[str] = frozenset()
    """Nodes trainguard holds cordoned now: its annotation on a node still unschedulable, and the
    cordons the planner planned that the cache does not show yet."""
    recent: frozenset[str] = frozenset()
    """Nodes trainguard cordoned within the platform's window (the rate)."""
    pools: Mapping[str, str] = field(default_factory=dict)
    """Node -> its pool (ALL when unlabelled or no pool label is set)."""
    pool_sizes: Mapping[str, int] = field(default_factory=dict)
    open_breakers: Mapping[str, str] = field(default_factory=dict)
    """Pool -> why its breaker is open."""


def ceiling(guard: Guardrails, monitor_max: int | None, gpu_nodes: int) -> int | None:
    """Nodes trainguard may hold cordoned at once: the operator's ceiling, lowered (never raised) by
    the monitor's maxCordonedNodes; None when neither sets one."""
    values = [v for v in (guard.max_cordoned.of(gpu_nodes) if guard.max_cordoned else None, monitor_max)
              if v is not None]  # fmt: skip
    return min(values) if values else None


def pool_name(pool: str, guard: Guardrails) -> str:
    if pool != ALL:
        return f"{guard.pool_label}={pool}"
    return f"nodes without {guard.pool_label}" if guard.pool_label else "all GPU nodes"


def withheld_by_breaker(node: str, guard: Guardrails, view: CordonView) -> str | None:
    """Why cordoning `node` is withheld because its pool's circuit breaker is open, or None."""
    pool = view.pools.get(node, ALL)
    if pool in view.open_breakers:
        return (
            f"{BREAKER_OPEN} for {pool_name(pool, guard)}: {view.open_breakers[pool]}; {node} is not"
            " cordoned and nothing is done"
        )
    return None


def withheld_cordon(node: str, guard: Guardrails, monitor_max: int | None, view: CordonView) -> str | None:
    """Why cordoning `node` is withheld by the platform's guardrails, or None: the pool's breaker, the
    ceiling, the pool's budget, the rate. A node already held counts once (a redo, a second fault)."""
    pool = view.pools.get(node, ALL)
    breaker = withheld_by_breaker(node, guard, view)
    if breaker:
        return breaker
    if node in view.held:
        return None
    top = ceiling(guard, monitor_max, view.gpu_nodes)
    if top is not None and len(view.held) >= top:
        by = "maxCordonedNodes" if guard.max_cordoned is None or top < guard.max_cordoned.of(view.gpu_nodes) else (
            f"the operator's --max-cordoned-nodes {guard.max_cordoned}")  # fmt: skip
        return (
            f"{CORDON_CEILING} (cap): trainguard holds {len(view.held)} node(s) cordoned, the ceiling is {top}"
            f" ({by}); {node} is not cordoned and nothing is done"
        )
    if guard.pool_max_cordoned is not None:
        size = view.pool_sizes.get(pool, 0)
        budget = guard.pool_max_cordoned.of(size)
        held = sum(1 for n in view.held if view.pools.get(n, ALL) == pool)
        if held >= budget:
            return (
                f"{POOL_BUDGET} (cap): trainguard holds {held} of the {size} node(s) of {pool_name(pool, guard)}"
                f" cordoned, its budget is {budget} ({guard.pool_max_cordoned}); {node} is not cordoned and"
                " nothing is done"
            )
    if guard.max_cordons is not None and node not in view.recent:
        rate = guard.max_cordons.of(view.gpu_nodes)
        if len(view.recent) >= rate:
            return (
                f"{CORDON_CAP}: {len(view.recent)} node(s) cordoned by trainguard in the last"
                f" {guard.cordon_window_s:g}s (the operator's cap {rate}); {node} is not cordoned and nothing is done"
            )
    return None


# ---- the circuit breaker ----


@dataclass(frozen=True)
class Observation:
    """One pool's nodes now: how many, and how many look down (Ready not True: False or Unknown)."""

    size: int
    down: int


@dataclass(frozen=True)
class PoolBreaker:
    """One pool's breaker: open since when and why, and since when its condition has been clear."""

    opened_at: float
    reason: str
    clear_since: float | None = None


BreakerState = Mapping[str, PoolBreaker]
"""The open breakers by pool; a pool absent is closed (armed)."""


def observe(nodes: Iterable[tuple[str, bool]]) -> dict[str, Observation]:
    """(pool, ready) of each GPU node -> each pool's observation."""
    sizes: dict[str, int] = {}
    down: dict[str, int] = {}
    for pool, ready in nodes:
        sizes[pool] = sizes.get(pool, 0) + 1
        down[pool] = down.get(pool, 0) + (0 if ready else 1)
    return {p: Observation(sizes[p], down[p]) for p in sorted(sizes)}


def storm(seen: Observation, config: BreakerConfig) -> bool:
    """Much of the pool looks down at once: at least the share and at least the minimum count."""
    return (
        config.share > 0
        and seen.size > 0
        and seen.down >= max(1, config.min_down)
        and seen.down >= config.share * seen.size
    )


def step(
    state: BreakerState,
    observation: Mapping[str, Observation],
    now: float,
    config: BreakerConfig,
    reset_at: float | None = None,
) -> dict[str, PoolBreaker]:
    """The breakers after one observation. A pool in a storm opens (or stays open: a storm keeps it
    open however long it lasts). An open pool whose storm is over re-arms once it has been clear for
    `rearm_s`, or at once on a manual reset made after it opened (`reset_at`); a reset does not hold
    a breaker closed: if the pool is still down, it opens again."""
    out: dict[str, PoolBreaker] = {}
    for pool in sorted(set(state) | set(observation)):
        seen = observation.get(pool, Observation(0, 0))
        current = state.get(pool)
        if storm(seen, config):
            reason = (
                f"{seen.down} of {seen.size} node(s) look down at once"
                f" (at least {config.share:.0%} and {config.min_down} opens it)"
            )
            out[pool] = PoolBreaker(current.opened_at if current else now, reason)
            continue
        if current is None:
            continue
        if reset_at is not None and reset_at >= current.opened_at:
            continue
        clear_since = current.clear_since if current.clear_since is not None else now
        if now - clear_since >= config.rearm_s:
            continue
        out[pool] = PoolBreaker(current.opened_at, current.reason, clear_since)
    return out
