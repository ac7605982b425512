"""A matcher is built once and written in both outputs' forms with the same value."""

from __future__ import annotations

from trainguard.render.matchers import Matcher, eq, ne, one_of


def test_one_matcher_renders_to_both_forms() -> None:
    m = one_of("node", ["gpu-7.rack2", "gpu-8"])
    # the text form is a double-quoted string: the regex's backslash escaped (tests/render/
    # test_alertmanager_routes.py holds it to the real parsers, old and new)
    assert m.text() == r'node=~"gpu-7\\.rack2|gpu-8"'
    assert m.resource() == {"name": "node", "matchType": "=~", "value": r"gpu-7\.rack2|gpu-8"}


def test_only_re2_metacharacters_are_escaped() -> None:
    assert one_of("alertname", ["a+b(c)", "x_y-z"]).value == r"a\+b\(c\)|x_y-z"


def test_equality_and_negation() -> None:
    assert eq("severity", "P0") == Matcher("severity", "=", "P0")
    assert eq("severity", "P0").text() == 'severity="P0"'
    assert ne("alertname", "GPUNodeDown").resource()["matchType"] == "!="


def test_quotes_and_newlines_are_escaped_in_the_text_form() -> None:
    assert eq("reason", 'say "hi"\nthen \\ go').text() == r'reason="say \"hi\"\nthen \\ go"'
