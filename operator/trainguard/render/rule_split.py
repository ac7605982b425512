"""The shared group in several groups, so that a Prometheus evaluates its parts on several cores.

Prometheus evaluates a group on one goroutine, one rule after the other, and the groups in parallel: at
1,000 to 2,000 jobs the one shared group nears its 15 s interval on a core of Prometheus 2
(docs/performance.md). The split keeps every chain of recordings in one group with the rules that read
it, in the group's order, so a rule never reads a recording of its own chain from an earlier evaluation.
Only the input rules (the latched thresholds, settings and jobs, which every rule reads) lead the first
group and are read across groups: as of their last evaluation, at most one interval old, and they change
only when a monitor does. So a new monitor's alerts may start one interval later than on the one group;
nothing else moves.
"""

from __future__ import annotations

import re
from typing import Any

from trainguard.catalog.rule_forms import SHARED_GROUPS_MAX

MAX_PARTS = SHARED_GROUPS_MAX

_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def _reads(expr: str, recorded: set[str]) -> set[str]:
    return {name for name in _NAME.findall(expr) if name in recorded}


def split_group(group: dict[str, Any], parts: int, inputs: int) -> list[dict[str, Any]]:
    """`group` in at most `parts` groups: its first `inputs` rules (the recordings every other rule
    reads) lead the first group, which keeps the group's name; the rest are joined into chains (a rule
    with every recording it reads, and every rule recording the same name) and the chains are dealt,
    largest first, to the group with the fewest rules, ties to the earlier group. Each group keeps the
    rules in the order of `group`; empty groups are left out. The same input gives the same output."""
    if not 1 <= parts <= MAX_PARTS:
        raise ValueError(f"parts must be 1 to {MAX_PARTS}, not {parts}")
    rules: list[dict[str, Any]] = group["rules"]
    if parts == 1:
        return [group]
    head, rest = rules[:inputs], rules[inputs:]
    # union-find over the rules after the inputs: a chain is a set of rule indices
    parent = list(range(len(rest)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    recorders: dict[str, list[int]] = {}
    for i, rule in enumerate(rest):
        if "record" in rule:
            recorders.setdefault(rule["record"], []).append(i)
    for i, rule in enumerate(rest):
        for name in _reads(rule["expr"], set(recorders)):
            for j in recorders[name]:
                join(i, j)
    chains: dict[int, list[int]] = {}
    for i in range(len(rest)):
        chains.setdefault(find(i), []).append(i)
    loads = [len(head)] + [0] * (parts - 1)
    members: list[list[int]] = [[] for _ in range(parts)]
    for root in sorted(chains, key=lambda r: (-len(chains[r]), r)):
        k = min(range(parts), key=lambda b: (loads[b], b))
        members[k] += chains[root]
        loads[k] += len(chains[root])
    out: list[dict[str, Any]] = []
    for k, indices in enumerate(members):
        kept = (head if k == 0 else []) + [rest[i] for i in sorted(indices)]
        if kept:
            name = f"{group['name']}.{len(out)}" if out else group["name"]
            out.append({**group, "name": name, "rules": kept})
    return out
