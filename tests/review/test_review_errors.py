"""`trainguard review`'s errors: a bad flag is a usage error (exit 2) that names the flag; a Prometheus
that does not answer is exit 1 with its URL and the reason, before any output is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.processes import free_port
from trainguard.cli import main

URL = "http://127.0.0.1:9"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--since", "14x"], "--since: '14x' is not a duration"),
        (["--since", "0d"], "--since must be longer than 0s"),
        (["--never-fired", "week"], "--never-fired: 'week' is not a duration"),
        (["--eval-interval", "15"], "--eval-interval: '15' is not a duration"),
        (["--until", "yesterday"], "--until takes unix seconds or an RFC 3339 time"),
        (["--co-firing", "50"], "--co-firing is a share between 0 and 1"),
        (["--short", "-0.1"], "--short is a share between 0 and 1"),
    ],
)
def test_a_bad_flag_is_a_usage_error_naming_it(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["review", "--prometheus", URL, *flags]) == 2
    out, err = capsys.readouterr()
    assert message in err and out == ""


def test_without_a_prometheus_url_it_says_how_to_give_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TRAINGUARD_PROMETHEUS_URL", raising=False)
    assert main(["review"]) == 2
    assert "--prometheus URL (or $TRAINGUARD_PROMETHEUS_URL)" in capsys.readouterr().err


def test_a_file_without_monitors_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert main(["review", "--prometheus", URL, "-f", str(tmp_path / "empty.yaml")]) == 2
    assert "no TrainingJobMonitor" in capsys.readouterr().err


def test_an_unreachable_prometheus_is_reported_with_its_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    assert main(["review", "--prometheus", url, "--out-dir", str(tmp_path / "out")]) == 1
    out, err = capsys.readouterr()
    assert f"trainguard: Prometheus at {url} could not be read:" in err
    assert "Connection refused" in err or "Max retries" in err
    assert out == "" and not (tmp_path / "out").exists()
