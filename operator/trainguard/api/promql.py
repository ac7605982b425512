"""PromQL syntax checks for user-written expressions, so a typo fails at validation, not in Prometheus.

prometheus-operator drops a whole rule group when one expression does not parse, which would silence
every alert of the job while its monitor reports Ready. The parser is `promql-parser` (a Rust port of
Prometheus' own); tests/api/test_promql_agreement.py holds it to `promtool check rules`. Where the two
disagree on an expression Prometheus accepts, this module must accept it too.
"""

from __future__ import annotations

import promql_parser

SELECTOR = "$selector"
SELECTOR_STAND_IN = 'namespace="validation",training_job="validation"'
"""What `$selector` expands to at render time, in shape: the job's label matchers (render/prometheus.py)."""

_PROMETHEUS_2_FUNCTIONS = [
    # Prometheus 2.x's name for double_exponential_smoothing (renamed in 3.0); promql-parser knows only
    # the new name, and the Prometheus a cluster runs may well be a 2.x.
    promql_parser.Function(
        "holt_winters",
        [promql_parser.ValueType.Matrix, promql_parser.ValueType.Scalar, promql_parser.ValueType.Scalar],
        promql_parser.ValueType.Vector,
    ),
]
promql_parser.register_extra_functions(_PROMETHEUS_2_FUNCTIONS)


def promql_problem(expr: str) -> str | None:
    """Why `expr` (with `$selector` expanded as the renderer does) is not PromQL, or None when it is."""
    try:
        promql_parser.parse(expr.replace(SELECTOR, SELECTOR_STAND_IN))
    except ValueError as exc:
        return str(exc).strip() or "syntax error"
    return None


def quoted(value: str) -> str:
    """A PromQL string literal: the value in double quotes, backslashes and quotes escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
