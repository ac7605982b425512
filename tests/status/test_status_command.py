"""`trainguard status` end to end through the real Kubernetes client, against stand-in apiservers: the
context it reads (--context), its data forms (-o json, -o yaml) and its colour (a terminal only, never
under NO_COLOR)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.kube.apiserver import apiserver, kubeconfig
from tests.status.test_status import monitor
from trainguard.cli import main

MONITORS = "/apis/trainguard.io/v1alpha1/namespaces/ml/trainingjobmonitors"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Two clusters, each with one monitor named after it; `one` is the current context."""
    for var in ("TRAINGUARD_PROMETHEUS_URL", "TRAINGUARD_ALERTMANAGER", "KUBECONFIG", "NO_COLOR", "FORCE_COLOR",
                "TTY_COMPATIBLE", "TTY_INTERACTIVE"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "120")
    lists = {name: {MONITORS: {"kind": "TrainingJobMonitorList", "items": [monitor(name=f"job-{name}")]}}
             for name in ("one", "two")}  # fmt: skip
    with apiserver(lists["one"]) as one, apiserver(lists["two"]) as two:
        yield kubeconfig(tmp_path / "config", {"one": one, "two": two}, current="one")


def status(config: Path, *flags: str) -> list[str]:
    return ["status", "-n", "ml", "--kubeconfig", str(config), *flags]


def test_context_selects_the_cluster_and_json_is_parseable(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(status(config, "-o", "json")) == 0
    out, err = capsys.readouterr()
    assert [j["name"] for j in json.loads(out)["jobs"]] == ["job-one"]
    assert "no --prometheus or --alertmanager" in err, "what is not shown goes to stderr, not into the data"
    assert main(status(config, "--context", "two", "-o", "json")) == 0
    (job,) = json.loads(capsys.readouterr().out)["jobs"]
    assert (job["namespace"], job["name"], job["health"]) == ("ml", "job-two", "Healthy")
    assert job["throughput"] == {"tokensPerSecondPerGPU": None, "baseline": None, "ratio": None}
    assert job["timeLost"] == {"seconds": 0.0, "lowerBound": False}


def test_yaml_is_parseable_and_the_same_data(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(status(config, "--context", "two", "-o", "yaml")) == 0
    as_yaml = yaml.safe_load(capsys.readouterr().out)
    assert main(status(config, "--context", "two", "-o", "json")) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert as_yaml["jobs"] == as_json["jobs"] and as_yaml["jobs"][0]["name"] == "job-two"


def test_a_terminal_gets_colour_unless_no_color_is_set(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def screen() -> str:
        term = Terminal()
        monkeypatch.setattr("sys.stdout", term)
        assert main(status(config)) == 0
        return term.getvalue()

    coloured = screen()
    assert "\x1b[32mHealthy" in coloured and "job-one" in coloured
    monkeypatch.setenv("NO_COLOR", "")  # empty: not set (no-color.org)
    assert "\x1b[" in screen()
    monkeypatch.setenv("NO_COLOR", "1")
    plain = screen()
    assert "\x1b" not in plain
    assert "ml/job-one  Healthy" in plain and "  alerts      none" in plain


def test_a_pipe_gets_the_plain_table_without_escapes(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(status(config)) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("JOB") and "\x1b" not in out
    assert out.splitlines()[1].split()[:2] == ["ml/job-one", "Healthy"]
