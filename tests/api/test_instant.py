"""`instant`: the one reader of time flags (`trainguard report --at`, `trainguard review --until`)."""

from __future__ import annotations

import pytest

from trainguard.api.common import instant


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1767225600", 1767225600.0),
        ("1767225600.5", 1767225600.5),
        ("2026-01-01T00:00:00Z", 1767225600.0),
        ("2026-01-01T01:00:00+01:00", 1767225600.0),
        ("2026-01-01T00:00:00", 1767225600.0),  # naive: UTC, not the machine's zone
    ],
)
def test_unix_seconds_and_rfc3339_read_alike(text: str, seconds: float) -> None:
    assert instant(text) == seconds


def test_anything_else_names_both_forms() -> None:
    with pytest.raises(ValueError, match=r"unix seconds or an RFC 3339 time, got 'yesterday'"):
        instant("yesterday")
