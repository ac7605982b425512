"""Which receivers Alertmanager notifies for an alert's labels: its route walk, on an alertmanager.yml
(the one `trainguard render --format prometheus` writes, render/alertmanager.py, or any plain one).

The walk is Alertmanager's (dispatch/route.go `Match`): a route that matches tries its children in
order, collecting each matching child's result and stopping at the first match without `continue`; a
route none of whose children match is the result itself. A child without a receiver inherits its
parent's. Like `amtool config routes test`, it applies matchers only: time intervals (quiet hours,
maintenance windows) are not applied, so a receiver muted at night still counts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_MATCHER = re.compile(r'^\s*([^\s=!~"{},]+)\s*(=~|!~|!=|=)\s*(.*?)\s*$')


@dataclass(frozen=True)
class LabelMatcher:
    name: str
    op: str
    value: str

    def matches(self, labels: Mapping[str, str]) -> bool:
        """A missing label matches as the empty string; regular expressions are anchored."""
        got = labels.get(self.name, "")
        if self.op in ("=", "!="):
            return (got == self.value) == (self.op == "=")
        return (re.fullmatch(f"(?:{self.value})", got) is not None) == (self.op == "=~")


def _unquote(raw: str) -> str:
    """A matcher value as Alertmanager's parser reads it: quotes off; \\n, \\" and \\\\ unescaped, any
    other backslash kept (so a regex's `\\.` stays)."""
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        raw = raw[1:-1]
    out, escaped = [], False
    for ch in raw:
        if escaped:
            out.append({"n": "\n", '"': '"', "\\": "\\"}.get(ch, "\\" + ch))
            escaped = False
        elif ch == "\\":
            escaped = True
        else:
            out.append(ch)
    return "".join(out) + ("\\" if escaped else "")


def parse_matcher(text: str) -> LabelMatcher:
    """One matcher of a route's `matchers`, such as `severity="P0"` or `node=~"a|b"`."""
    match = _MATCHER.match(text)
    if match is None:
        raise ValueError(f"not a label matcher: {text!r}")
    name, op, raw = match.groups()
    return LabelMatcher(name, op, _unquote(raw))


def _matchers(route: Mapping[str, Any]) -> list[LabelMatcher]:
    out = [parse_matcher(str(m)) for m in route.get("matchers") or []]
    out += [LabelMatcher(str(k), "=", str(v)) for k, v in (route.get("match") or {}).items()]
    out += [LabelMatcher(str(k), "=~", str(v)) for k, v in (route.get("match_re") or {}).items()]
    return out


def _walk(route: Mapping[str, Any], labels: Mapping[str, str], receiver: str) -> list[str] | None:
    if not all(m.matches(labels) for m in _matchers(route)):
        return None
    own = str(route.get("receiver") or receiver)
    found: list[str] = []
    for child in route.get("routes") or []:
        got = _walk(child, labels, own)
        if got is not None:
            found += got
            if not child.get("continue", False):
                break
    return found or [own]


def receivers(config: Mapping[str, Any], labels: Mapping[str, str]) -> list[str]:
    """The receivers an alert with `labels` is routed to, in route order, each once. The top-level route
    matches every alert."""
    root = dict(config.get("route") or {})
    root.pop("matchers", None)
    got = _walk(root, labels, str(root.get("receiver", ""))) or []
    return list(dict.fromkeys(got))
