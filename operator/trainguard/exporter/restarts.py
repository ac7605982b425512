"""The in-place restart as the sidecar carries it: the operator's word (`restart` on POST /v1/control),
checked before it is kept, and what `trainguard launch` reports of its trainer (POST /v1/report,
`{"type": "launcher", ...}`), kept so that GET /v1/control tells the operator which pods can restart in
place and which generation each runs. Standard library only, pure: the sidecar's state holds the
results under its lock.
"""

from __future__ import annotations

import signal
from typing import Any

from trainguard.exporter.checkpoints import RECORD_MAX, checkpoint_ref

ADDR_MAX = 253
LAUNCHER_STATES = ("running", "waiting", "gone")
"""running: a trainer of `generation` runs; waiting: it exited by itself and the launcher waits for a word;
gone: the launcher is exiting (it will restart nothing)."""
LAUNCHER_EVENTS = ("hello", "started", "exited", "alive", "bye")
EXIT_CAUSES = ("exit", "restart", "signal")
"""Why a trainer exited: by itself, killed by its launcher for a new generation, or killed because the
launcher was told to stop (the pod is going away)."""
WARM_STATES = ("starting", "ready")
"""The launcher's warm trainer (--preload): importing, or ready to take the next restart."""
LAUNCHER_STALE_S = 15.0
"""A launcher not heard from for this long is not counted on (it reports at least every 5 s)."""


def _int(value: Any, what: str, low: int, high: int | None = None) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        bound = f">= {low}" if high is None else f"from {low} to {high}"
        raise ValueError(f"{what} must be an integer {bound}")
    return value


def _optional_int(body: dict[str, Any], key: str, low: int, high: int | None = None) -> int | None:
    value = body.get(key)
    return None if value is None else _int(value, f"restart.{key}", low, high)


def restart_word(value: Any) -> dict[str, Any] | None:
    """The operator's restart word, checked whole ({generation, record, resume_from, rank?, world_size?,
    master_addr?, master_port?}), or None for null. Raises ValueError naming the field and what it must
    be: a word a launcher cannot use must be refused where it is posted. Unknown keys are ignored, so an
    older sidecar takes a newer operator's word."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("restart must be an object {generation, record, resume_from, ...} or null")
    generation = _int(value.get("generation"), "restart.generation", 1)
    record = value.get("record", "")
    if not isinstance(record, str) or len(record) > RECORD_MAX:
        raise ValueError(f"restart.record must be a string of at most {RECORD_MAX} characters")
    resume = checkpoint_ref(value.get("resume_from"), "restart.resume_from")
    addr = value.get("master_addr")
    if addr is not None and (not isinstance(addr, str) or not addr or len(addr) > ADDR_MAX):
        raise ValueError(
            f"restart.master_addr must be a non-empty string of at most {ADDR_MAX} characters, or null"
        )
    word: dict[str, Any] = {"generation": generation, "record": record, "resume_from": resume}
    optional = {
        "rank": _optional_int(value, "rank", 0),
        "world_size": _optional_int(value, "world_size", 1),
        "master_addr": addr,
        "master_port": _optional_int(value, "master_port", 1, 65535),
    }
    word.update({k: v for k, v in optional.items() if v is not None})
    if "rank" in word and "world_size" in word and word["rank"] >= word["world_size"]:
        raise ValueError("restart.rank must be below restart.world_size")
    return word


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def launcher_state(report: dict[str, Any]) -> dict[str, Any] | None:
    """What the sidecar keeps of one launcher report: its whole state as the launcher sent it (every
    report carries all of it), or None for a report it cannot read (dropped: a launcher sends its state
    again within seconds)."""
    if report.get("event") not in LAUNCHER_EVENTS or report.get("state") not in LAUNCHER_STATES:
        return None
    pid, generation = _count(report.get("pid")), _count(report.get("generation"))
    if not pid or generation is None:
        return None
    cause, warm = report.get("cause"), report.get("warm")
    return {
        "pid": pid,
        "generation": generation,
        "state": report["state"],
        "event": report["event"],
        "child": _count(report.get("child")),
        "code": _count(report.get("code")),
        "signal": _count(report.get("signal")),
        "cause": cause if cause in EXIT_CAUSES else None,
        "warm": warm if warm in WARM_STATES else None,
    }


def interruption(state: dict[str, Any]) -> str | None:
    """Why a launcher's report says training was interrupted (the TrainingInterrupted reason label), or
    None: only a trainer that ended by itself, with a non-zero code or by a signal (an OOM kill is a
    SIGKILL). A trainer its launcher stopped (a new generation, the pod going away) or one that finished
    (code 0) interrupted nothing."""
    if state.get("event") != "exited" or state.get("cause") != "exit":
        return None
    sig, code = state.get("signal"), state.get("code")
    if sig:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"TrainerKilled({name})"
    if code:
        return f"TrainerExited(exit {code})"
    return None
