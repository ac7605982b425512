"""The guardrail flags of `trainguard operator`: their defaults, and a wrong value refused at parse time
(exit 2) with a message naming the flag."""

from __future__ import annotations

import pytest

from trainguard.cli import build_parser
from trainguard.controller.command import guardrails_of, lemons_of
from trainguard.remediation.guardrails import BreakerConfig, Guardrails, Limit
from trainguard.remediation.lemon import LemonPolicy


def parse(*flags: str) -> Guardrails:
    return guardrails_of(build_parser().parse_args(["operator", *flags]))


def test_the_defaults() -> None:
    assert parse() == Guardrails(mode="act", max_cordoned=Limit(percent=10), max_cordons=Limit(percent=10),
                                 cordon_window_s=600.0, pool_label="", pool_max_cordoned=None,
                                 breaker=BreakerConfig(share=0.3, min_down=3, rearm_s=600.0))  # fmt: skip


def test_every_flag_is_read() -> None:
    got = parse("--remediation-mode", "dry-run", "--max-cordoned-nodes", "4", "--max-cordons-per-window", "20%",
                "--cordon-window", "1h", "--pool-label", "nvidia.com/gpu.product", "--pool-max-cordoned", "25%",
                "--breaker-threshold", "50%", "--breaker-min-down", "2", "--breaker-rearm", "20s")  # fmt: skip
    assert got == Guardrails(mode="dry-run", max_cordoned=Limit(count=4), max_cordons=Limit(percent=20),
                             cordon_window_s=3600.0, pool_label="nvidia.com/gpu.product",
                             pool_max_cordoned=Limit(percent=25),
                             breaker=BreakerConfig(share=0.5, min_down=2, rearm_s=20.0))  # fmt: skip


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--remediation-mode", "pause", "invalid choice"),
        ("--max-cordoned-nodes", "lots", "not a count of nodes"),
        ("--max-cordons-per-window", "150%", "not a count of nodes"),
        ("--pool-max-cordoned", "-2", "not a count of nodes"),
        ("--breaker-threshold", "300%", "not a share of a pool"),
        ("--breaker-min-down", "0", "1 or more"),
        ("--breaker-rearm", "soon", "soon"),
        ("--cordon-window", "0s", "longer than zero"),
        ("--lemon-faults", "21", "0 (off) to 20"),
        ("--lemon-faults", "three", "not a number of faults"),
        ("--lemon-window", "0d", "longer than zero"),
    ],
)
def test_a_wrong_value_is_refused_naming_the_flag(
    flag: str, value: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["operator", flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}:" in err and says in err, err


def test_the_lemon_threshold_is_the_platforms_flags() -> None:
    assert lemons_of(build_parser().parse_args(["operator"])) == LemonPolicy(faults=3, window_s=30 * 86400.0)
    got = lemons_of(build_parser().parse_args(["operator", "--lemon-faults", "5", "--lemon-window", "7d"]))
    assert got == LemonPolicy(faults=5, window_s=7 * 86400.0)
    assert lemons_of(build_parser().parse_args(["operator", "--lemon-faults", "0"])).faults == 0


def test_guardrails_reset_is_a_verb() -> None:
    args = build_parser().parse_args(["guardrails", "reset", "--namespace", "ops", "--by", "alice"])
    assert (args.namespace, args.by, args.func.__name__) == ("ops", "alice", "cmd_guardrails_reset")
