"""Status conditions computed from a reconcile outcome."""

from __future__ import annotations

from trainguard.controller.status import Outcome, monitor_status, status_changes


def by_type(status: dict) -> dict[str, dict]:  # type: ignore[type-arg]
    return {c["type"]: c for c in status["conditions"]}


def test_success_is_ready_and_not_degraded() -> None:
    s = monitor_status(
        None, Outcome(generation=3, rules_applied=True, routes_applied=True, pods=4, input_hash="h"), "T1"
    )
    c = by_type(s)
    assert (c["Ready"]["status"], c["RulesApplied"]["status"], c["RoutesApplied"]["status"]) == ("True",) * 3
    assert c["Degraded"]["status"] == "False"
    assert s["observedGeneration"] == 3 and s["podsMonitored"] == 4 and s["inputHash"] == "h"
    assert all(x["observedGeneration"] == 3 for x in s["conditions"])


def test_error_degrades_with_reason_and_message() -> None:
    out = Outcome(
        generation=1, error_reason="PolicyNotFound", error_message="AlertPolicy ml/x ... does not exist"
    )
    c = by_type(monitor_status(None, out, "T1"))
    assert c["Degraded"]["status"] == "True" and c["Degraded"]["reason"] == "PolicyNotFound"
    assert c["Ready"]["status"] == "False" and "does not exist" in c["Ready"]["message"]


def test_transition_time_kept_while_status_holds() -> None:
    ok = Outcome(generation=1, rules_applied=True, routes_applied=True)
    first = monitor_status(None, ok, "T1")
    second = monitor_status(first, ok, "T2")
    assert by_type(second)["Ready"]["lastTransitionTime"] == "T1"
    failed = monitor_status(
        second, Outcome(generation=2, error_reason="InvalidSpec", error_message="m"), "T3"
    )
    assert by_type(failed)["Ready"]["lastTransitionTime"] == "T3"


def test_the_changes_of_a_status_are_named_by_field_and_condition_type() -> None:
    ready = {"type": "Ready", "status": "True", "reason": "Reconciled"}
    degraded = {"type": "Degraded", "status": "False", "reason": "AsExpected"}
    previous = {"conditions": [ready, degraded], "observedGeneration": 1, "inputHash": "a"}
    assert status_changes(previous, dict(previous)) == []
    changed = {**previous, "conditions": [{**ready, "status": "False"}, degraded], "inputHash": "b"}
    assert status_changes(previous, changed) == ["conditions Ready", "inputHash"]
    assert status_changes(None, {"observedGeneration": 2}) == ["observedGeneration"]
    assert status_changes(previous, {"conditions": [ready]}) == ["conditions"], "one condition gone"
