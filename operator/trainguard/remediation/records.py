"""Remediation records: what was decided about one alert and how far its steps got, kept as plain JSON
dicts in the monitor's status (`status.remediations`, oldest first) so that they survive the operator.

A record is written before its first step is taken and after every step changes, so an operator that
restarts halfway finds the record and resumes at `next_step` instead of repeating or losing a step.
Every function here is pure: it returns a new record or list and never changes its arguments.
The shape is api.monitor.RemediationRecord's (camelCase); strings are clipped to its bounds.

Trust: anyone who may patch the monitor's status could write a record, so a record carries the
operator's signature (`sign`), an HMAC under the operator key over the fields that say what it orders
(id, fingerprint, alert, class, node, gpu, created, dryRun, each step's kind and params), where it
stands (its phase, owner, updated and skipped, each step's phase and progress fields) and the monitor
object it belongs to (namespace, name and uid). The planner signs a new record and the executor signs
again at every save, so each state a record is found in is one the operator wrote: a phase reset by
hand, a step marked done to skip it (ConfirmFault before a cordon), or a record copied into another
monitor's status does not check, and the executor refuses it (`signed`). Only the texts for people
(`message`, each step's `detail` and `time`) are left out.

Replays: a state the operator wrote once (the Planned record, a step InProgress) stays signed. Copied
back after the record finished, it would run again. Two checks stop that, and the executor refuses
such a record (Failed, its reason the message) as it refuses an unsigned one:
- the operator process remembers each record it saw finished (dispatch.FinishedRecords, by id and
  creation time, a record's `identity`: a record planned again for the same alert is a new record)
  for as long as a copy of it could pass the next check (`horizon`): a record never leaves a finished
  phase, so a finished record found unfinished again is a replay (`replayed`);
- an unfinished record is carried out only if, when it is handed to an executor, the operator last
  wrote it within RESUME_WINDOW_S, plus the wait the step it stopped in may take (its signed
  timeout_s): the planner hands a new record over at once, and a record resumed by a restarted
  operator or a new leader is a few minutes old at most; one older is a replay or a fault long past
  (`stale`).
What is left: a copy of a state younger than that window, put back while no operator process that
saw the record finish leads (between a restart and the new leader's first pass over the records).
A phase counter in the record would not help (the attacker replays the counter too), nor would a
memory of finished records alone (it starts empty after a restart); both checks together bound a
replay to that window.

Which executor carries a record out is its `owner`, claimed by a conditional write: another executor
that finds the record moved (`same` is false) stops.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trainguard.api.monitor import (
    REMEDIATION_DETAIL_MAX,
    REMEDIATION_MESSAGE_MAX,
    REMEDIATION_PARAM_VALUE_MAX,
    REMEDIATION_STEPS_MAX,
)
from trainguard.remediation.model import Phase, Plan
from trainguard.times import rfc3339, unix

Record = dict[str, Any]

RECORD_LIMIT = 50
"""Records kept per monitor (TrainingJobMonitorStatus.remediations' maxItems)."""

FINISHED: frozenset[str] = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.SKIPPED, Phase.DRY_RUN})
"""Record phases with nothing left to do. A dry run is finished once recorded: it changes nothing."""

_STEP_DONE: frozenset[str] = frozenset({Phase.SUCCEEDED, Phase.SKIPPED})
_MARKS: frozenset[str] = frozenset({Phase.IN_PROGRESS, Phase.SUCCEEDED, Phase.FAILED, Phase.SKIPPED})


SIGNATURE_CONTEXT = "trainguard.io/remediation-record/v2"
"""Sets a record's signature apart from every other HMAC under the operator key (tokens.derive's). v2
covers where the record stands and the monitor's uid; a v1 record (what it orders only) does not check."""

RESUME_WINDOW_S = 900.0
"""How long after the operator last wrote an unfinished record an executor handed it still carries it
out, besides the wait of the step it stopped in (`stale`): a resumed record waited for an operator.
An operator is back in seconds to minutes: a standby takes the lease, a pod is rescheduled (5 minutes of
NotReady toleration on a dead node) and its image pulled. Fifteen minutes leaves room for that; a record
older is reported (Failed, saying why) rather than carried out: it is a replay, or its fault is old."""


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


_PROGRESS_FIELDS = ("asked", "count", "createdUpTo", "pastStep")
"""api.monitor.StepProgress's fields: the apiserver prunes any other."""


def _progress(step: Mapping[str, Any]) -> dict[str, float]:
    """A step's progress fields as numbers: the apiserver hands 1000.0 back as 1000, and the signature
    must hold through that."""
    progress = step.get("progress")
    if not isinstance(progress, Mapping):
        return {}
    out = {}
    for k in _PROGRESS_FIELDS:
        v = progress.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool):
            out[k] = float(v)
        elif v is not None:
            out[k] = v
    return out


def _signed_fields(record: Mapping[str, Any]) -> dict[str, Any]:
    """What a record orders (the fields nothing changes after the planner wrote it) and where it stands
    (what the executor's saves move), with the defaults the CRD's schema gives an absent field."""
    return {
        "id": record.get("id"),
        "fingerprint": record.get("fingerprint"),
        "alert": record.get("alert"),
        "class": record.get("class"),
        "node": record.get("node", ""),
        "gpu": record.get("gpu", ""),
        "created": record.get("created"),
        "dryRun": bool(record.get("dryRun", False)),
        "phase": record.get("phase"),
        "owner": record.get("owner") or "",
        "updated": record.get("updated"),
        "skipped": record.get("skipped", ""),
        "steps": [
            {
                "kind": s.get("kind"),
                "params": dict(s.get("params") or {}),
                "phase": s.get("phase"),
                "progress": _progress(s),
            }
            for s in record.get("steps") or []
            if isinstance(s, Mapping)
        ],
    }


def signature(record: Mapping[str, Any], key: bytes, namespace: str, name: str, uid: str) -> str:
    """HMAC-SHA256 under the operator key of the record as it stands and the monitor object it belongs to
    (so a record copied into another monitor's status, or into a monitor created again under the same
    name, does not check), urlsafe base64 unpadded."""
    fields = json.dumps(_signed_fields(record), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    message = f"{SIGNATURE_CONTEXT}\n{namespace}\n{name}\n{uid}\n{fields}".encode()
    mac = hmac.new(key, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


def sign(record: Record, key: bytes, namespace: str, name: str, uid: str) -> Record:
    """The record with the operator's signature, for the monitor `namespace`/`name` whose metadata.uid is
    `uid`. Call it on every state written: the signature covers where the record stands."""
    return {**copy.deepcopy(record), "signature": signature(record, key, namespace, name, uid)}


def signed(record: Mapping[str, Any], key: bytes, namespace: str, name: str, uid: str) -> bool:
    """Whether the record carries the operator's signature for this monitor object and stands where the
    operator last wrote it (a record written before records were signed, or by an older operator that
    signed only what it orders, does not check), in constant time."""
    given = record.get("signature")
    if not isinstance(given, str) or not given:
        return False
    expected = signature(record, key, namespace, name, uid)
    return hmac.compare_digest(expected.encode("ascii"), given.encode("ascii", "replace"))


def identity(record: Mapping[str, Any]) -> tuple[str, str]:
    """What tells one record from another: its id (one per alert instance) and its creation time. A
    record planned again for the same alert (dry run turned off, a plan skipped before) has the id of
    the first, not its creation time."""
    return str(record.get("id", "")), str(record.get("created", ""))


def _wait_s(step: Mapping[str, Any]) -> float:
    """How long a step may wait without a save: its signed timeout_s (RequestCheckpoint's)."""
    try:
        wait = float((step.get("params") or {}).get("timeout_s") or 0)
    except (TypeError, ValueError):
        return 0.0
    return wait if math.isfinite(wait) and wait > 0 else 0.0


def stale(record: Record, handed: float) -> str:
    """Why an unfinished record handed to an executor at `handed` (unix seconds) is too old to carry out,
    or "": the operator last wrote it (`updated`, signed) more than RESUME_WINDOW_S before, plus the wait
    of the step it stopped in when that step is InProgress."""
    index = next_step(record)
    if index is None:
        return ""
    step = (record.get("steps") or [])[index]
    allowed = RESUME_WINDOW_S + (_wait_s(step) if step.get("phase") == Phase.IN_PROGRESS else 0.0)
    age = handed - unix(str(record.get("updated", "")))
    if age <= allowed:
        return ""
    return (
        f"refused as stale: the operator last wrote this record {age:.0f}s ago, more than the {allowed:.0f}s "
        "within which an operator resumes a record (a copy of an old record put back, or an operator "
        "stopped that long); nothing of it is carried out"
    )


def replayed() -> str:
    """The reason a finished record found unfinished again is refused."""
    return (
        "refused as a replay: this operator saw the record finished, and a record never leaves a finished "
        "phase (an earlier state of it was put back); nothing of it is carried out"
    )


def horizon(record: Mapping[str, Any]) -> float:
    """Until when (unix seconds) a finished record must be remembered as finished: after that, every
    earlier state of it is `stale` (each was written no later than the finished one, and no step of it
    waits longer than its longest timeout_s)."""
    longest = max((_wait_s(s) for s in record.get("steps") or [] if isinstance(s, Mapping)), default=0.0)
    return unix(str(record.get("updated", ""))) + RESUME_WINDOW_S + longest


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
