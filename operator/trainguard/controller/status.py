"""Status conditions of a monitor, computed from what a reconcile did. Pure: the clock is passed in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Outcome:
    """What one reconcile found and did."""

    generation: int | None
    rules_applied: bool = False
    routes_applied: bool = False
    error_reason: str = ""
    error_message: str = ""
    applied: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    pods: int | None = None
    pods_unmonitored: int | None = None
    """Live pods of the selector without the exporter (controller/reconcile.py unmonitored_pods)."""
    input_hash: str = ""
    receiver_secret: str | None = None
    """The receiver Secret holding inline values now ("" once emptied); None: as before."""
    workload_problem: str = ""
    """Why spec.workloadRef does not resolve (kube/workloads.py): WorkloadResolved False and, unless the
    object only does not exist yet (`workload_missing`), Degraded with reason WorkloadUnresolved, while
    the rules and routes are in place (Ready stays True: monitoring works, restarts do not)."""
    workload_missing: bool = False
    """The workload's only problem is that it does not exist (yet): WorkloadResolved False with reason
    WorkloadNotFound, not Degraded. A monitor applied before its job (a GitOps sync, a pipeline that
    submits the job later) is waiting; Degraded would fail Argo CD's health and page nobody usefully."""
    workload_checked: bool = False
    """The reconcile got as far as the workload; when not (an invalid spec), WorkloadResolved is kept."""
    rules: dict[str, Any] | None = None
    """Which rule form the monitor's rules take and why (render/shared.py's rules_status); None: as before
    (the reconcile stopped before its policies were read)."""
    namespace_problem: str = ""
    """Why the monitor's namespace could not be labelled trainguard.io/monitored
    (controller/namespace_labels.py): Degraded, reason NamespaceLabelFailed, said before the workload's,
    while Ready stays True (the rules and routes are in place; new pods start without the exporter)."""


WORKLOAD_UNRESOLVED = "WorkloadUnresolved"
WORKLOAD_NOT_FOUND = "WorkloadNotFound"
WORKLOAD_RESOLVED = "WorkloadResolved"
NAMESPACE_LABEL_FAILED = "NamespaceLabelFailed"


def _condition(  # noqa: PLR0917 - one call site, read as a table
    previous: list[dict[str, Any]],
    type_: str,
    ok: bool,
    reason: str,
    message: str,
    now: str,
    generation: int | None,
) -> dict[str, Any]:
    status = "True" if ok else "False"
    old = next((c for c in previous if c.get("type") == type_), None)
    transition = (
        old["lastTransitionTime"]
        if old and old.get("status") == status and old.get("lastTransitionTime")
        else now
    )
    out = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition,
    }
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def monitor_status(previous: dict[str, Any] | None, outcome: Outcome, now: str) -> dict[str, Any]:
    """The status to write; conditions keep their lastTransitionTime while their status holds."""
    prev_conditions = list((previous or {}).get("conditions") or [])
    g = outcome.generation
    failed = bool(outcome.error_reason)
    reason, message = next(
        (
            (r, m)
            for r, m, wrong in (
                (outcome.error_reason, outcome.error_message, failed),
                (NAMESPACE_LABEL_FAILED, outcome.namespace_problem, bool(outcome.namespace_problem)),
                (
                    WORKLOAD_UNRESOLVED,
                    outcome.workload_problem,
                    bool(outcome.workload_problem) and not outcome.workload_missing,
                ),
            )
            if wrong
        ),
        ("", ""),
    )
    rules_reason = "Applied" if outcome.rules_applied else (outcome.error_reason or "Pending")
    routes_reason = "Applied" if outcome.routes_applied else (outcome.error_reason or "Pending")
    conditions = [
        _condition(
            prev_conditions,
            "Ready",
            outcome.rules_applied and outcome.routes_applied and not failed,
            "Reconciled" if not failed else outcome.error_reason,
            "rules and routes are in place" if not failed else outcome.error_message,
            now,
            g,
        ),
        _condition(prev_conditions, "RulesApplied", outcome.rules_applied, rules_reason, "", now, g),
        _condition(prev_conditions, "RoutesApplied", outcome.routes_applied, routes_reason, "", now, g),
        # Degraded is True when something is wrong, so its "ok" is inverted; an error of the reconcile
        # itself is said before the namespace's, and that before the workload's
        _condition(prev_conditions, "Degraded", bool(reason), reason or "AsExpected", message, now, g),
    ]
    workload = _workload_condition(prev_conditions, outcome, now)
    if workload is not None:
        conditions.append(workload)
    status: dict[str, Any] = {"conditions": conditions, "observedGeneration": g}
    if outcome.pods is not None:
        status["podsMonitored"] = outcome.pods
    if outcome.pods_unmonitored is not None:
        status["podsUnmonitored"] = outcome.pods_unmonitored
    if outcome.input_hash:
        status["inputHash"] = outcome.input_hash
    if outcome.receiver_secret is not None:
        status["receiverSecret"] = outcome.receiver_secret
    if outcome.rules is not None:
        status["rules"] = outcome.rules
    return status


def _workload_condition(previous: list[dict[str, Any]], outcome: Outcome, now: str) -> dict[str, Any] | None:
    """WorkloadResolved: True when spec.workloadRef resolves (or there is none), False with reason
    WorkloadNotFound or WorkloadUnresolved and the message naming the field. Kept as it was when this
    reconcile did not get as far as the workload; absent until one did."""
    if not outcome.workload_checked:
        return next((c for c in previous if c.get("type") == WORKLOAD_RESOLVED), None)
    problem = outcome.workload_problem
    if not problem:
        reason = "Resolved"
    else:
        reason = WORKLOAD_NOT_FOUND if outcome.workload_missing else WORKLOAD_UNRESOLVED
    return _condition(previous, WORKLOAD_RESOLVED, not problem, reason, problem, now, outcome.generation)


def status_changes(previous: dict[str, Any] | None, status: dict[str, Any]) -> list[str]:
    """The fields a merge patch of `status` changes in `previous`, conditions by type: what the resync's
    log names when it repairs a status."""
    previous = previous or {}
    changed: list[str] = []
    for key, value in status.items():
        if previous.get(key) == value:
            continue
        if key != "conditions":
            changed.append(key)
            continue
        before = {c.get("type"): c for c in previous.get(key) or [] if isinstance(c, dict)}
        changed += [
            f"conditions {c.get('type')}"
            for c in value
            if isinstance(c, dict) and before.get(c.get("type")) != c
        ] or [key]
    return changed
