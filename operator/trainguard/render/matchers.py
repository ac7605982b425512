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
        r"""alertmanager.yml's form, `name="value"`, the value escaped as a double-quoted string (`\\`,
        `\"`, `\n`): Alertmanager's matchers parser since 0.27 rejects any other escape, such as a
        regex's `\.` left bare (0.27 to 0.35 fall back to the old parser with a warning, a strict one
        fails the configuration), and the old parser reads these three escapes the same way."""
        value = self.value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'{self.name}{self.op}"{value}"'

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
