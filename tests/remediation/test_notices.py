"""TrainguardNodeCordoned: a node a record cordoned, still cordoned, is announced (P2) until it is
returned; dry runs, failed cordons and returned nodes are not. A real Alertmanager accepts the notice."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.processes import alertmanager, http_json
from tests.render.amconfig import write_config
from trainguard.catalog.alerts import NODE_CORDONED
from trainguard.catalog.severity import grade_labels
from trainguard.remediation.escalation import parse_time
from trainguard.remediation.notices import HOLD_S, cordon_notices

NOW = 1_700_000_000.0


def record(rid: str, node: str, *, phase: str = "Succeeded", dry_run: bool = False, alert: str = "GPULost") -> dict[str, Any]:  # fmt: skip
    return {
        "id": rid, "alert": alert, "node": node, "dryRun": dry_run, "phase": "Succeeded",
        "steps": [{"kind": "RequestCheckpoint", "phase": "Succeeded", "params": {}},
                  {"kind": "Cordon", "phase": phase, "params": {"node": node, "reason": alert}}],
    }  # fmt: skip


def test_a_node_still_cordoned_is_announced_as_p2_with_the_uncordon_command() -> None:
    (notice,) = cordon_notices([("ml", "llama", [record("r1", "gpu-a")])], {"gpu-a": NOW - 60}, NOW)
    assert notice["labels"] == {"alertname": NODE_CORDONED, **grade_labels("P2"), "namespace": "ml",
                                "training_job": "llama", "node": "gpu-a", "remediation": "r1"}  # fmt: skip
    assert "trainguard uncordon gpu-a" in notice["annotations"]["summary"]
    assert parse_time(notice["startsAt"]) == pytest.approx(NOW - 60, abs=0.001)
    assert parse_time(notice["endsAt"]) == pytest.approx(NOW + HOLD_S, abs=0.001)


def test_returned_nodes_dry_runs_and_failed_cordons_are_not_announced() -> None:
    records = [
        record("r1", "gpu-a"),
        record("r2", "gpu-b", dry_run=True),
        record("r3", "gpu-c", phase="Failed"),
    ]
    cordoned = {"gpu-b": NOW, "gpu-c": NOW}  # gpu-a was uncordoned
    assert cordon_notices([("ml", "llama", records)], cordoned, NOW) == []


def test_one_notice_per_job_and_node_named_after_the_newest_record() -> None:
    records = [record("old", "gpu-a", alert="GPUCriticalXid"), record("new", "gpu-a", alert="GPUNodeDown")]
    notices = cordon_notices(
        [("ml", "llama", records), ("ml", "other", [record("o", "gpu-a")])], {"gpu-a": NOW}, NOW
    )
    assert [(n["labels"]["training_job"], n["labels"]["remediation"]) for n in notices] == [
        ("llama", "new"), ("other", "o")]  # fmt: skip
    assert "GPUNodeDown" in notices[0]["annotations"]["summary"]


def test_the_notice_says_whether_the_job_was_moved_off_the_node_or_left_on_it() -> None:
    moved = record("r1", "gpu-a") | {"class": "nodeFault"}
    isolated = record("r2", "gpu-b", alert="GPUSingleBitECCErrorsHigh") | {"class": "eccDegraded"}
    notices = cordon_notices([("ml", "llama", [moved, isolated])], {"gpu-a": NOW, "gpu-b": NOW}, NOW)
    text = {n["labels"]["node"]: n["annotations"]["description"] for n in notices}
    assert "the job was moved off it" in text["gpu-a"]
    assert "the job was left running on it until it next restarts" in text["gpu-b"]


@pytest.mark.tools
def test_a_real_alertmanager_accepts_the_notice_as_active(tmp_path: Path) -> None:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip("Alertmanager is not installed (.ci/run installs it)")
    config = write_config(tmp_path)
    with alertmanager(binary, config, tmp_path) as url:
        now = time.time()
        notices = cordon_notices([("ml", "llama", [record("r1", "gpu-a")])], {"gpu-a": now - 5}, now)
        http_json(f"{url}/api/v2/alerts", notices)
        active = http_json(f"{url}/api/v2/alerts?filter=alertname%3D%22{NODE_CORDONED}%22")
        assert [(a["labels"]["node"], a["status"]["state"]) for a in active] == [("gpu-a", "active")]
