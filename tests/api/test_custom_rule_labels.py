"""A custom rule's label names must be Prometheus label names: one bad name makes Prometheus (and
prometheus-operator) drop the job's whole rule group, which would silence every alert of the job."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import pytest

from tests.conftest import POLICY
from trainguard.api import InvalidInput, parse_object
from trainguard.render import dump_yaml


def with_label(name: str) -> dict[str, object]:
    p = copy.deepcopy(POLICY)
    p["spec"]["customRules"] = [{"name": "Mine", "expr": "up == 0", "severity": "P2", "labels": {name: "v"}}]
    return p


GOOD = ["team", "owner_2", "_private"]
BAD = ["a-b", "1st", "__name__", "with space", "é"]
UTF8_ONLY = {"a-b", "1st"}
"""Label names Prometheus 3 reads (UTF-8 names) and 2 refuses: refused, the cluster's may be a 2."""


@pytest.mark.parametrize("name", GOOD)
def test_prometheus_label_names_are_accepted(name: str) -> None:
    parse_object(with_label(name))


@pytest.mark.parametrize("name", BAD)
def test_other_label_names_are_refused_naming_the_field(name: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        parse_object(with_label(name))
    assert "spec.customRules[0].labels" in str(exc.value) and "Prometheus label names" in str(exc.value)


@pytest.mark.tools
@pytest.mark.parametrize("name", [*GOOD, *BAD[:3]])
def test_promtool_agrees(name: str, promtool: str, toolchain: str, tmp_path: Path) -> None:
    group = {"name": "g", "rules": [{"alert": "Mine", "expr": "up == 0", "labels": {name: "v"}}]}
    (tmp_path / "rules.yml").write_text(dump_yaml({"groups": [group]}))
    result = subprocess.run([promtool, "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True,
                            text=True, check=False)  # fmt: skip
    loads = name in GOOD or (toolchain == "upstream" and name in UTF8_ONLY)
    assert (result.returncode == 0) == loads, result.stdout + result.stderr
