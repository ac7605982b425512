"""A small reader of the top-level Dockerfile: instructions by stage, continuation lines joined."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, rest) per instruction; comments dropped, backslash continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([+-])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def expand(word: str, args: dict[str, str]) -> str:
    """Docker's substitution of build arguments: $X, ${X}, ${X:-default}, ${X:+if set}."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(4)
        value = args.get(name, "")
        if m.group(2) == "+":
            return m.group(3) if value else ""
        if m.group(2) == "-":
            return value or m.group(3)
        return value

    return VARIABLE.sub(one, word)


def global_args(text: str, given: dict[str, str] | None = None) -> dict[str, str]:
    """The ARGs declared before the first FROM, at their defaults unless `given` (--build-arg)."""
    args: dict[str, str] = {}
    for keyword, rest in instructions(text):
        if keyword == "FROM":
            break
        if keyword == "ARG":
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip().strip('"')
    return args | (given or {})


def stages(text: str, build_args: dict[str, str] | None = None) -> list[Stage]:
    """The stages, their bases with the global ARGs expanded (their defaults, or `build_args`)."""
    args = global_args(text, build_args)
    result: list[Stage] = []
    for keyword, rest in instructions(text):
        if keyword == "ARG" and not result:
            continue
        if keyword == "FROM":
            words = rest.split()
            words = [w for w in words if not w.startswith("--")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            result.append(Stage(base=expand(words[0], args), name=name))
        else:
            assert result, f"{keyword} before the first FROM"
            result[-1].instructions.append((keyword, rest))
    return result


def exec_form(rest: str) -> list[str]:
    """An ENTRYPOINT or CMD in exec form (a JSON array); a shell form is refused."""
    value = json.loads(rest)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), rest
    return value


def copy_sources(rest: str) -> list[str]:
    words = [w for w in shlex.split(rest) if not w.startswith("--")]
    return words[:-1]
