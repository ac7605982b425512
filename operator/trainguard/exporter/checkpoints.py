"""Checkpoint references as the operator hands them to a sidecar: a pin posted to /v1/control, or the
resume-from pointer a recreated pod's sidecar starts with (--resume-from). Standard library only, so
the exporter's flags can validate the pointer before anything starts."""

from __future__ import annotations

import json
import math
from typing import Any

CHECKPOINT_KINDS = ("incremental", "full")
PATH_MAX = 4096
RECORD_MAX = 253
"""A remediation record id, as a sidecar takes it (a Kubernetes name at most)."""
RESUME_FROM_ENV = "TRAINGUARD_RESUME_FROM"


def _number(value: Any) -> float | None:
    """A finite JSON number (not a bool, not a numeric string), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def checkpoint_ref(value: Any, what: str = "resume_from") -> dict[str, Any] | None:
    """{"step", "kind", "path", "ts"} from the operator's object, or None for null. Raises ValueError
    saying what is wrong: a pin the trainer cannot use (no step, a path that is not text) must be
    refused where it is posted, not found out when the job resumes. Unknown keys are ignored, so an
    older sidecar takes a newer operator's pin."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object {{step, kind, path, ts}} or null")
    step = _number(value.get("step"))
    if step is None or step < 0:
        raise ValueError(f"{what}.step must be a finite number >= 0")
    kind = value.get("kind")
    if kind is not None and kind not in CHECKPOINT_KINDS:
        raise ValueError(f"{what}.kind must be one of {', '.join(CHECKPOINT_KINDS)} or null")
    path = value.get("path")
    if path is not None and (not isinstance(path, str) or not path or len(path) > PATH_MAX):
        raise ValueError(f"{what}.path must be a non-empty string of at most {PATH_MAX} characters, or null")
    ts: float | None = None
    if value.get("ts") is not None:
        ts = _number(value.get("ts"))
        if ts is None or ts <= 0:
            raise ValueError(f"{what}.ts must be unix seconds > 0, or null")
    return {"step": step, "kind": kind, "path": path, "ts": ts}


def resume_pointer(text: str) -> dict[str, Any] | None:
    """--resume-from / TRAINGUARD_RESUME_FROM: the JSON the operator wrote on the workload as
    trainguard.io/resume-from ({step, path, kind?, ts?, generation?, record?}); empty or "null" is no
    pointer. `generation` (and the `record` that chose it) is there when the pod replaces one rank of a
    gang whose other ranks restart in place: the sidecar holds it as the launcher's word from the start,
    so the pod's first trainer joins that generation's rendezvous instead of one the gang has left."""
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    ref = checkpoint_ref(value, "the resume-from pointer")
    if ref is None:
        return None
    generation, record = value.get("generation"), value.get("record", "")
    if generation is not None:
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 1:
            raise ValueError("the resume-from pointer.generation must be an integer >= 1, or absent")
        if not isinstance(record, str) or len(record) > RECORD_MAX:
            raise ValueError(
                f"the resume-from pointer.record must be a string of at most {RECORD_MAX} characters"
            )
        ref = {**ref, "generation": generation, "record": record}
    return ref


def newer(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """The one to resume from of two checkpoints: the higher step; on a tie, the later one (`b`)."""
    if a is None or b is None:
        return a if b is None else b
    return a if float(a["step"]) > float(b["step"]) else b
