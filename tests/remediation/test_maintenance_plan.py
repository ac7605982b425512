"""The planned-maintenance cell of the response matrix: checkpoint from every rank, then the owner-aware
move, outside the restart budget, only on the operator's own detection (remediation/plan.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.conftest import monitor as make_monitor
from tests.remediation.test_plan import T0, kinds, monitor, state
from trainguard.remediation import maintenance
from trainguard.remediation.model import Phase, Signal, Source, StepKind
from trainguard.remediation.plan import plan, quiet, response_class
from trainguard.remediation.records import mark, new_record

CKPT, CORDON, RESTART, CONFIRM = (
    StepKind.REQUEST_CHECKPOINT,
    StepKind.CORDON,
    StepKind.RESTART_GANG,
    StepKind.CONFIRM_PLACEMENT,
)
REPLACE, REJOIN, NOTIFY = StepKind.REPLACE_POD, StepKind.RESTART_IN_PLACE, StepKind.NOTIFY


def drain(by: str = "cordon", **kw: Any) -> Signal:
    """The operator's signal for gpu-a of the job, cordoned by a person (or annotated)."""
    node = {"metadata": {"name": "gpu-a"}, "spec": {"unschedulable": True}}
    if by == "annotation":
        node = {
            "metadata": {
                "name": "gpu-a",
                "annotations": {"trainguard.io/maintenance-at": "2023-11-14T22:13:20Z"},
            }
        }
    pods = [
        {"metadata": {"name": "w-0", "namespace": "ml", "labels": {"app": "llama-pretrain"}},
         "spec": {"nodeName": "gpu-a"}, "status": {"phase": "Running"}},
    ]  # fmt: skip
    (s,) = maintenance.signals([node], pods, kw.pop("mon", monitor()), T0, {"gpu-a": T0})
    return replace(s, **kw)


def test_the_class_and_its_default_plan() -> None:
    assert response_class("NodeMaintenancePlanned") == "maintenance"
    p = plan(drain(), monitor(), state())
    assert p.p0_class == "maintenance"
    assert kinds(p) == (CKPT, RESTART, CONFIRM)
    ckpt, restart, confirm = p.steps
    assert ckpt.params["kind"] == "full"
    assert ckpt.params["avoid"] == ""  # the node is healthy: its ranks save too
    assert restart.params["avoid"] == "gpu-a"
    assert confirm.params["avoid"] == "gpu-a"


def test_an_annotated_node_is_cordoned_first_without_a_taint() -> None:
    p = plan(drain("annotation"), monitor(), state())
    assert kinds(p) == (CORDON, CKPT, RESTART, CONFIRM)


@pytest.mark.parametrize("kind", ["JobSet", "TrainJob", "PyTorchJob"])
def test_an_owner_that_replaces_one_pod_moves_only_the_nodes_pod(kind: str) -> None:
    on = make_monitor(**{"spec.workloadRef": {"kind": kind, "name": "llama"}})
    p = plan(drain(), on, state())
    assert kinds(p) == (CKPT, REPLACE, REJOIN, CONFIRM)
    assert p.steps[1].params["node"] == "gpu-a"
    assert "nodeDown" not in p.steps[1].params


def test_notify_and_disabled_do_nothing() -> None:
    assert quiet(plan(drain(), monitor(actions={"maintenance": "Notify"}), state()))
    assert quiet(plan(drain(), monitor(enabled=False), state()))


def test_a_claim_from_outside_the_operator_is_not_acted_on() -> None:
    p = plan(drain(source=Source.ALERTMANAGER), monitor(), state())
    assert quiet(p)
    assert "only the operator's own reading" in p.skipped


def test_a_node_without_a_pod_of_the_job_is_not_acted_on() -> None:
    assert quiet(plan(drain(), monitor(), state(job_nodes=frozenset({"gpu-b"}))))


def interrupted(at: float, pod: str = "w-1") -> Signal:
    labels = {
        "alertname": "TrainingInterrupted",
        "namespace": "ml",
        "training_job": "llama-pretrain",
        "pod": pod,
    }
    return Signal("TrainingInterrupted", "P0", labels, f"f-{pod}-{at}", Source.OPERATOR, at)


def spent(at: float) -> dict[str, Any]:
    """A fault's gang restart, carried out."""
    r = new_record(plan(interrupted(at, "w-0"), monitor(), state(now=at)), at)
    for i in range(len(r["steps"])):
        r = mark(r, i, Phase.SUCCEEDED, "done", at + 1)
    return r


def test_a_planned_move_is_outside_the_restart_budget_both_ways() -> None:
    budget = monitor(jobRestartBudget=1)
    # the budget spent by a fault does not stop a planned move
    faults = [spent(T0 - 3600)]
    assert plan(interrupted(T0), budget, state(records=faults)).skipped.startswith("restart budget spent")
    p = plan(drain(), budget, state(records=faults))
    assert kinds(p) == (CKPT, RESTART, CONFIRM)
    # and a planned move does not spend the budget of a later fault
    moved = new_record(p, T0)
    for i in range(len(moved["steps"])):
        moved = mark(moved, i, Phase.SUCCEEDED, "done", T0 + 60)
    later = plan(interrupted(T0 + 3600), budget, state(now=T0 + 3600, records=[moved]))
    assert not later.skipped
    assert RESTART in kinds(later)


def test_a_second_signal_of_the_same_move_is_a_duplicate() -> None:
    first = new_record(plan(drain(), monitor(), state()), T0)
    again = plan(drain(starts_at=T0 + 30), monitor(), state(records=[first]))
    assert quiet(again)
    assert again.skipped.startswith("duplicate of ")
