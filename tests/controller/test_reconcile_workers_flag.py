"""--reconcile-workers: the threads kopf runs the handlers on (controller/run.py configure_kopf); a
count out of range or not a whole number is refused at parse time, naming the flag."""

from __future__ import annotations

import pytest

from trainguard.cli import build_parser


def test_unset_it_leaves_the_default_and_a_count_is_taken() -> None:
    assert build_parser().parse_args(["operator"]).reconcile_workers is None
    assert build_parser().parse_args(["operator", "--reconcile-workers", "16"]).reconcile_workers == 16


@pytest.mark.parametrize("value", ["0", "-2", "257", "eight", "2.5"])
def test_a_bad_count_is_refused_naming_the_flag(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["operator", "--reconcile-workers", value])
    err = capsys.readouterr().err
    assert "--reconcile-workers" in err and "1 to 256" in err
