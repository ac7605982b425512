"""`helm template` of charts/trainguard, byte for byte, for the defaults and for every option on.

Catches any unintended change to what the chart installs. When a change is intended, regenerate the
files and review their diff:

    TRAINGUARD_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/packaging/test_chart_golden.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.packaging.chart import template

GOLDEN = Path(__file__).parent / "golden"
UPDATE = "TRAINGUARD_UPDATE_GOLDEN"
CASES = sorted(p.name.removesuffix(".values.yaml") for p in GOLDEN.glob("*.values.yaml"))


@pytest.mark.parametrize("case", CASES)
def test_helm_template_matches_the_golden_file(helm: str, case: str) -> None:
    actual = template(helm, values=GOLDEN / f"{case}.values.yaml")
    path = GOLDEN / f"{case}.rendered.yaml"
    if os.environ.get(UPDATE):
        path.write_text(actual)
    assert path.exists(), f"{path} is missing; create it with {UPDATE}=1 (see this module's docstring)"
    assert actual == path.read_text(), (
        f"helm template with {case}.values.yaml differs from {path}. If the change is intended, "
        f"regenerate with\n  {UPDATE}=1 .venv/bin/python -m pytest tests/packaging/{Path(__file__).name}\n"
        "and review the diff of tests/packaging/golden/ before committing."
    )


@pytest.mark.parametrize("case", CASES)
def test_two_runs_render_byte_identical_output(helm: str, case: str) -> None:
    """Nothing random or time-dependent in the chart (no generated certificates, no timestamps), so
    GitOps tools see no diff between two renders."""
    first = template(helm, values=GOLDEN / f"{case}.values.yaml")
    second = template(helm, values=GOLDEN / f"{case}.values.yaml")
    assert first == second


def test_every_golden_file_has_its_values() -> None:
    rendered = {p.name.removesuffix(".rendered.yaml") for p in GOLDEN.glob("*.rendered.yaml")}
    assert rendered <= set(CASES), f"golden output without a values file: {sorted(rendered - set(CASES))}"
    assert set(CASES) >= {"default", "secret-certs"}
