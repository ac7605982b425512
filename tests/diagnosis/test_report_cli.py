"""`trainguard report`: its usage errors, and --at in both forms."""

from __future__ import annotations

import pytest

from trainguard.args import EXIT_USAGE, when
from trainguard.cli import main


def test_needs_a_namespaced_monitor_and_a_prometheus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINGUARD_PROMETHEUS_URL", raising=False)
    for argv in (["report", "--monitor", "no-namespace"], ["report", "--monitor", "ml/job"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == EXIT_USAGE


def test_at_takes_unix_seconds_or_rfc3339() -> None:
    assert when("1760000000") == 1760000000.0
    assert when("2025-10-09T08:53:20Z") == 1760000000.0
    with pytest.raises(SystemExit):
        when("yesterday")
