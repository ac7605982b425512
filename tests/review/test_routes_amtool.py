"""The receivers the review counts alerts under are Alertmanager's: the review's route walk, on the
alertmanager.yml it renders from `-f` (as `trainguard render --format prometheus` does), against the
real `amtool config routes test` on the same file, for alerts of every kind the routes tell apart."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import MONITOR, POLICY, merged
from trainguard.catalog.severity import MAPPED, grade_labels
from trainguard.render import dump_yaml
from trainguard.review.command import read_monitors
from trainguard.review.routes import parse_matcher, receivers

pytestmark = pytest.mark.tools

JOB = {"namespace": "ml", "training_job": "llama-pretrain"}
OTHER = {"namespace": "vision", "training_job": "vit-huge"}
WINDOW = {"name": "psu", "start": "2026-12-01T22:00:00Z", "end": "2026-12-02T03:30:00Z",
          "nodes": ["gpu-3", "gpu.4"]}  # fmt: skip
QUIET = {"enabled": True, "timezone": "Europe/Berlin", "start": "22:00", "end": "07:00"}

ALERTS: list[dict[str, str]] = [
    JOB | {"alertname": "TrainingJobStalled", **grade_labels("P0")},
    JOB | {"alertname": "GPUNodeDown", **grade_labels("P0"), "node": "gpu-3"},
    JOB | {"alertname": "GPUThermalThrottling", **grade_labels("P1"), "node": "gpu-1", "gpu": "0"},
    JOB | {"alertname": "GPUMemoryCritical", **grade_labels("P1"), "node": "gpu.4"},
    JOB | {"alertname": "GPUMemoryCritical", **grade_labels("P1"), "node": "gpuX4"},
    JOB | {"alertname": "DataLoaderSlow", **grade_labels("P2"), "pod": "llama-pretrain-0"},
    JOB | {"alertname": "GPUMemoryHigh", **grade_labels("P3")},
    JOB | {"alertname": "TrainguardMorningReport", "severity": "none", "night": "2026-12-01T07:00"},
    OTHER | {"alertname": "TrainingJobStalled", **grade_labels("P0", MAPPED)},
    OTHER | {"alertname": "NetworkPacketLoss", **grade_labels("P2"), "node": "gpu-3"},
    OTHER
    | {"alertname": "GPUNodeDown", **grade_labels("P2"), "node": "gpu-1"},  # allowlisted: pages at night
    OTHER | {"alertname": "TrainguardMorningReport", "severity": "none", "night": "2026-12-01T07:00"},
    {"namespace": "ml", "training_job": "unknown", "alertname": "GPUNodeDown", **grade_labels("P0")},
    {"alertname": "Watchdog", "severity": "none"},
]


def _monitor_file(tmp_path: Path) -> Path:
    other_monitor = merged(MONITOR, **{"metadata.name": "vit-huge", "metadata.namespace": "vision"})
    other_policy = merged(
        POLICY,
        **{"metadata.namespace": "vision", "spec.quietHours": QUIET, "spec.maintenanceWindows": [WINDOW]},
    )
    docs = [MONITOR, merged(POLICY, **{"spec.maintenanceWindows": [WINDOW]}), other_monitor, other_policy]
    path = tmp_path / "monitors.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def _amtool_receivers(amtool: str, config: Path, labels: dict[str, str]) -> list[str]:
    result = subprocess.run(
        [amtool, "config", "routes", "test", f"--config.file={config}", *(f"{k}={v}" for k, v in labels.items())],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return list(dict.fromkeys(result.stdout.strip().split(",")))


def test_the_route_walk_agrees_with_amtool(amtool: str, tmp_path: Path) -> None:
    args = argparse.Namespace(file=[str(_monitor_file(tmp_path))], alertmanager_config=None)
    monitors = read_monitors(args)
    config = monitors.config
    assert config is not None
    assert monitors.intervals == {("ml", "llama-pretrain"): 15.0, ("vision", "vit-huge"): 15.0}
    path = tmp_path / "alertmanager.yml"
    path.write_text(dump_yaml(config))
    seen = set()
    for labels in ALERTS:
        expected = _amtool_receivers(amtool, path, labels)
        assert receivers(config, labels) == expected, labels
        seen.add(tuple(expected))
    # the cases do tell receivers apart: paging, IM only, e-mail and tickets, the night, the dashboard
    assert ("ml/default/oncall-phone", "ml/default/im+resolved") in seen
    assert ("trainguard-dashboard",) in seen
    assert ("vision/default/email", "vision/default/ticket", "vision/default/oncall-phone") in seen  # night
    assert ("vision/default/im", "vision/default/email") in seen  # the morning report
    assert len(seen) >= 5


def test_the_walk_reads_the_file_form_too(amtool: str, tmp_path: Path) -> None:
    """--alertmanager-config: the same answers from the YAML file read back."""
    args = argparse.Namespace(file=[str(_monitor_file(tmp_path))], alertmanager_config=None)
    path = tmp_path / "alertmanager.yml"
    path.write_text(dump_yaml(read_monitors(args).config))
    read = read_monitors(argparse.Namespace(file=[], alertmanager_config=str(path)))
    assert read.intervals == {} and read.rules is None
    from_file = read.config
    assert from_file is not None
    for labels in ALERTS:
        assert receivers(from_file, labels) == _amtool_receivers(amtool, path, labels)


def test_matcher_values_are_read_as_alertmanager_reads_them() -> None:
    assert parse_matcher('node=~"gpu\\.4|gpu-3"').matches({"node": "gpu.4"})
    assert not parse_matcher('node=~"gpu\\.4|gpu-3"').matches({"node": "gpuX4"})
    assert not parse_matcher('node=~"gpu"').matches({"node": "gpu-3"})  # anchored
    assert parse_matcher('node!="a"').matches({})
    assert parse_matcher('summary="say \\"hi\\""').value == 'say "hi"'
    with pytest.raises(ValueError, match="not a label matcher"):
        parse_matcher("severity")
