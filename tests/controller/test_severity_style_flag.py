"""`trainguard operator --severity-style`: the platform's style of the severity label (catalog/severity.py),
grade by default, refused at parse time when it is not one of the styles."""

from __future__ import annotations

import pytest

from trainguard.catalog.severity import GRADE, STYLES
from trainguard.cli import build_parser


def test_grade_is_the_default_and_every_style_is_taken() -> None:
    assert build_parser().parse_args(["operator"]).severity_style == GRADE
    for style in STYLES:
        assert build_parser().parse_args(["operator", "--severity-style", style]).severity_style == style


def test_another_value_is_refused_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["operator", "--severity-style", "critical"])
    assert exc.value.code == 2
    assert "argument --severity-style:" in capsys.readouterr().err
