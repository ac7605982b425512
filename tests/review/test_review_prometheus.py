"""`trainguard review` end to end, through the CLI, against a real Prometheus holding 14 days of ALERTS
history (backfilled with `promtool tsdb create-blocks-from openmetrics`, a sample per 15 s evaluation,
as the rule manager writes them) and with receivers from the monitors' rendered routes.

The history: a pair that always fires together (NetworkPacketLossHigh and NetworkPacketLoss), a
flapper (GPUThermalThrottling, half its episodes one evaluation long), an alert that fired only more
than 7 days ago (TrainingThroughputDrop), a P0 and a P2 that are neither, a pending-only alert
(GPUMemoryHigh), and every other catalogue rule (GPUNodeDown among them) never firing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import MONITOR, POLICY
from tests.processes import backfilled_prometheus
from trainguard.cli import main

pytestmark = pytest.mark.tools

STEP = 15
HOUR = 3600
DAY = 86400
END = int(time.time()) // 60 * 60 - 120
START = END - 14 * DAY
JOB = {"namespace": "ml", "training_job": "llama-pretrain"}


def _series(labels: dict[str, str], runs: list[tuple[int, int]]) -> list[str]:
    """ALERTS samples of one series: `runs` of (start, evaluations)."""
    text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return [f"ALERTS{{{text}}} 1 {start + STEP * i}" for start, n in runs for i in range(n)]


def history() -> str:
    firing = JOB | {"alertstate": "firing"}
    link = {"node": "gpu-1", "interface": "ib0", "pod": "llama-pretrain-0"}
    lines = ["# HELP ALERTS Replayed alert history.", "# TYPE ALERTS gauge"]
    # a pair: every episode of one overlaps the other (day 1 to 13, every 36 h)
    pair_days = [START + DAY + i * 36 * HOUR for i in range(8)]
    lines += _series(firing | link | {"alertname": "NetworkPacketLoss", "severity": "P2"},
                     [(t, 88) for t in pair_days])  # fmt: skip
    lines += _series(firing | link | {"alertname": "NetworkPacketLossHigh", "severity": "P1"},
                     [(t + 120, 80) for t in pair_days])  # fmt: skip
    # a flapper: 20 episodes, every other one a single evaluation
    flaps = [(START + 2 * HOUR + i * 16 * HOUR, 1 if i % 2 else 10) for i in range(20)]
    lines += _series(firing | {"alertname": "GPUThermalThrottling", "severity": "P1", "node": "gpu-2", "gpu": "3"},
                     flaps)  # fmt: skip
    # fired only more than 7 days ago
    old = [(START + 4 * HOUR + i * DAY, 120) for i in range(4)]
    lines += _series(firing | {"alertname": "TrainingThroughputDrop", "severity": "P1"}, old)
    # recent, neither flapping nor co-firing
    stalls = [(END - 6 * DAY + 8 * HOUR + i * DAY, 40) for i in range(3)]
    lines += _series(firing | {"alertname": "TrainingJobStalled", "severity": "P0"}, stalls)
    slow = [(END - 5 * DAY + 10 * HOUR + i * 12 * HOUR, 2) for i in range(6)]
    lines += _series(
        firing | {"alertname": "DataLoaderSlow", "severity": "P2", "pod": "llama-pretrain-1"}, slow
    )
    # pending only: not a firing
    lines += _series(JOB | {"alertstate": "pending", "alertname": "GPUMemoryHigh", "severity": "P3"},
                     [(END - DAY, 20)])  # fmt: skip
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("prometheus")
    with backfilled_prometheus(history(), workdir, "--storage.tsdb.retention.time=30d") as url:
        yield url


@pytest.fixture(scope="module")
def monitors(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("monitors") / "monitors.yaml"
    path.write_text(yaml.safe_dump_all([MONITOR, POLICY]))
    return path


@pytest.fixture(scope="module")
def review(
    prometheus: str, monitors: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("review")
    code = main(["review", "--since", "14d", "--until", str(END), "--prometheus", prometheus,
                 "-f", str(monitors), "--out-dir", str(out)])  # fmt: skip
    assert code == 0
    return json.loads((out / "review.json").read_text()), (out / "review.md").read_text()


def test_rules_that_never_fired_in_7_days(review: tuple[dict[str, Any], str]) -> None:
    data, markdown = review
    never = {n["alertname"]: n for n in data["never_fired"]}
    assert never["GPUNodeDown"] == {"alertname": "GPUNodeDown", "sources": ["rendered"], "last_fired": None}
    assert "InferenceLatencyHigh" not in never  # not rendered for a training job: it cannot fire
    assert "GPUMemoryHigh" in never  # pending only
    old = never["TrainingThroughputDrop"]["last_fired"]
    assert old is not None and old < data["window"]["end"]
    for fired in ("NetworkPacketLoss", "NetworkPacketLossHigh", "GPUThermalThrottling", "TrainingJobStalled",
                  "DataLoaderSlow"):  # fmt: skip
        assert fired not in never
    assert "| TrainingThroughputDrop | rendered | 20" in markdown
    assert "| GPUNodeDown | rendered | not in the history |" in markdown


def test_the_pair_that_fires_together(review: tuple[dict[str, Any], str]) -> None:
    data, markdown = review
    assert data["co_firing"] == [
        {"alerts": ["NetworkPacketLoss", "NetworkPacketLossHigh"], "share": 1.0, "episodes": [8, 8],
         "together": [8, 8], "stronger": "NetworkPacketLossHigh"}
    ]  # fmt: skip
    # the two are tiers of one signal in the catalogue: the review says the inhibition already merges them
    assert (
        "| NetworkPacketLoss + NetworkPacketLossHigh | 100% | 8/8 and 8/8 | "
        "tiers: NetworkPacketLossHigh supersedes the other |"
    ) in markdown


def test_the_flapper(review: tuple[dict[str, Any], str]) -> None:
    data, markdown = review
    assert data["flapping"] == [
        {"alertname": "GPUThermalThrottling", "share": 0.5, "short": 10, "resolved": 20}
    ]
    assert "| GPUThermalThrottling | 50% | 10/20 |" in markdown


def test_episodes_are_counted_from_the_raw_samples(review: tuple[dict[str, Any], str]) -> None:
    data, _ = review
    alerts = {a["alertname"]: a for a in data["alerts"]}
    assert {name: a["episodes"] for name, a in alerts.items()} == {
        "NetworkPacketLoss": 8, "NetworkPacketLossHigh": 8, "GPUThermalThrottling": 20,
        "TrainingThroughputDrop": 4, "TrainingJobStalled": 3, "DataLoaderSlow": 6,
    }  # fmt: skip
    assert alerts["TrainingJobStalled"]["firing_s"] == 3 * 40 * STEP
    assert data["window"]["eval_interval_s"] == 15.0


def test_most_frequent_alerts_by_receiver(review: tuple[dict[str, Any], str]) -> None:
    data, markdown = review
    rows = {
        r["receiver"]: [(a["alertname"], a["episodes"]) for a in r["alerts"]] for r in data["by_receiver"]
    }
    assert rows == {
        "ml/default/im": [("GPUThermalThrottling", 20), ("NetworkPacketLossHigh", 8), ("TrainingThroughputDrop", 4),
                          ("TrainingJobStalled", 3)],
        "ml/default/email": [("NetworkPacketLoss", 8), ("DataLoaderSlow", 6)],
        "ml/default/ticket": [("NetworkPacketLoss", 8), ("DataLoaderSlow", 6)],
        "ml/default/oncall-phone": [("TrainingJobStalled", 3)],
    }  # fmt: skip
    assert data["by_receiver"][0]["receiver"] == "ml/default/im"
    assert "| ml/default/oncall-phone | TrainingJobStalled | 3 |" in markdown


def test_markdown_to_stdout_by_default_and_progress_on_stderr(
    prometheus: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["review", "--since", "14d", "--until", str(END), "--prometheus", prometheus, "--top", "1",
                 "--chunk", "2d"])  # fmt: skip
    assert code == 0
    out, err = capsys.readouterr()
    assert out.startswith("# Rule review ")
    assert "No routing given" in out
    assert "| - | GPUThermalThrottling | 20 |" in out
    assert "| InferenceLatencyHigh | catalogue | not in the history |" in out  # without -f: the catalogue
    assert "read 7/7 chunks of ALERTS" in err


def test_o_yaml_prints_the_same_data_as_the_json_file(
    prometheus: str, monitors: Path, review: tuple[dict[str, Any], str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["review", "--since", "14d", "--until", str(END), "--prometheus", prometheus,
                 "-f", str(monitors), "-o", "yaml"])  # fmt: skip
    assert code == 0
    assert yaml.safe_load(capsys.readouterr().out) == review[0]


def test_an_explicit_evaluation_interval_wins_over_the_monitors(
    prometheus: str, monitors: Path, tmp_path: Path
) -> None:
    out = tmp_path / "review.json"
    # --json FILE is deprecated (-o json, --out-dir) and still works
    code = main(["review", "--until", str(END), "--prometheus", prometheus, "-f", str(monitors),
                 "--eval-interval", "1m", "--json", str(out)])  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    stalled = next(a for a in data["alerts"] if a["alertname"] == "TrainingJobStalled")
    assert stalled["firing_s"] == 3 * (39 * STEP + 60)  # each ends a minute after its last sample
