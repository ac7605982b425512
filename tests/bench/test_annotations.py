"""bench/annotations.py's rule copies: one per variant, each looking up (or not) what its name says, and
a rule file promtool accepts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from bench.annotations import ALERT, INPUTS, copies

from trainguard.render import dump_yaml


def by_variant() -> dict[str, dict[str, str]]:
    return {r["alert"].removeprefix(f"{ALERT}_"): r["annotations"] for r in copies() if "alert" in r}


def lookups(annotations: dict[str, str]) -> int:
    return sum(v.count("| query") for v in annotations.values())


def test_each_copy_looks_up_what_its_variant_names() -> None:
    rules = copies()
    assert [r["record"] for r in rules if "record" in r] == list(INPUTS)
    counts = {k: lookups(v) for k, v in by_variant().items()}
    assert counts == {"none": 0, "static": 0, "shared": 0, "lookups": 4, "window": 2, "trace": 1, "one": 1,
                      "nothing": 1}  # fmt: skip


def test_each_copy_looks_up_its_own_activation() -> None:
    """Copies of one rule under other names: each window reads its own ALERTS_FOR_STATE, so the copies'
    lookups find a series as the shipped rule's would."""
    for tag, notes in by_variant().items():
        window = notes.get("log_window", "")
        assert f'"{ALERT}"' not in window, tag
        if "| query" in window:
            assert f'"{ALERT}_{tag}"' in window, tag


@pytest.mark.tools
def test_the_copies_are_a_rule_file_promtool_accepts(promtool: str, tmp_path: Path) -> None:
    (tmp_path / "rules.yml").write_text(dump_yaml({"groups": [{"name": "annotations", "rules": copies()}]}))
    result = subprocess.run([promtool, "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True,
                            text=True, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
