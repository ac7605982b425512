"""PromQL syntax checks for user-written expressions, so a typo fails at validation, not in Prometheus.

prometheus-operator drops a whole rule group when one expression does not parse, which would silence
every alert of the job while its monitor reports Ready. The parser is `promql-parser` (a Rust port of
Prometheus' own); tests/api/test_promql_agreement.py holds it to `promtool check rules` of Prometheus 2.42
and of 3.x (tests/toolchains.py). The cluster's Prometheus may be either, so an expression must load on
both: what only one of them reads (a bare number as a duration, a quoted UTF-8 name, holt_winters, the
functions Prometheus 3 keeps behind a feature flag) is refused, naming the form both read.
"""

from __future__ import annotations

import re

import promql_parser

SELECTOR = "$selector"
SELECTOR_STAND_IN = 'namespace="validation",training_job="validation"'
"""What `$selector` expands to at render time, in shape: the job's label matchers (render/prometheus.py)."""

_PROMETHEUS_2_FUNCTIONS = [
    # Prometheus 2.x's name for double_exponential_smoothing; promql-parser knows only the new name.
    # Registered so that it parses, and is then refused by name (_NOT_ON_EVERY_PROMETHEUS).
    promql_parser.Function(
        "holt_winters",
        [promql_parser.ValueType.Matrix, promql_parser.ValueType.Scalar, promql_parser.ValueType.Scalar],
        promql_parser.ValueType.Vector,
    ),
]
promql_parser.register_extra_functions(_PROMETHEUS_2_FUNCTIONS)

_FEATURE_FLAG = (
    "Prometheus 3 has it only with --enable-feature=promql-experimental-functions, Prometheus 2 not at all"
)
_NOT_ON_EVERY_PROMETHEUS: dict[str, str] = {
    "holt_winters": "Prometheus 3 removed it (its double_exponential_smoothing is experimental)",
    **{
        name: _FEATURE_FLAG
        for name in (
            # Prometheus 3.16's experimental functions and aggregations (promql/parser/functions.go)
            "double_exponential_smoothing", "info", "mad_over_time", "sort_by_label", "sort_by_label_desc",
            "ts_of_first_over_time", "ts_of_last_over_time", "ts_of_max_over_time", "ts_of_min_over_time",
            "histogram_quantiles", "integral", "max_of", "min_of", "start", "end", "range", "step",
            "start_timestamp", "limitk", "limit_ratio",
        )
    },
}  # fmt: skip
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_STRING = re.compile(r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`""")
_BARE_DURATION = re.compile(r"\[\s*[0-9.]+\s*[\]:]|:\s*[0-9.]+\s*\]|\boffset\s+-?\s*[0-9.]+(?![\w.])")


def promql_problem(expr: str) -> str | None:
    """Why `expr` (with `$selector` expanded as the renderer does) is not PromQL that Prometheus 2 and 3
    both load, or None when it is."""
    try:
        tree = promql_parser.parse(expr.replace(SELECTOR, SELECTOR_STAND_IN))
    except ValueError as exc:
        return str(exc).strip() or "syntax error"
    return _portability_problem(expr, tree)


def _portability_problem(expr: str, tree: promql_parser.Expr) -> str | None:
    if _BARE_DURATION.search(_STRING.sub('""', expr)):
        return "a range, step or offset without a unit: write 5m or 30s (Prometheus 2 reads no bare number there)"
    problems: list[str] = []

    def visit(node: object) -> bool:
        names: list[str] = []
        if isinstance(node, promql_parser.Call):
            names = [node.func.name]
        elif isinstance(node, promql_parser.AggregateExpr):
            names = [str(node.op)]
            labels = node.modifier.labels if node.modifier is not None else []
            problems.extend(_odd_label(label) for label in labels if not _LABEL_NAME.match(label))
        elif isinstance(node, promql_parser.VectorSelector):
            if node.name and not _METRIC_NAME.match(node.name):
                problems.append(f"metric name {node.name!r} needs Prometheus 3 (quoted UTF-8 names)")
            for m in node.matchers.matchers:
                if (
                    m.name == "__name__"
                    and m.op == promql_parser.MatchOp.Equal
                    and not _METRIC_NAME.match(m.value)
                ):
                    problems.append(f"metric name {m.value!r} needs Prometheus 3 (quoted UTF-8 names)")
                elif not _LABEL_NAME.match(m.name):
                    problems.append(_odd_label(m.name))
        problems.extend(
            f"{n}(): {_NOT_ON_EVERY_PROMETHEUS[n]}" for n in names if n in _NOT_ON_EVERY_PROMETHEUS
        )
        return True

    promql_parser.walk(tree, visit)
    return problems[0] if problems else None


def _odd_label(name: str) -> str:
    return f"label name {name!r} needs Prometheus 3 (quoted UTF-8 names): use letters, digits and _"


def quoted(value: str) -> str:
    """A PromQL string literal: the value in double quotes, backslashes and quotes escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
