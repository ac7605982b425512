"""Lemon nodes: a node that keeps failing is taken out of the spare pool and listed for repair.

Each fault trainguard acts on is recorded on the Node itself, in the annotation
trainguard.io/fault-history (a bounded JSON list of {ts, cause, record}), written in the same patch as
the cordon: it outlives the operator, its leader changes and the cordon, and anyone can read it. A node
whose faults in the platform's window reach the platform's threshold (operator flags --lemon-faults and
--lemon-window, chart `remediation.lemon`; never a tenant's setting) is a lemon. The leader keeps the
label trainguard.io/lemon=true on it (with trainguard.io/lemon-reason) and, on a spare, a NoSchedule
taint of the same key that no replacement pod tolerates; `trainguard uncordon` refuses a lemon without
--force, and `trainguard nodes --lemons` lists them.

Everything here is pure: node JSON and a clock value in, a verdict or a merge patch out.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainguard.catalog.kubernetes import (
    CORDON_REASON,
    CORDONED_AT,
    CORDONED_BY,
    FAULT_HISTORY,
    LEMON_LABEL,
    LEMON_REASON,
    SPARE_LABEL,
)

HISTORY_MAX = 20
"""Faults kept on a node, the newest: a node's annotation stays small (a few KB at most), and the
threshold may not ask for more faults than are kept."""
CAUSE_MAX = 200
"""Characters of a fault's cause kept (the cordon reason, such as the alert and what was seen)."""
DAY_S = 86400.0
TRUE = "true"


@dataclass(frozen=True)
class LemonPolicy:
    """The platform's threshold: `faults` or more within `window_s` make a lemon; 0 faults: never."""

    faults: int = 3
    window_s: float = 30 * DAY_S

    def __post_init__(self) -> None:
        if not 0 <= self.faults <= HISTORY_MAX:
            raise ValueError(
                f"--lemon-faults {self.faults}: give 0 (off) to {HISTORY_MAX}, the faults a node's history keeps"
            )
        if self.window_s <= 0:
            raise ValueError(f"--lemon-window {self.window_s:g}s: give a window longer than 0s, such as 30d")

    def __str__(self) -> str:
        return f"{self.faults} fault(s) in {window_text(self.window_s)}" if self.faults else "off"


@dataclass(frozen=True)
class Fault:
    ts: float
    """Unix seconds of the action (the cordon)."""
    cause: str
    record: str
    """The remediation record's id: a fault is recorded once per record, however often its step is redone."""

    def as_json(self) -> dict[str, Any]:
        return {"ts": int(self.ts), "cause": self.cause, "record": self.record}


@dataclass(frozen=True)
class Verdict:
    faults: int
    """Faults within the window."""
    lemon: bool
    reason: str
    """Why it is a lemon, in words; "" when it is not."""


def window_text(seconds: float) -> str:
    if seconds % DAY_S == 0:
        return f"{seconds / DAY_S:g}d"
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    return f"{seconds:g}s"


def when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- the history ----


def parse_history(text: str | None) -> list[Fault]:
    """The annotation's faults, oldest first; an entry that is not {ts, cause, record} is skipped (a hand
    edit gone wrong must not stop the rest from counting)."""
    try:
        raw = json.loads(text or "[]")
    except ValueError:
        return []
    out: list[Fault] = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        try:
            ts = float(item["ts"])
        except (KeyError, TypeError, ValueError):
            continue
        out.append(Fault(ts, str(item.get("cause", ""))[:CAUSE_MAX], str(item.get("record", ""))))
    return sorted(out, key=lambda f: f.ts)


def _meta(node: Mapping[str, Any]) -> Mapping[str, Any]:
    return node.get("metadata") or {}


def recorded(node: Mapping[str, Any]) -> list[Fault]:
    """The faults the node's annotation holds."""
    return parse_history((_meta(node).get("annotations") or {}).get(FAULT_HISTORY))


def current_cordon(node: Mapping[str, Any]) -> Fault | None:
    """The fault of the cordon trainguard's annotations show, if any (a cordon made before the history
    was kept counts too)."""
    annotations = _meta(node).get("annotations") or {}
    if CORDONED_BY not in annotations:
        return None
    try:
        ts = float(str(annotations.get(CORDONED_AT)))
    except ValueError:
        return None
    return Fault(ts, str(annotations.get(CORDON_REASON, ""))[:CAUSE_MAX], str(annotations[CORDONED_BY]))


def history_of(node: Mapping[str, Any]) -> list[Fault]:
    """The node's faults: its annotation's, and its current cordon when the annotation lacks its record."""
    faults = recorded(node)
    cordon = current_cordon(node)
    return (with_fault(faults, cordon) or faults) if cordon else faults


def with_fault(history: list[Fault], fault: Fault) -> list[Fault] | None:
    """The history with `fault` added, the newest HISTORY_MAX kept; None when its record is there already
    (a step redone after a restart, or retried after a lost answer, records it once)."""
    if fault.record and any(f.record == fault.record for f in history):
        return None
    added = sorted([*history, Fault(fault.ts, fault.cause[:CAUSE_MAX], fault.record)], key=lambda f: f.ts)
    return added[-HISTORY_MAX:]


def encode(history: Iterable[Fault]) -> str:
    return json.dumps([f.as_json() for f in history], separators=(",", ":"), sort_keys=True)


def describe(history: Iterable[Fault]) -> str:
    """The faults in words, newest first: `2024-05-01T10:00:00Z GPUCriticalXid (record rec-1)`."""
    return "; ".join(f"{when(f.ts)} {f.cause or 'a fault'} (record {f.record or '?'})"
                     for f in sorted(history, key=lambda f: -f.ts))  # fmt: skip


# ---- the score ----


def in_window(history: Iterable[Fault], now: float, window_s: float) -> int:
    """Faults younger than the window: one exactly `window_s` old has aged out. A fault stamped in the
    future (another writer's clock) counts."""
    return sum(1 for f in history if now - f.ts < window_s)


def verdict(history: Iterable[Fault], now: float, policy: LemonPolicy) -> Verdict:
    count = in_window(history, now, policy.window_s)
    lemon = policy.faults > 0 and count >= policy.faults
    reason = (
        f"{count} fault(s) in the last {window_text(policy.window_s)}, the platform's threshold is {policy}"
        if lemon
        else ""
    )
    return Verdict(count, lemon, reason)


def is_lemon(node: Mapping[str, Any]) -> bool:
    """Whether the leader labelled the node a lemon (the platform's threshold is the operator's, so a
    client such as `trainguard uncordon` reads the leader's verdict rather than judging again)."""
    return (_meta(node).get("labels") or {}).get(LEMON_LABEL) == TRUE


# ---- the writes ----


def cordon_fields(node: Mapping[str, Any], fault: Fault, now: float, policy: LemonPolicy) -> dict[str, Any]:
    """The metadata the cordon's own patch also carries: the history with this fault (none when its
    record is there already) and, when it makes the node a lemon, the label and its reason at once."""
    history = with_fault(history_of(node), fault)
    if history is None:
        return {}
    out: dict[str, Any] = {"annotations": {FAULT_HISTORY: encode(history)}}
    found = verdict(history, now, policy)
    if found.lemon and not is_lemon(node):
        out["labels"] = {LEMON_LABEL: TRUE}
        out["annotations"][LEMON_REASON] = found.reason
    return out


def lemon_taint(node: Mapping[str, Any], lemon: bool) -> list[dict[str, Any]] | None:
    """The node's taints with the lemon taint on a lemon spare and off anything else; None when they
    are right as they are."""
    taints: list[dict[str, Any]] = (node.get("spec") or {}).get("taints") or []
    spare = (_meta(node).get("labels") or {}).get(SPARE_LABEL) == TRUE
    has = any(t.get("key") == LEMON_LABEL for t in taints)
    want = lemon and spare
    if has == want:
        return None
    if want:
        return [*taints, {"key": LEMON_LABEL, "value": TRUE, "effect": "NoSchedule"}]
    return [t for t in taints if t.get("key") != LEMON_LABEL]


def node_patch(node: Mapping[str, Any], now: float, policy: LemonPolicy) -> dict[str, Any] | None:
    """The merge patch that makes the node's lemon label, reason and spare taint match its history now
    (and keeps a cordon made before the history in it); None when nothing changes. Conditional on the
    resourceVersion read: the taint list is replaced whole."""
    meta = _meta(node)
    annotations = meta.get("annotations") or {}
    history = history_of(node)
    found = verdict(history, now, policy)
    patch_annotations: dict[str, str | None] = {}
    if history and history != recorded(node):
        patch_annotations[FAULT_HISTORY] = encode(history)
    want_reason = found.reason or None
    if annotations.get(LEMON_REASON) != want_reason:
        patch_annotations[LEMON_REASON] = want_reason
    patch: dict[str, Any] = {}
    if is_lemon(node) != found.lemon:
        patch.setdefault("metadata", {})["labels"] = {LEMON_LABEL: TRUE if found.lemon else None}
    if patch_annotations:
        patch.setdefault("metadata", {})["annotations"] = patch_annotations
    taints = lemon_taint(node, found.lemon)
    if taints is not None:
        patch["spec"] = {"taints": taints or None}
    if not patch:
        return None
    patch.setdefault("metadata", {})["resourceVersion"] = meta.get("resourceVersion")
    return patch


# ---- the listing ----


@dataclass(frozen=True)
class NodeFaults:
    """One node with a fault history, as `trainguard nodes` and the metrics show it."""

    node: str
    faults: tuple[Fault, ...]
    lemon: bool
    reason: str
    cordoned: bool


def fleet(nodes: Iterable[Mapping[str, Any]]) -> list[NodeFaults]:
    """Every node with a fault history or the lemon label, by name: the leader's verdict as it wrote it."""
    out = []
    for n in nodes:
        history = history_of(n)
        if not history and not is_lemon(n):
            continue
        annotations = _meta(n).get("annotations") or {}
        out.append(
            NodeFaults(
                node=str(_meta(n).get("name", "?")),
                faults=tuple(history),
                lemon=is_lemon(n),
                reason=str(annotations.get(LEMON_REASON, "")),
                cordoned=bool((n.get("spec") or {}).get("unschedulable")),
            )
        )
    return sorted(out, key=lambda f: f.node)


def scores(nodes: Iterable[Mapping[str, Any]], now: float, policy: LemonPolicy) -> list[tuple[str, Verdict]]:
    """(node, verdict) of every node with a fault history, by name: the metrics' reading."""
    out = []
    for n in nodes:
        history = history_of(n)
        if history:
            out.append((str(_meta(n).get("name", "?")), verdict(history, now, policy)))
    return sorted(out, key=lambda item: item[0])
