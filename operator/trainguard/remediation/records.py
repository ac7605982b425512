"""Remediation records: what was decided about one alert and how far its steps got, kept as plain JSON
dicts in the monitor's status (`status.remediations`, oldest first) so that they survive the operator.

A record is written before its first step is taken and after every step changes, so an operator that
restarts halfway finds the record and resumes at `next_step` instead of repeating or losing a step.
Every function here is pure: it returns a new record or list and never changes its arguments.
The shape is api.monitor.RemediationRecord's (camelCase); strings are clipped to its bounds.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trainguard.api.monitor import (
    REMEDIATION_DETAIL_MAX,
    REMEDIATION_MESSAGE_MAX,
    REMEDIATION_PARAM_VALUE_MAX,
    REMEDIATION_STEPS_MAX,
)
from trainguard.remediation.model import Phase, Plan
from trainguard.times import rfc3339

Record = dict[str, Any]

RECORD_LIMIT = 50
"""Records kept per monitor (TrainingJobMonitorStatus.remediations' maxItems)."""

FINISHED: frozenset[str] = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.SKIPPED, Phase.DRY_RUN})
"""Record phases with nothing left to do. A dry run is finished once recorded: it changes nothing."""

_STEP_DONE: frozenset[str] = frozenset({Phase.SUCCEEDED, Phase.SKIPPED})
_MARKS: frozenset[str] = frozenset({Phase.IN_PROGRESS, Phase.SUCCEEDED, Phase.FAILED, Phase.SKIPPED})


class TooManyUnfinished(ValueError):
    """More unfinished records than the status may hold: none of them may be dropped."""


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_finished(record: Record) -> bool:
    return str(record.get("phase", "")) in FINISHED


def new_record(plan: Plan, now: float) -> Record:
    """The record of a plan, before anything is done: Planned; DryRun for a dry run with steps (nothing
    will be done); Skipped when there is nothing to do. A skipped plan with a NOTIFY step is Planned until
    the notification is sent, then Skipped."""
    if len(plan.steps) > REMEDIATION_STEPS_MAX:
        raise ValueError(f"a plan has at most {REMEDIATION_STEPS_MAX} steps, this one {len(plan.steps)}")
    time = rfc3339(now)
    if not plan.steps:
        phase = Phase.SKIPPED
    elif plan.dry_run:
        phase = Phase.DRY_RUN
    else:
        phase = Phase.PLANNED
    step_phase = Phase.DRY_RUN if plan.dry_run else Phase.PLANNED
    return {
        "id": plan.record_id,
        "fingerprint": plan.fingerprint,
        "alert": plan.alert,
        "class": plan.p0_class,
        "node": plan.node,
        "gpu": plan.gpu,
        "dryRun": plan.dry_run,
        "phase": str(phase),
        "skipped": _clip(plan.skipped, REMEDIATION_MESSAGE_MAX),
        "message": _clip(plan.skipped or _notes(plan), REMEDIATION_MESSAGE_MAX),
        "created": time,
        "updated": time,
        "steps": [
            {
                "kind": str(step.kind),
                "params": {k: _clip(v, REMEDIATION_PARAM_VALUE_MAX) for k, v in step.params.items()},
                "phase": str(step_phase),
                "detail": "",
                "time": time,
            }
            for step in plan.steps
        ],
    }


def _notes(plan: Plan) -> str:
    """What an acting plan says about itself: the reasons of its NOTIFY steps (what it could not do)."""
    return "; ".join(s.params["reason"] for s in plan.steps if s.kind == "Notify" and s.params.get("reason"))


def with_record(records: Sequence[Record], record: Record, limit: int = RECORD_LIMIT) -> list[Record]:
    """`records` with `record` in place of the one with its id, or appended; at most `limit` long by
    dropping the oldest finished records. An unfinished record is never dropped (its steps would be
    lost): more than `limit` of them raises TooManyUnfinished."""
    out = [copy.deepcopy(r) for r in records]
    for i, r in enumerate(out):
        if r.get("id") == record["id"]:
            out[i] = copy.deepcopy(record)
            break
    else:
        out.append(copy.deepcopy(record))
    excess = len(out) - limit
    if excess <= 0:
        return out
    drop: set[int] = set()
    for i, r in enumerate(out):
        if len(drop) == excess:
            break
        if is_finished(r):
            drop.add(i)
    if len(drop) < excess:
        unfinished = sum(1 for r in out if not is_finished(r))
        raise TooManyUnfinished(f"{unfinished} unfinished remediation records, more than the {limit} kept")
    return [r for i, r in enumerate(out) if i not in drop]


def find(records: Iterable[Record], fingerprint: str) -> Record | None:
    """The newest record of `fingerprint`, or None."""
    found = None
    for r in records:
        if r.get("fingerprint") == fingerprint:
            found = r
    return found


def next_step(record: Record) -> int | None:
    """Index of the step to carry out next (the first neither Succeeded nor Skipped: a step left
    InProgress by a crash is resumed, so every step must be idempotent), or None when the record is
    finished: done, failed, skipped or a dry run."""
    if is_finished(record):
        return None
    for i, step in enumerate(record.get("steps", [])):
        if step.get("phase") not in _STEP_DONE:
            return i
    return None


def mark(
    record: Record,
    index: int,
    phase: Phase | str,
    detail: str,
    now: float,
    *,
    progress: Mapping[str, Any] | None = None,
) -> Record:
    """A new record with step `index` at `phase` (InProgress, Succeeded, Failed or Skipped) and the
    record's own phase derived: Failed once a step failed, Succeeded when every step is done (Skipped
    for a skipped plan whose notification went out), InProgress otherwise. `progress` (the step's
    machine-readable fields, api.monitor.StepProgress) is merged into what the step had."""
    if phase not in _MARKS:
        raise ValueError(f"a step is marked {', '.join(sorted(_MARKS))}, not {phase}")
    if is_finished(record):
        raise ValueError(f"record {record.get('id')} is {record.get('phase')}: its steps are not carried out")
    steps = record.get("steps", [])
    if not 0 <= index < len(steps):
        raise IndexError(f"record {record.get('id')} has no step {index}")
    out = copy.deepcopy(record)
    time = rfc3339(now)
    step = out["steps"][index]
    step.update(phase=str(Phase(phase)), detail=_clip(detail, REMEDIATION_DETAIL_MAX), time=time)
    if progress:
        step["progress"] = {
            **(step.get("progress") or {}),
            **{k: v for k, v in progress.items() if v is not None},
        }
    out["updated"] = time
    phases = [s["phase"] for s in out["steps"]]
    if Phase.FAILED in phases:
        out["phase"] = str(Phase.FAILED)
        out["message"] = _clip(f"{step['kind']} failed: {detail}", REMEDIATION_MESSAGE_MAX)
    elif all(p in _STEP_DONE for p in phases):
        out["phase"] = str(Phase.SKIPPED if out.get("skipped") else Phase.SUCCEEDED)
    else:
        out["phase"] = str(Phase.IN_PROGRESS)
    return out
