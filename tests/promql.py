"""Reading rendered PromQL the way Prometheus parses it, for the tests that check what a rule reads."""

from __future__ import annotations

import promql_parser


def selected_names(expr: str) -> set[str]:
    """The metric names `expr` selects (vector and matrix selectors), through promql-parser."""
    names: set[str] = set()

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names
