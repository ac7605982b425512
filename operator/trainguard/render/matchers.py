"""Alertmanager label matchers, built once and written in the form each output needs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

MatchType = Literal["=", "!=", "=~", "!~"]

_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


@dataclass(frozen=True)
class Matcher:
    name: str
    op: MatchType
    value: str

    def text(self) -> str:
        """alertmanager.yml's form, `name="value"`. The value is written as is: label values here
        (names of jobs, nodes, alerts, severities) hold no quotes."""
        return f'{self.name}{self.op}"{self.value}"'

    def resource(self) -> dict[str, str]:
        """An AlertmanagerConfig's form."""
        return {"name": self.name, "matchType": self.op, "value": self.value}


def eq(name: str, value: str) -> Matcher:
    return Matcher(name, "=", value)


def ne(name: str, value: str) -> Matcher:
    return Matcher(name, "!=", value)


def one_of(name: str, values: Sequence[str]) -> Matcher:
    """An alternation (Alertmanager anchors it); only RE2's metacharacters are escaped, so names stay
    readable."""
    return Matcher(name, "=~", "|".join(_RE2_SPECIAL.sub(r"\\\1", v) for v in values))
