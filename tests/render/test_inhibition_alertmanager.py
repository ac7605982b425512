"""Inhibition on a real Alertmanager process: post alerts to its API and read back which ones the
rendered rules inhibit."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import monitor, policy
from tests.processes import alertmanager, http_json
from tests.render.amconfig import write_config
from trainguard.catalog.severity import GRADE, STYLES, grade_labels

pytestmark = pytest.mark.tools

A = {"namespace": "ml", "training_job": "llama-pretrain"}
B = {"namespace": "ml", "training_job": "bert-finetune"}


def alert(name: str, severity: str, style: str = GRADE, **labels: str) -> dict[str, object]:
    labels = {"alertname": name, **grade_labels(severity, style), **labels}
    return {"labels": labels, "annotations": {"summary": name}}


def key(a: dict[str, object]) -> tuple[str, ...]:
    labels = a["labels"]
    assert isinstance(labels, dict)
    return tuple(str(labels.get(k, "")) for k in ("alertname", "training_job", "node", "gpu"))


@pytest.mark.parametrize("style", STYLES)
def test_inhibition_on_a_real_alertmanager(am_binary: str, tmp_path: Path, style: str) -> None:
    """The same inhibitions whatever the severity style: they match the grade in `priority`."""
    pol = policy()
    pairs = [(monitor(), pol), (monitor(**{"metadata.name": "bert-finetune"}), pol)]
    config = write_config(tmp_path, pairs)
    alerts = [
        # job A has a P0: its P1-P3 are silenced, job B's are not
        alert("TrainingLossNonFinite", "P0", style, **A, pod="a-0", node="n1"),
        alert("DataLoaderSlow", "P2", style, **A, pod="a-0", node="n1"),
        alert("DataLoaderSlow", "P2", style, **B, pod="b-0", node="n9"),
        # node n2 is down (job A): every alert on n2 is silenced, whichever job raised it
        alert("GPUNodeDown", "P0", style, **A, node="n2"),
        alert("DiskWriteLatencyHigh", "P2", style, **B, pod="b-1", node="n2", device="nvme0n1"),
        alert("DiskWriteLatencyHigh", "P2", style, **B, pod="b-2", node="n3", device="nvme0n1"),
        # an alert without a node is not "on" the down node
        alert("TrainingThroughputDeviation", "P2", style, **B),
        # a rack event (job B) silences that job's per-GPU heat alerts
        alert("RackThermalEvent", "P1", style, **B, rack="rack-a"),
        alert("GPUThermalThrottling", "P1", style, **B, pod="b-4", node="n6", gpu="0"),
        alert("GPUMemoryTemperatureHigh", "P1", style, **B, pod="b-4", node="n6", gpu="1"),
        # a stronger alert of the same signal silences the milder one on the same GPU only
        alert("GPUMemoryCritical", "P1", style, **B, pod="b-1", node="n4", gpu="0"),
        alert("GPUMemoryPressure", "P2", style, **B, pod="b-1", node="n4", gpu="0"),
        alert("GPUMemoryPressure", "P2", style, **B, pod="b-1", node="n4", gpu="1"),
        # the operator's escalated copy of a P1 (job B) is a P0 but must not mute the job's other alerts
        alert("GPUThermalThrottling", "P0", style, **B, pod="b-3", node="n5", gpu="2", escalated_from="P1"),
        alert("DataLoaderSlow", "P2", style, **B, pod="b-3", node="n5"),
    ]
    expected_inhibited = {
        ("DataLoaderSlow", "llama-pretrain", "n1", ""),
        ("DiskWriteLatencyHigh", "bert-finetune", "n2", ""),
        ("GPUMemoryPressure", "bert-finetune", "n4", "0"),
        ("GPUThermalThrottling", "bert-finetune", "n6", "0"),
        ("GPUMemoryTemperatureHigh", "bert-finetune", "n6", "1"),
        # the escalated copy of a heat alert is heat too: the rack event is the page
        ("GPUThermalThrottling", "bert-finetune", "n5", "2"),
    }
    with alertmanager(am_binary, config, tmp_path) as url:
        http_json(f"{url}/api/v2/alerts", alerts)
        deadline = time.monotonic() + 15
        while True:
            got = http_json(f"{url}/api/v2/alerts")
            inhibited = {key(a) for a in got if a["status"]["inhibitedBy"]}
            if (len(got) == len(alerts) and inhibited == expected_inhibited) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert len(got) == len(alerts)
    assert inhibited == expected_inhibited


def test_inhibition_switches_turn_rules_off(am_binary: str, tmp_path: Path) -> None:
    pol = policy(**{"spec.inhibition": {"nodeDown": False, "jobP0": False, "supersede": False}})
    config = write_config(tmp_path, [(monitor(), pol)])
    alerts = [
        alert("GPUNodeDown", "P0", **A, node="n2"),
        alert("DiskWriteLatencyHigh", "P2", **A, pod="a-1", node="n2", device="sda"),
    ]
    with alertmanager(am_binary, config, tmp_path) as url:
        http_json(f"{url}/api/v2/alerts", alerts)
        time.sleep(1.0)
        got = http_json(f"{url}/api/v2/alerts")
    assert len(got) == 2
    assert not any(a["status"]["inhibitedBy"] for a in got)
