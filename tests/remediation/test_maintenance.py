"""Planned maintenance: which nodes are going into maintenance, the signal for the jobs on them, and the
eviction gate that holds a drain until the job's checkpoint is taken (remediation/maintenance.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import monitor as make_monitor
from trainguard.catalog.alerts import NODE_MAINTENANCE
from trainguard.catalog.kubernetes import CORDONED_BY, MAINTENANCE_AT
from trainguard.remediation import maintenance
from trainguard.remediation.model import Phase, Source, StepKind
from trainguard.times import rfc3339

T0 = 1_700_000_000.0
LEAD = 600.0
"""Twice the default emergencyCheckpointTimeout (5m)."""
BOUND = 300.0 + maintenance.HOLD_MARGIN_S


def node(
    name: str = "gpu-a", *, cordoned: bool = False, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"unschedulable": True} if cordoned else {},
    }


def pod(name: str, on: str, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ml", "labels": {"app": "llama-pretrain"}, **meta},
        "spec": {"nodeName": on},
        "status": {"phase": "Running"},
    }


PODS = [pod("w-0", "gpu-a"), pod("w-1", "gpu-b")]


def monitor(**remediation: Any) -> Any:
    return make_monitor(**{"spec.remediation": remediation})


# ---- which nodes ---------------------------------------------------------------------------------


def test_a_persons_cordon_is_maintenance_and_trainguards_is_not() -> None:
    assert maintenance.under_maintenance(node(cordoned=True), T0, LEAD) == maintenance.Maintenance("cordon")
    ours = node(cordoned=True, annotations={CORDONED_BY: "abc-1"})
    assert maintenance.under_maintenance(ours, T0, LEAD) is None
    assert maintenance.under_maintenance(node(), T0, LEAD) is None


def test_an_annotated_time_is_due_within_the_lead() -> None:
    at = T0 + 3600
    annotated = node(annotations={MAINTENANCE_AT: rfc3339(at)})
    assert maintenance.under_maintenance(annotated, at - LEAD - 1, LEAD) is None
    assert maintenance.under_maintenance(annotated, at - LEAD, LEAD) == maintenance.Maintenance(
        "annotation", at
    )
    assert maintenance.under_maintenance(annotated, at + 10, LEAD) is not None


@pytest.mark.parametrize("value", ["tonight", "2026-12-03 22:00", "2026-12-03T22:00:00", ""])
def test_a_bad_annotation_is_a_problem_naming_the_annotation_and_the_format(value: str) -> None:
    bad = node(annotations={MAINTENANCE_AT: value})
    assert maintenance.under_maintenance(bad, T0, LEAD) is None
    (problem,) = maintenance.problems([bad, node("gpu-b")])
    assert MAINTENANCE_AT in problem.message
    assert "RFC 3339" in problem.message
    assert "gpu-a" in problem.message


def test_one_signal_per_node_of_the_job_under_maintenance() -> None:
    nodes = [node("gpu-a", cordoned=True), node("gpu-b"), node("gpu-c", cordoned=True)]
    seen = maintenance.sighted({}, nodes, T0)
    assert seen == {"gpu-a": T0, "gpu-c": T0}
    (s,) = maintenance.signals(nodes, PODS, monitor(), T0 + 9, seen)
    assert s.alertname == NODE_MAINTENANCE
    assert s.node == "gpu-a"
    assert s.labels["by"] == "cordon"
    assert s.severity == "P2"
    assert s.source == Source.OPERATOR
    assert s.starts_at == T0  # the first sighting: the same signal on every pass
    again = maintenance.sighted(seen, nodes, T0 + 30)
    (same,) = maintenance.signals(nodes, PODS, monitor(), T0 + 30, again)
    assert (same.fingerprint, same.starts_at) == (s.fingerprint, s.starts_at)


def test_an_uncordoned_node_is_forgotten() -> None:
    seen = maintenance.sighted({}, [node(cordoned=True)], T0)
    assert maintenance.sighted(seen, [node()], T0 + 5) == {}


def test_no_signal_for_pods_on_their_way_out_or_another_jobs() -> None:
    leaving = [
        pod("w-0", "gpu-a", deletionTimestamp="2023-11-14T22:13:20Z"),
        {**pod("x", "gpu-a"), "metadata": {"name": "x", "namespace": "ml", "labels": {"app": "other"}}},
    ]
    assert maintenance.signals([node(cordoned=True)], leaving, monitor(), T0, {}) == []


def test_an_annotated_signal_is_dated_when_it_fell_due() -> None:
    at = T0 + 100
    (s,) = maintenance.signals([node(annotations={MAINTENANCE_AT: rfc3339(at)})], PODS, monitor(), T0, {})
    assert s.labels["by"] == "annotation"
    assert s.starts_at == at - LEAD


# ---- the eviction gate ---------------------------------------------------------------------------


def record(phase: str = Phase.IN_PROGRESS, ckpt: str = Phase.IN_PROGRESS, **kw: Any) -> dict[str, Any]:
    return {
        "id": "m-1",
        "class": "maintenance",
        "node": "gpu-a",
        "phase": phase,
        "created": rfc3339(T0),
        "steps": [
            {"kind": StepKind.REQUEST_CHECKPOINT, "phase": ckpt},
            {"kind": StepKind.RESTART_GANG, "phase": Phase.PLANNED},
        ],
        **kw,
    }


def verdict(
    records: list[dict[str, Any]], *, now: float = T0 + 5, held: float | None = None, **kw: Any
) -> Any:
    return maintenance.eviction_verdict(
        kw.pop("the_node", node(cordoned=True)), kw.pop("mon", monitor()), records, now, held_since=held, **kw
    )


def test_an_eviction_waits_for_the_checkpoint_and_goes_once_it_is_taken() -> None:
    held = verdict([record()])
    assert not held.allowed
    assert "checkpointing" in held.message and "m-1" in held.message
    assert verdict([record(ckpt=Phase.SUCCEEDED)]).allowed
    assert verdict([record(ckpt=Phase.FAILED)]).allowed  # a timed-out checkpoint does not block the drain


def test_an_eviction_before_the_record_exists_is_held_from_the_gates_first_hold() -> None:
    assert not verdict([], held=T0).allowed
    assert verdict([], now=T0 + BOUND, held=T0).allowed


def test_the_hold_is_bounded_by_the_checkpoint_timeout() -> None:
    assert not verdict([record()], now=T0 + BOUND - 1).allowed
    assert verdict([record()], now=T0 + BOUND).allowed


def test_an_eviction_off_maintenance_or_without_a_move_is_never_held() -> None:
    assert verdict([record()], the_node=node()).allowed  # a person's eviction of one pod, no drain
    assert verdict([record()], the_node=None).allowed
    assert verdict([record()], mon=monitor(actions={"maintenance": "Notify"})).allowed
    assert verdict([record()], mon=monitor(enabled=False)).allowed
    assert verdict([record()], mon=monitor(dryRun=True)).allowed
    fault = {"id": "f-1", "class": "nodeFault", "node": "gpu-a", "phase": Phase.IN_PROGRESS, "steps": []}
    assert verdict([fault], held=T0).allowed  # a faulty node: nothing to save there


def test_an_old_record_does_not_release_a_later_drain() -> None:
    old = record(phase=Phase.SUCCEEDED, ckpt=Phase.SUCCEEDED, created=rfc3339(T0 - 86400))
    assert not verdict([old], held=T0, pod_created=T0 - 3600).allowed
    assert verdict([old], held=T0, pod_created=T0 - 2 * 86400).allowed
