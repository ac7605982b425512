"""Remediation records: what was decided about one alert and how far its steps got, kept as plain JSON
dicts in the monitor's status (`status.remediations`, oldest first) so that they survive the operator.

A record is written before its first step is taken and after every step changes, so an operator that
restarts halfway finds the record and resumes at `next_step` instead of repeating or losing a step.
Every function here is pure: it returns a new record or list and never changes its arguments.
The shape is api.monitor.RemediationRecord's (camelCase); strings are clipped to its bounds.

Trust: anyone who may patch the monitor's status could write a record, so a record carries the
operator's signature (`sign`), an HMAC under the operator key over the fields that say what it orders
(id, fingerprint, alert, class, node, gpu, created, dryRun, each step's kind and params) and the
monitor it belongs to; the executor refuses a record whose signature does not check (`signed`). Which
executor carries a record out is its `owner`, claimed by a conditional write: another executor that
finds the record moved (`same` is false) stops.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
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


SIGNATURE_CONTEXT = "trainguard.io/remediation-record/v1"
"""Sets a record's signature apart from every other HMAC under the operator key (tokens.derive's)."""


class Superseded(Exception):
    """The record in the API has moved past this executor (another executor claimed it or moved it on, it
    finished, or it is gone): the executor stops without acting."""


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


def _signed_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    """What a record orders, the fields nothing changes after the planner wrote it."""
    return {
        "id": record.get("id"),
        "fingerprint": record.get("fingerprint"),
        "alert": record.get("alert"),
        "class": record.get("class"),
        "node": record.get("node", ""),
        "gpu": record.get("gpu", ""),
        "created": record.get("created"),
        "dryRun": bool(record.get("dryRun", False)),
        "steps": [
            {"kind": s.get("kind"), "params": dict(s.get("params") or {})}
            for s in record.get("steps") or []
            if isinstance(s, Mapping)
        ],
    }


def signature(record: Mapping[str, Any], key: bytes, namespace: str, name: str) -> str:
    """HMAC-SHA256 under the operator key of the record's immutable fields and the monitor it belongs to
    (so a record copied into another monitor's status does not check), urlsafe base64 unpadded."""
    fields = json.dumps(_signed_fields(record), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    message = f"{SIGNATURE_CONTEXT}\n{namespace}\n{name}\n{fields}".encode()
    mac = hmac.new(key, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


def sign(record: Record, key: bytes, namespace: str, name: str) -> Record:
    """The record with the operator's signature, for the monitor `namespace`/`name`."""
    return {**copy.deepcopy(record), "signature": signature(record, key, namespace, name)}


def signed(record: Mapping[str, Any], key: bytes, namespace: str, name: str) -> bool:
    """Whether the record carries the operator's signature for this monitor and is unaltered since
    (a record written before records were signed has none, and does not check), in constant time."""
    given = record.get("signature")
    if not isinstance(given, str) or not given:
        return False
    expected = signature(record, key, namespace, name)
    return hmac.compare_digest(expected.encode("ascii"), given.encode("ascii", "replace"))


def claimed(record: Record, owner: str) -> Record:
    """The record with `owner` as the executor carrying it out."""
    return {**copy.deepcopy(record), "owner": owner}


def same(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two copies of a record stand at the same point: the same owner, phase and time, and each
    step at the same phase and time (what a write moves; fields the API may add are not compared)."""
    if a is None or b is None:
        return a is b

    def position(r: Mapping[str, Any]) -> tuple[Any, ...]:
        steps = tuple((s.get("kind"), s.get("phase"), s.get("time")) for s in r.get("steps") or [])
        return (r.get("id"), r.get("owner", ""), r.get("phase"), r.get("updated"), steps)

    return position(a) == position(b)


def skip_rest(record: Record, reason: str, now: float) -> Record:
    """The record stopped before its next step: every step not done yet (one left InProgress too) Skipped
    with `reason` as its detail, and the record Skipped with `reason` as its message."""
    if is_finished(record):
        raise ValueError(f"record {record.get('id')} is {record.get('phase')}: nothing is left to skip")
    out = copy.deepcopy(record)
    time = rfc3339(now)
    for step in out.get("steps", []):
        if step.get("phase") not in _STEP_DONE:
            step.update(phase=str(Phase.SKIPPED), detail=_clip(f"not carried out: {reason}", REMEDIATION_DETAIL_MAX),
                        time=time)  # fmt: skip
    out.update(phase=str(Phase.SKIPPED), updated=time, skipped=_clip(reason, REMEDIATION_MESSAGE_MAX),
               message=_clip(reason, REMEDIATION_MESSAGE_MAX))  # fmt: skip
    return out


def refused(record: Record, reason: str, now: float) -> Record:
    """A record the executor will not carry out (unsigned, or altered since it was signed): Failed with
    `reason` as its message, its steps not done yet Skipped; nothing of it is acted on."""
    out = skip_rest(record, reason, now)
    out.update(phase=str(Phase.FAILED), skipped="")
    return out
