"""--shared-rule-groups: the shared group's rules in several groups (render/rule_split.py), every rule once,
each chain of recordings in one group with its readers, the inputs first."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from trainguard.render.rule_split import MAX_PARTS, split_group
from trainguard.render.shared import SHARED_GROUP, input_rules, shared_group, shared_groups

INPUTS = {r["record"] for r in input_rules()}


def _name(rule: dict[str, Any]) -> str:
    return str(rule.get("record") or rule.get("alert"))


def test_one_part_is_the_shared_group_itself() -> None:
    assert shared_groups() == [shared_group()]
    assert shared_groups(parts=1) == [shared_group()]


@pytest.mark.parametrize("parts", [2, 3, 4, 8, MAX_PARTS])
def test_every_rule_is_kept_once_in_its_order_and_the_inputs_lead(parts: int) -> None:
    whole = shared_group()
    split = shared_groups(parts=parts)
    assert 2 <= len(split) <= parts
    assert [g["name"] for g in split] == [SHARED_GROUP] + [
        f"{SHARED_GROUP}.{k}" for k in range(1, len(split))
    ]
    assert all(g["rules"] and g["interval"] == whole["interval"] for g in split)
    position = {json.dumps(r, sort_keys=True): i for i, r in enumerate(whole["rules"])}
    assert len(position) == len(whole["rules"])
    seen = [json.dumps(r, sort_keys=True) for g in split for r in g["rules"]]
    assert sorted(seen) == sorted(position) and len(seen) == len(set(seen))
    for g in split:  # each group in the whole group's order
        order = [position[json.dumps(r, sort_keys=True)] for r in g["rules"]]
        assert order == sorted(order)
    assert [_name(r) for r in split[0]["rules"][: len(INPUTS)]] == [_name(r) for r in input_rules()]


@pytest.mark.parametrize("parts", [2, 4, MAX_PARTS])
def test_no_rule_reads_a_recording_of_another_group_but_the_inputs(parts: int) -> None:
    """A rule reading a recording that another group writes would read it one evaluation late (or,
    for a chain, several); only the inputs, which change with the monitors alone, may be."""
    split = shared_groups(parts=parts)
    home = {r["record"]: g["name"] for g in split for r in g["rules"] if "record" in r}
    for g in split:
        for rule in g["rules"]:
            for name in set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", rule["expr"])) & set(home):
                if name not in INPUTS:
                    assert home[name] == g["name"], (
                        f"{_name(rule)} in {g['name']} reads {name} of {home[name]}"
                    )


def test_the_split_is_the_same_every_time_and_uses_the_cores_it_is_given() -> None:
    assert shared_groups(parts=4) == shared_groups(parts=4)
    sizes = [len(g["rules"]) for g in shared_groups(parts=4)]
    assert len(sizes) == 4 and max(sizes) < len(shared_group()["rules"]) / 2


def test_a_recording_written_by_several_rules_stays_in_one_group() -> None:
    group = {
        "name": "g",
        "rules": [
            {"record": "in", "expr": "vector(1)"},
            {"record": "a", "expr": "x"},
            {"record": "b", "expr": "y"},
            {"record": "a", "expr": "z"},
            {"alert": "A", "expr": "a > 0 and on() in"},
            {"alert": "B", "expr": "b > 0 and on() in"},
        ],
    }
    split = split_group(group, 3, inputs=1)
    assert [[_name(r) for r in g["rules"]] for g in split] == [["in"], ["a", "a", "A"], ["b", "B"]]


@pytest.mark.parametrize("parts", [0, -1, MAX_PARTS + 1])
def test_a_count_out_of_range_is_refused(parts: int) -> None:
    with pytest.raises(ValueError, match=f"1 to {MAX_PARTS}"):
        shared_groups(parts=parts)
