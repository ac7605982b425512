"""`trainguard drill`'s command line: usage errors are refused before anything is touched."""

from __future__ import annotations

import pytest

from trainguard.cli import main


def test_a_malformed_monitor_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drill", "--monitor", "llama", "--scenario", "nan", "--alertmanager", "http://am"]) == 2
    assert "NAMESPACE/NAME" in capsys.readouterr().err


def test_without_alertmanager_only_the_plan_can_be_shown(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRAINGUARD_ALERTMANAGER", raising=False)
    assert main(["drill", "--monitor", "ml/llama", "--scenario", "nan"]) == 2
    assert "--alertmanager" in capsys.readouterr().err


def test_an_unknown_scenario_is_refused_by_the_parser() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["drill", "--monitor", "ml/llama", "--scenario", "meteor"])
    assert exc.value.code == 2


def test_a_bad_duration_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["drill", "--monitor", "ml/llama", "--scenario", "nan", "--alertmanager", "http://am",
              "--target", "soon", "--kubeconfig", "/nonexistent"])  # fmt: skip
    assert exc.value.code == 2
    assert "--target" in capsys.readouterr().err
