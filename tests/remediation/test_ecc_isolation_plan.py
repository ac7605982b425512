"""eccDegraded as a pure decision: GPUSingleBitECCErrorsHigh (a P1) asks every rank for a checkpoint,
then cordons and taints the node and never restarts the job; `Notify`, the cordon cap, dry run, a
missing node label, duplicates and the escalated P0 copy of the P1 each change what is done."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import monitor as make_monitor
from tests.remediation.escalation_inputs import am
from tests.remediation.test_plan import (
    CKPT,
    CORDON,
    FULL_NODE_FAULT,
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
from trainguard.catalog import ALERTS_BY_NAME
from trainguard.remediation import plan as planning
from trainguard.remediation.escalation import Settings, escalated
from trainguard.remediation.model import Phase, Signal
from trainguard.remediation.plan import plan, quiet, response_class
from trainguard.remediation.records import mark, new_record
from trainguard.remediation.signals import from_alertmanager

SBE = "GPUSingleBitECCErrorsHigh"
ISOLATE = (CORDON, TAINT, CKPT)
"""Cordon and taint first (no running pod is disturbed), then the checkpoint."""


def sbe(**kw: Any) -> Signal:
    return signal(SBE, **{"severity": "P1", **kw})


# ---- the catalogue and the spec ------------------------------------------------------------------------


def test_the_alert_is_a_p1_of_the_ecc_degraded_class_and_cordon_after_checkpoint_is_the_default() -> None:
    alert = ALERTS_BY_NAME[SBE]
    assert (alert.severity, str(alert.p0_class)) == ("P1", planning.ECC_DEGRADED)
    assert response_class(SBE) == planning.ECC_DEGRADED
    assert make_monitor().spec.remediation.actions.ecc_degraded == "CordonAfterCheckpoint"


# ---- must act ------------------------------------------------------------------------------------------


def test_default_cordons_and_taints_the_node_then_checkpoints_every_rank_without_a_restart() -> None:
    p = plan(sbe(), make_monitor(), state())
    assert kinds(p) == ISOLATE
    assert (p.p0_class, p.node, p.gpu, p.skipped, p.dry_run) == (planning.ECC_DEGRADED, NODE, "0", "", False)
    params = [s.params for s in p.steps]
    # avoid is empty: the node's ranks are healthy (their errors were corrected) and hold their shards
    assert params[2] == {"kind": "full", "timeout_s": "300", "avoid": ""}
    assert params[0] == params[1] == {"node": NODE, "reason": SBE}


def test_the_checkpoint_waits_for_the_emergency_checkpoint_timeout() -> None:
    p = plan(sbe(), monitor(emergencyCheckpointTimeout="90s"), state())
    assert p.steps[2].params["timeout_s"] == "90"


def test_a_policy_that_raised_it_to_p0_still_isolates() -> None:
    assert kinds(plan(sbe(severity="P0"), make_monitor(), state())) == ISOLATE


def test_the_restart_budget_does_not_hold_an_isolation_back() -> None:
    """Nothing is restarted, so a spent budget changes nothing."""
    assert kinds(plan(sbe(), monitor(jobRestartBudget=0), state())) == ISOLATE


def test_a_node_trainguard_already_cordoned_does_not_count_against_the_cap() -> None:
    cordons = ((NODE, T0), *((f"other-{i}", T0) for i in range(3)))  # 40 nodes: cap 4, all used
    assert kinds(plan(sbe(), make_monitor(), state(cordons=cordons))) == ISOLATE


def test_a_new_instance_after_the_last_one_was_handled_acts_again() -> None:
    """The alert resolved and fired again later: more errors. The node is re-cordoned idempotently and
    the job gets a fresh checkpoint."""
    rec = finished(new_record(plan(sbe(), make_monitor(), state()), T0 + 5), T0 + 60)
    later = sbe(starts_at=T0 + 6 * 3600)
    assert kinds(plan(later, make_monitor(), state(now=T0 + 6 * 3600, records=[rec]))) == ISOLATE


def test_dry_run_plans_the_same_steps_and_records_them_as_dry_run() -> None:
    p = plan(sbe(), monitor(dryRun=True), state())
    assert kinds(p) == ISOLATE and p.dry_run
    rec = new_record(p, T0 + 5)
    assert rec["phase"] == Phase.DRY_RUN and {s["phase"] for s in rec["steps"]} == {Phase.DRY_RUN}


# ---- must not act --------------------------------------------------------------------------------------


def test_notify_cordons_nothing_and_needs_no_record() -> None:
    p = plan(sbe(), monitor(actions={"eccDegraded": "Notify"}), state())
    assert p.steps == () and p.skipped.startswith(planning.NOTIFY_ONLY) and quiet(p)


def test_remediation_disabled_cordons_nothing() -> None:
    p = plan(sbe(), monitor(enabled=False), state())
    assert p.steps == () and p.skipped == planning.DISABLED


@pytest.mark.parametrize("severity", ["P2", "P3"])
def test_a_policy_that_lowered_it_asks_for_no_isolation(severity: str) -> None:
    p = plan(sbe(severity=severity), make_monitor(), state())
    assert p.steps == () and p.skipped.startswith(planning.NO_RESPONSE) and quiet(p)


@pytest.mark.parametrize(("gpu_nodes", "cap"), [(3, 1), (40, 4)])
def test_at_the_cordon_cap_it_only_notifies_and_asks_no_checkpoint(gpu_nodes: int, cap: int) -> None:
    cordons = tuple((f"other-{i}", T0) for i in range(cap))
    below = plan(sbe(), make_monitor(), state(gpu_nodes=gpu_nodes, cordons=cordons[:-1]))
    assert kinds(below) == ISOLATE
    at = plan(sbe(), make_monitor(), state(gpu_nodes=gpu_nodes, cordons=cordons))
    assert kinds(at) == (NOTIFY,)
    assert at.skipped.startswith(planning.CORDON_CAP) and not quiet(at), "a person hears of it"
    assert f"cap {cap}" in at.skipped and NODE in at.skipped


def test_the_cap_counts_an_isolation_about_to_cordon() -> None:
    """An isolation planned but not carried out yet holds its place under the cap."""
    m = monitor(maxCordonedNodes=1)
    pending = new_record(plan(sbe(node="gpu-a"), m, state()), T0 + 5)
    assert kinds(plan(signal("GPULost", node="gpu-b"), m, state(now=T0 + 6, records=[pending]))) == (NOTIFY,)
    assert kinds(plan(sbe(node="gpu-b", gpu="1"), m, state(now=T0 + 6, records=[pending]))) == (NOTIFY,)


def test_without_a_node_label_it_only_notifies() -> None:
    p = plan(sbe(node=""), make_monitor(), state())
    assert kinds(p) == (NOTIFY,)
    assert p.skipped.startswith(planning.NO_NODE) and not quiet(p)
    assert p.steps[0].params["reason"] == p.skipped


# ---- once per fault ------------------------------------------------------------------------------------


def test_the_same_alert_reposted_acts_once() -> None:
    """Alertmanager re-sends a firing alert at its group and repeat intervals, with the same startsAt;
    the fast path does not carry this alert."""
    m = make_monitor()
    rec = new_record(plan(sbe(), m, state()), T0 + 5)
    running = mark(rec, 0, Phase.IN_PROGRESS, "asking 2 sidecar(s) for a checkpoint", T0 + 6)
    done = finished(rec, T0 + 40)
    for now, records in ((T0 + 7, [running]), (T0 + 300, [done]), (T0 + 2 * 3600, [done])):
        again = plan(sbe(), m, state(now=now, records=records))
        assert again.skipped == f"duplicate of {rec['id']}" and quiet(again), now


def test_another_gpu_of_the_same_node_is_isolated_once() -> None:
    m = make_monitor()
    rec = new_record(plan(sbe(gpu="0"), m, state()), T0 + 5)
    other_gpu = sbe(gpu="5", starts_at=T0 + 30)
    assert other_gpu.fingerprint != rec["fingerprint"]
    assert plan(other_gpu, m, state(now=T0 + 31, records=[rec])).skipped == f"duplicate of {rec['id']}"
    other_node = sbe(node="gpu-b", gpu="5", starts_at=T0 + 30)
    assert kinds(plan(other_node, m, state(now=T0 + 31, records=[rec]))) == ISOLATE


def test_a_node_fault_on_the_node_covers_the_isolation_but_not_the_other_way_round() -> None:
    """A node fault cordoned the node and moved the job: nothing left to isolate. An isolation leaves
    the job on the node: a node fault there must still move it."""
    m = make_monitor()
    fault = new_record(plan(signal("GPUDoubleBitECCError"), m, state()), T0 + 5)
    assert plan(sbe(starts_at=T0 + 10), m, state(now=T0 + 11, records=[fault])).skipped.startswith(
        planning.DUPLICATE
    )
    isolated = finished(new_record(plan(sbe(), m, state()), T0 + 5), T0 + 30)
    dbe = signal("GPUDoubleBitECCError", starts_at=T0 + 40)
    assert kinds(plan(dbe, m, state(now=T0 + 41, records=[isolated]))) == FULL_NODE_FAULT


# ---- escalation: the P0 copy re-pages and never acts a second time --------------------------------------


def _escalated_copy(alertname: str, *, age_s: float, now: float) -> Signal:
    """The copy the operator's escalation posts for an unacknowledged P1, as Alertmanager then sends it
    to the receiver (webhook payload parsed by the receiver's own parser)."""
    p1 = am(alertname, "P1", age_s, node=NODE, gpu="0")
    copy = escalated(p1, Settings(enabled=True, after_s=900.0), now)
    payload = {"version": "4", "status": "firing", "alerts": [{"status": "firing", **copy}]}
    (parsed,) = from_alertmanager(payload, now)
    return parsed


def test_the_escalated_copy_of_the_p1_never_acts_even_long_after_the_isolation_finished() -> None:
    m = make_monitor()
    now = T0 + 3600
    p1_start = now - 20 * 60
    rec = finished(new_record(plan(sbe(starts_at=p1_start), m, state(now=p1_start)), p1_start), p1_start + 60)
    copy = _escalated_copy(SBE, age_s=20 * 60, now=now)
    assert (copy.severity, copy.labels["escalated_from"]) == ("P0", "P1")
    assert copy.fingerprint == sbe().fingerprint, "the same fault as its P1"
    for records in ([rec], []):  # handled, or never seen (the P1 itself is decided when it arrives)
        p = plan(copy, m, state(now=now, records=records))
        assert p.steps == () and p.skipped.startswith(planning.ESCALATED) and quiet(p)


def test_the_escalated_copy_of_gradient_explosion_does_not_advise_twice() -> None:
    copy = _escalated_copy("GradientExplosion", age_s=20 * 60, now=T0)
    p = plan(copy, monitor(trainingAdvice=True), state(now=T0))
    assert p.steps == () and p.skipped.startswith(planning.ESCALATED)


def test_a_p0_class_alert_a_policy_lowered_to_p1_still_acts_when_escalated() -> None:
    """Unchanged: there the escalated copy is the only P0 of the fault."""
    lowered = signal("GPUCriticalXid", severity="P0", escalated_from="P1")
    assert kinds(plan(lowered, make_monitor(), state())) == FULL_NODE_FAULT
    assert RESTART in kinds(plan(lowered, make_monitor(), state()))
