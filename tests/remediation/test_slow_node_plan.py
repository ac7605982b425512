"""slowNode as a pure decision: the four slow-not-dead signals (three GPU degradations and StragglerRank,
P1s) are confirmed first, then ReplaceAtCheckpoint waits for the job's next periodic checkpoint before it
cordons, taints and moves the node's rank(s) off it through the owner, ReplaceNow takes an emergency
checkpoint instead, and Notify does nothing. The cordon guards, the restart budget, duplicates of the same
node and the escalated P0 copy each change what is done."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.conftest import monitor as make_monitor
from tests.remediation.test_owner_plan import a_jobset, on, owned_by
from tests.remediation.test_plan import (
    CKPT,
    CONFIRM,
    CONFIRM_FAULT,
    CORDON,
    NODE,
    NOTIFY,
    RESTART,
    T0,
    TAINT,
    finished,
    kinds,
    monitor,
    signal,
    state,
)
from trainguard.remediation import plan as planning
from trainguard.remediation.escalation import ESCALATED_FROM
from trainguard.remediation.guardrails import CORDON_CAP, Guardrails, Limit
from trainguard.remediation.model import Phase, Signal, StepKind
from trainguard.remediation.plan import (
    SLOW_GPU_ALERTS,
    SLOW_NODE,
    STRAGGLER_ALERT,
    plan,
    quiet,
    response_class,
)
from trainguard.remediation.records import mark, new_record

AWAIT = StepKind.AWAIT_CHECKPOINT
REPLACE, REJOIN = StepKind.REPLACE_POD, StepKind.RESTART_IN_PLACE
AT_CHECKPOINT = (CONFIRM_FAULT, AWAIT, CORDON, TAINT, RESTART, CONFIRM)
"""ReplaceAtCheckpoint on a Job: confirmed, the next checkpoint waited for, then isolated and moved."""
NOW = (CONFIRM_FAULT, CORDON, TAINT, CKPT, RESTART, CONFIRM)
"""ReplaceNow: isolated at once, an emergency checkpoint from every rank, then moved."""


def slow(alert: str = "GPUClocksThrottled", **kw: Any) -> Signal:
    if alert == STRAGGLER_ALERT:
        kw = {"gpu": "", "pod": "llama-1", "rank": "1", **kw}
    return signal(alert, **{"severity": "P1", **kw})


def actions(gpu: str = "ReplaceAtCheckpoint", straggler: str = "Notify", **rem: Any) -> Any:
    return monitor(actions={"slowNode": {"gpu": gpu, "straggler": straggler}}, **rem)


# ---- the class and the defaults ----------------------------------------------------------------------


@pytest.mark.parametrize("alert", planning.SLOW_NODE_ALERTS)
def test_the_four_signals_are_the_slow_node_class(alert: str) -> None:
    assert response_class(alert) == SLOW_NODE


@pytest.mark.parametrize("alert", SLOW_GPU_ALERTS)
def test_by_default_a_slow_gpu_is_replaced_at_the_next_checkpoint(alert: str) -> None:
    p = plan(slow(alert), make_monitor(), state())
    assert kinds(p) == AT_CHECKPOINT
    assert (p.p0_class, p.node, p.gpu, p.skipped) == (SLOW_NODE, NODE, "0", "")
    confirm, wait, cordon, taint, restart, placed = (s.params for s in p.steps)
    assert confirm == {"node": NODE, "alert": alert, "gpu": "0"}, (
        "the node's sidecar confirms the GPU's claim"
    )
    assert wait == {"timeout_s": "7200"}, "slowNodeCheckpointWait, 2h by default"
    assert cordon == taint == {"node": NODE, "reason": alert}
    assert restart == {"from": "newest-good-checkpoint", "avoid": NODE}
    assert placed == {"avoid": NODE}


def test_by_default_a_straggler_only_notifies_and_needs_no_record() -> None:
    p = plan(slow(STRAGGLER_ALERT), make_monitor(), state())
    assert p.steps == () and p.skipped.startswith(planning.NOTIFY_ONLY) and quiet(p)


def test_a_straggler_set_to_replace_is_confirmed_by_pod_and_rank() -> None:
    p = plan(slow(STRAGGLER_ALERT), actions(straggler="ReplaceAtCheckpoint"), state())
    assert kinds(p) == AT_CHECKPOINT
    assert p.steps[0].params == {"node": NODE, "alert": STRAGGLER_ALERT, "pod": "llama-1", "rank": "1"}


def test_the_wait_is_the_monitors_slow_node_checkpoint_wait() -> None:
    p = plan(slow(), actions(slowNodeCheckpointWait="45m"), state())
    assert p.steps[1].params == {"timeout_s": "2700"}


def test_replace_now_isolates_and_takes_an_emergency_checkpoint_from_every_rank() -> None:
    p = plan(
        slow(STRAGGLER_ALERT), actions(straggler="ReplaceNow", emergencyCheckpointTimeout="90s"), state()
    )
    assert kinds(p) == NOW
    # avoid is empty: the slow node's ranks are alive and hold their shards
    assert p.steps[3].params == {"kind": "full", "timeout_s": "90", "avoid": ""}


@pytest.mark.parametrize("owner", ["JobSet", "PyTorchJob"])
def test_an_owner_that_replaces_one_pod_moves_only_the_slow_nodes_pod(owner: str) -> None:
    p = plan(slow(), on(owner), owned_by(a_jobset()) if owner == "JobSet" else state())
    assert kinds(p) == (CONFIRM_FAULT, AWAIT, CORDON, TAINT, REPLACE, REJOIN, CONFIRM)
    replace_params = p.steps[4].params
    assert replace_params["node"] == NODE and "nodeDown" not in replace_params, "a live node: evicted"


@pytest.mark.parametrize("dry_run", [True, False])
def test_dry_run_plans_the_same_steps(dry_run: bool) -> None:
    p = plan(slow(), actions(dryRun=dry_run), state())
    assert kinds(p) == AT_CHECKPOINT and p.dry_run is dry_run
    if dry_run:
        assert {s["phase"] for s in new_record(p, T0 + 5)["steps"]} == {Phase.DRY_RUN}


def test_a_policy_that_raised_it_to_p0_still_acts() -> None:
    assert kinds(plan(slow(severity="P0"), make_monitor(), state())) == AT_CHECKPOINT


# ---- must not act ------------------------------------------------------------------------------------


@pytest.mark.parametrize("severity", ["P2", "P3"])
def test_a_policy_that_lowered_it_asks_for_no_move(severity: str) -> None:
    p = plan(slow(severity=severity), make_monitor(), state())
    assert p.steps == () and p.skipped.startswith(planning.NO_RESPONSE) and quiet(p)


def test_notify_does_nothing() -> None:
    p = plan(slow(), actions(gpu="Notify"), state())
    assert p.steps == () and p.skipped.startswith(planning.NOTIFY_ONLY)


def test_the_escalated_p0_copy_does_not_act_again() -> None:
    s = slow(severity="P0")
    copy = replace(s, labels={**s.labels, ESCALATED_FROM: "P1"})
    p = plan(copy, make_monitor(), state())
    assert p.steps == () and p.skipped.startswith(planning.ESCALATED)


def test_a_node_the_job_does_not_run_on_is_not_believed() -> None:
    p = plan(slow(node="gpu-z"), make_monitor(), state())
    assert p.steps == () and p.skipped.startswith(planning.UNVERIFIED)


def test_no_node_label_only_notifies() -> None:
    p = plan(slow(node=""), make_monitor(), state())
    assert kinds(p) == (NOTIFY,) and p.skipped.startswith(planning.NO_NODE)


def test_the_restart_budget_spent_moves_nothing() -> None:
    p = plan(slow(), actions(jobRestartBudget=0), state())
    assert kinds(p) == (NOTIFY,) and p.skipped.startswith(planning.RESTART_BUDGET)


def test_the_cordon_cap_moves_nothing() -> None:
    cordons = tuple((f"other-{i}", T0) for i in range(4))  # 40 GPU nodes: cap 4, all used
    p = plan(slow(), make_monitor(), state(cordons=cordons))
    assert kinds(p) == (NOTIFY,) and p.skipped.startswith(CORDON_CAP)


def test_the_platforms_ceiling_moves_nothing() -> None:
    st = replace(state(), guardrails=Guardrails(max_cordoned=Limit(count=1)), held=frozenset({"other"}))
    p = plan(slow(), make_monitor(), st)
    assert kinds(p) == (NOTIFY,) and "ceiling" in p.skipped


# ---- one slow node acts once -------------------------------------------------------------------------


def test_a_second_signal_of_the_same_node_is_a_duplicate_while_the_first_waits() -> None:
    first = new_record(plan(slow("GPUClocksThrottled"), make_monitor(), state()), T0 + 5)
    first = mark(first, 0, Phase.SUCCEEDED, "confirmed", T0 + 6)
    first = mark(first, 1, Phase.IN_PROGRESS, "waiting", T0 + 6)
    for other in (slow("GPUClockBelowPeers", gpu="3"), slow("GPUPCIeLinkDegraded")):
        p = plan(other, make_monitor(), state(records=[first]))
        assert p.skipped == f"{planning.DUPLICATE}{first['id']}"


def test_a_straggler_on_a_node_already_moved_off_is_a_duplicate() -> None:
    done = finished(new_record(plan(slow(), make_monitor(), state()), T0 + 5), T0 + 60)
    p = plan(slow(STRAGGLER_ALERT), actions(straggler="ReplaceNow"), state(now=T0 + 70, records=[done]))
    assert p.skipped == f"{planning.DUPLICATE}{done['id']}"


def test_a_node_fault_on_a_node_whose_slow_record_waits_still_acts_at_once() -> None:
    waiting = new_record(plan(slow(), make_monitor(), state()), T0 + 5)
    waiting = mark(waiting, 1, Phase.IN_PROGRESS, "waiting", T0 + 6)
    p = plan(signal("GPULost"), make_monitor(), state(records=[waiting]))
    assert not p.skipped and StepKind.RESTART_GANG in kinds(p)


def test_a_slow_signal_on_a_node_a_node_fault_moved_off_is_a_duplicate() -> None:
    fault = finished(new_record(plan(signal("GPULost"), make_monitor(), state()), T0 + 5), T0 + 60)
    p = plan(slow(), make_monitor(), state(now=T0 + 70, records=[fault]))
    assert p.skipped == f"{planning.DUPLICATE}{fault['id']}"
