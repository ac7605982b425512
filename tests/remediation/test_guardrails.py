"""The platform's guardrails, pure: a monitor lowers them and never raises them, the ceiling counts the
nodes held cordoned now (not a rate), each pool has its budget, and the circuit breaker opens on a storm,
stays open while it lasts, re-arms after the clear time or a manual reset, and ignores a small pool."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.clock import T0
from tests.conftest import monitor as make_monitor
from tests.remediation.fakes import p0_signal
from trainguard.remediation.guardrails import (
    ALL,
    BREAKER_OPEN,
    CORDON_CAP,
    CORDON_CEILING,
    POOL_BUDGET,
    BreakerConfig,
    Guardrails,
    Limit,
    Observation,
    PoolBreaker,
    ceiling,
    limit,
    observe,
    share,
    step,
)
from trainguard.remediation.model import ClusterState, StepKind
from trainguard.remediation.plan import MODE_OFF, plan, quiet

NODES = [f"n{i}" for i in range(100)]


def state(**changes: Any) -> ClusterState:
    base: dict[str, Any] = {"now": T0, "gpu_nodes": 100, "pools": dict.fromkeys(NODES, ALL),
                            "pool_sizes": {ALL: 100}}  # fmt: skip
    return ClusterState(**{**base, **changes})


def cordons(s: Any) -> list[str]:
    return [st.kind for st in s.steps]


def decide(node: str, st: ClusterState, **remediation: Any) -> Any:
    """The job runs on `node` (the claim is verified), so only the guardrails decide."""
    verified = replace(st, job_nodes=st.job_nodes | {node})
    return plan(
        p0_signal("GPUCriticalXid", node), make_monitor(**{"spec.remediation": remediation}), verified
    )


# ---- parsing ----


@pytest.mark.parametrize(("text", "expected"), [("5", Limit(count=5)), ("0", Limit(count=0)),
                                                 ("25%", Limit(percent=25.0)), (" 100% ", Limit(percent=100.0))])  # fmt: skip
def test_a_limit_is_a_count_or_a_percentage(text: str, expected: Limit) -> None:
    assert limit(text) == expected


@pytest.mark.parametrize("text", ["-1", "0%", "101%", "ten", "1.5", "%"])
def test_a_limit_that_is_neither_is_refused_saying_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match=r"count of nodes .* or a percentage"):
        limit(text)


def test_a_percentage_rounds_down_and_is_at_least_one() -> None:
    assert Limit(percent=10).of(100) == 10
    assert Limit(percent=10).of(19) == 1
    assert Limit(percent=10).of(3) == 1
    assert Limit(count=0).of(100) == 0


def test_a_share_is_a_percentage_or_a_fraction() -> None:
    assert share("30%") == pytest.approx(0.3)
    assert share("0.5") == pytest.approx(0.5)
    assert share("0") == 0.0
    for bad in ("130%", "-1", "x"):
        with pytest.raises(ValueError, match="share of a pool"):
            share(bad)


# ---- the ceiling: lowered, never raised ----


def test_a_monitor_asking_for_more_gets_the_operators_ceiling() -> None:
    guard = Guardrails(max_cordoned=Limit(count=5))
    assert ceiling(guard, 1000, 100) == 5
    assert ceiling(guard, 2, 100) == 2
    assert ceiling(guard, None, 100) == 5
    assert ceiling(Guardrails(), None, 100) is None


def test_max_cordoned_nodes_1000_is_withheld_at_the_operators_ceiling() -> None:
    held = frozenset(NODES[:5])
    st = state(guardrails=Guardrails(max_cordoned=Limit(count=5)), held=held)
    decided = decide("n50", st, maxCordonedNodes=1000)
    assert decided.skipped.startswith(CORDON_CEILING), decided.skipped
    assert "--max-cordoned-nodes 5" in decided.skipped
    assert cordons(decided) == [StepKind.NOTIFY]
    # one fewer held: it acts
    ok = decide("n50", state(guardrails=Guardrails(max_cordoned=Limit(count=5)), held=frozenset(NODES[:4])),
                maxCordonedNodes=1000)  # fmt: skip
    assert StepKind.CORDON in cordons(ok) and not ok.skipped


def test_the_ceiling_counts_nodes_held_now_whenever_they_were_cordoned() -> None:
    """50 of 100 nodes cordoned long before the window: a rate cap lets a plan through, the ceiling does not."""
    old = tuple((n, T0 - 86400.0) for n in NODES[:50])
    held = frozenset(NODES[:50])
    rate_only = state(guardrails=Guardrails(max_cordons=Limit(percent=10)), cordons=old, held=held)
    assert StepKind.CORDON in cordons(decide("n60", rate_only, maxCordonedNodes=1000))
    with_ceiling = state(guardrails=Guardrails(max_cordoned=Limit(percent=10), max_cordons=Limit(percent=10)),
                         cordons=old, held=held)  # fmt: skip
    decided = decide("n60", with_ceiling, maxCordonedNodes=1000)
    assert decided.skipped.startswith(CORDON_CEILING), decided.skipped
    assert "holds 50 node(s)" in decided.skipped


def test_the_operators_rate_caps_recent_cordons_whatever_the_monitor_asks() -> None:
    recent = tuple((n, T0 - 60.0) for n in NODES[:3])
    st = state(guardrails=Guardrails(max_cordons=Limit(count=3), cordon_window_s=600), cordons=recent)
    decided = decide("n50", st, maxCordonedNodes=1000, cordonWindow="1s")
    assert decided.skipped.startswith(CORDON_CAP) and "operator's cap 3" in decided.skipped, decided.skipped
    # outside the operator's window they no longer count
    later = state(guardrails=Guardrails(max_cordons=Limit(count=3), cordon_window_s=30), cordons=recent)
    assert StepKind.CORDON in cordons(decide("n50", later, maxCordonedNodes=1000))


def test_a_node_already_held_is_not_withheld_again() -> None:
    st = state(guardrails=Guardrails(max_cordoned=Limit(count=1)), held=frozenset({"n1"}))
    assert StepKind.CORDON in cordons(decide("n1", st, maxCordonedNodes=1000))


# ---- pool budgets ----


def pooled(held: set[str], budget: str) -> ClusterState:
    pools = {n: ("h100" if i < 10 else "a100") for i, n in enumerate(NODES)}
    return state(guardrails=Guardrails(pool_label="nvidia.com/gpu.product", pool_max_cordoned=limit(budget)),
                 pools=pools, pool_sizes={"h100": 10, "a100": 90}, held=frozenset(held))  # fmt: skip


def test_a_pool_at_its_budget_is_withheld_and_another_pool_is_not() -> None:
    decided = decide("n5", pooled({"n0", "n1"}, "20%"), maxCordonedNodes=1000)
    assert decided.skipped.startswith(POOL_BUDGET), decided.skipped
    assert "2 of the 10 node(s) of nvidia.com/gpu.product=h100" in decided.skipped
    assert StepKind.CORDON in cordons(decide("n50", pooled({"n0", "n1"}, "20%"), maxCordonedNodes=1000))
    assert StepKind.CORDON in cordons(decide("n5", pooled({"n0"}, "20%"), maxCordonedNodes=1000))
    assert decide("n5", pooled({"n0"}, "1"), maxCordonedNodes=1000).skipped.startswith(POOL_BUDGET)


# ---- mode ----


def test_mode_off_plans_nothing_quietly_and_dry_run_makes_every_plan_a_dry_run() -> None:
    off = decide("n1", state(guardrails=Guardrails(mode="off")))
    assert off.skipped.startswith(MODE_OFF) and quiet(off) and not off.steps
    dry = decide("n1", state(guardrails=Guardrails(mode="dry-run")), dryRun=False)
    assert dry.dry_run and StepKind.CORDON in cordons(dry)
    assert not decide("n1", state()).dry_run


# ---- the circuit breaker ----

CFG = BreakerConfig(share=0.3, min_down=3, rearm_s=300)


def test_a_breaker_opens_on_a_storm_and_withholds_cordons_in_its_pool() -> None:
    opened = step({}, {"a": Observation(8, 4), "b": Observation(8, 0)}, T0, CFG)
    assert set(opened) == {"a"} and opened["a"].opened_at == T0
    assert "4 of 8 node(s) look down" in opened["a"].reason
    pools = {"x": "a", "y": "b"}
    st = state(pools=pools, pool_sizes={"a": 8, "b": 8}, open_breakers={p: b.reason for p, b in opened.items()},
               guardrails=Guardrails(pool_label="pool"))  # fmt: skip
    decided = decide("x", st)
    assert decided.skipped.startswith(BREAKER_OPEN) and cordons(decided) == [StepKind.NOTIFY], decided.skipped
    assert StepKind.CORDON in cordons(decide("y", st))


def test_a_breaker_stays_open_while_the_storm_lasts_and_re_arms_after_the_clear_time() -> None:
    s = step({}, {"a": Observation(8, 4)}, T0, CFG)
    s = step(s, {"a": Observation(8, 5)}, T0 + 3600, CFG)
    assert s["a"].opened_at == T0 and s["a"].clear_since is None
    s = step(s, {"a": Observation(8, 1)}, T0 + 3700, CFG)
    assert s["a"].clear_since == T0 + 3700, "clear, not yet re-armed"
    s = step(s, {"a": Observation(8, 1)}, T0 + 3700 + 299, CFG)
    assert "a" in s
    assert step(s, {"a": Observation(8, 1)}, T0 + 3700 + 300, CFG) == {}


def test_a_storm_again_before_the_clear_time_starts_it_over() -> None:
    s = step({}, {"a": Observation(8, 4)}, T0, CFG)
    s = step(s, {"a": Observation(8, 0)}, T0 + 10, CFG)
    s = step(s, {"a": Observation(8, 3)}, T0 + 20, CFG)
    assert s["a"].clear_since is None
    s = step(s, {"a": Observation(8, 0)}, T0 + 30, CFG)
    assert "a" in step(s, {"a": Observation(8, 0)}, T0 + 10 + 300, CFG)


def test_a_manual_reset_re_arms_at_once_but_a_pool_still_down_opens_again() -> None:
    s = step({}, {"a": Observation(8, 4)}, T0, CFG)
    clear = {"a": Observation(8, 0)}
    assert step(s, clear, T0 + 5, CFG, reset_at=T0 + 1) == {}
    assert "a" in step(s, clear, T0 + 5, CFG, reset_at=T0 - 1), "a reset older than the opening is no reset"
    still = step(s, {"a": Observation(8, 4)}, T0 + 5, CFG, reset_at=T0 + 1)
    assert "a" in still


@pytest.mark.parametrize(("size", "down", "opens"), [(3, 1, False), (3, 2, False), (3, 3, True),
                                                     (100, 3, False), (100, 30, True), (8, 2, False)])  # fmt: skip
def test_the_breaker_needs_both_the_share_and_the_minimum_count(size: int, down: int, opens: bool) -> None:
    assert bool(step({}, {"a": Observation(size, down)}, T0, CFG)) is opens


def test_a_threshold_of_zero_never_opens() -> None:
    assert step({}, {"a": Observation(8, 8)}, T0, BreakerConfig(share=0.0)) == {}


def test_a_pool_that_vanished_counts_as_clear() -> None:
    s = {"gone": PoolBreaker(T0, "x")}
    assert step(s, {}, T0 + 1000, CFG) == {"gone": PoolBreaker(T0, "x", T0 + 1000)}


def test_observe_counts_each_pools_nodes_and_those_down() -> None:
    assert observe([("a", True), ("a", False), ("b", False), ("a", False)]) == {
        "a": Observation(3, 2), "b": Observation(1, 1)
    }  # fmt: skip
