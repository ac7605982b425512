"""The operator's word to the launcher, as the sidecar's GET /v1/control shows it (`restart`), and the
environment a trainer of that generation starts with. Pure: the supervisor reads the view and spawns.

The sidecar checked the word when it was posted (exporter/restarts.py); it is read again here because
the launcher may face an older or a newer sidecar, and a word it cannot use must not kill a trainer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GENERATION_ENV = "TRAINGUARD_GENERATION"
RESUME_FROM_ENV = "TRAINGUARD_RESUME_FROM"
"""Read by the SDK's Reporter.resume_from() first (trainguard.sdk.reporter)."""
OVERRIDES: dict[str, tuple[str, ...]] = {
    "rank": ("RANK", "PET_NODE_RANK"),
    "world_size": ("WORLD_SIZE", "PET_NNODES"),
    "master_addr": ("MASTER_ADDR", "PET_MASTER_ADDR"),
    "master_port": ("MASTER_PORT", "PET_MASTER_PORT"),
}
"""Word field -> the variables it sets: torch.distributed's own, and torchrun's (PET_*), so a command
that is torchrun picks them up too."""


class BadWord(ValueError):
    """A word the launcher cannot use; its message names the field."""


@dataclass(frozen=True)
class Word:
    generation: int
    record: str = ""
    resume_from: dict[str, Any] | None = None
    rank: int | None = None
    world_size: int | None = None
    master_addr: str | None = None
    master_port: int | None = None


def _int(value: Any, what: str, low: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise BadWord(f"restart.{what} must be an integer >= {low}")
    return value


def _checkpoint(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    step = value.get("step") if isinstance(value, dict) else None
    if isinstance(step, bool) or not isinstance(step, int | float) or not math.isfinite(step) or step < 0:
        raise BadWord("restart.resume_from must be null or a checkpoint {step, kind, path, ts}")
    return {k: value[k] for k in ("step", "kind", "path", "ts") if value.get(k) is not None}


def word_of(view: Any) -> Word | None:
    """The restart word in a control view, or None when there is none (no word yet, or a sidecar older
    than the launcher). Raises BadWord for one it cannot use."""
    value = view.get("restart") if isinstance(view, dict) else None
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadWord("restart must be an object")
    generation = _int(value.get("generation"), "generation", 1)
    if generation is None:
        raise BadWord("restart.generation is missing")
    record = value.get("record") or ""
    addr = value.get("master_addr")
    if addr is not None and (not isinstance(addr, str) or not addr):
        raise BadWord("restart.master_addr must be a non-empty string")
    return Word(
        generation=generation,
        record=record if isinstance(record, str) else "",
        resume_from=_checkpoint(value.get("resume_from")),
        rank=_int(value.get("rank"), "rank", 0),
        world_size=_int(value.get("world_size"), "world_size", 1),
        master_addr=addr,
        master_port=_int(value.get("master_port"), "master_port", 1),
    )


def child_env(base: Mapping[str, str], generation: int, word: Word | None) -> dict[str, str]:
    """The environment of the trainer of `generation`: the launcher's own, TRAINGUARD_GENERATION, and for a
    trainer started on a word, TRAINGUARD_RESUME_FROM (JSON; unset when the word names no checkpoint:
    the trainer then asks its sidecar) and the word's rank, world size and master overrides."""
    env = dict(base)
    env[GENERATION_ENV] = str(generation)
    if word is None:
        return env
    env.pop(RESUME_FROM_ENV, None)
    if word.resume_from is not None:
        env[RESUME_FROM_ENV] = json.dumps(word.resume_from, sort_keys=True)
    for field, names in OVERRIDES.items():
        value = getattr(word, field)
        if value is not None:
            env.update(dict.fromkeys(names, str(value)))
    return env
