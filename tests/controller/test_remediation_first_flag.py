"""--remediation-first-seconds: how long a reconcile about to start waits for the fast path at most
(remediation/urgency.py); 0 turns the wait off, and a negative or non-number is refused at parse time."""

from __future__ import annotations

import pytest

from trainguard.cli import build_parser
from trainguard.remediation.urgency import HOLD_S


def test_the_default_is_the_hold_and_zero_is_taken() -> None:
    assert build_parser().parse_args(["operator"]).remediation_first_seconds == HOLD_S
    assert (
        build_parser().parse_args(["operator", "--remediation-first-seconds", "0"]).remediation_first_seconds
        == 0
    )
    assert (
        build_parser()
        .parse_args(["operator", "--remediation-first-seconds", "2.5"])
        .remediation_first_seconds
        == 2.5
    )


@pytest.mark.parametrize("value", ["-1", "soon", "inf", "nan"])
def test_a_bad_value_is_refused_naming_the_flag(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["operator", "--remediation-first-seconds", value])
    err = capsys.readouterr().err
    assert "--remediation-first-seconds" in err and "0 or more" in err
