"""The operator's escalation pass against a real Alertmanager with the rendered configuration: an
unacknowledged P1 past the delay gets one P0 copy; once acknowledged (a silence), the copy is resolved."""

from __future__ import annotations

import datetime as dt
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MONITOR, POLICY
from tests.kube.fakes import FakeKube
from tests.processes import alertmanager, http_json
from tests.render.amconfig import write_config
from trainguard.remediation.passes import EscalationPass

pytestmark = pytest.mark.tools


def copies(url: str) -> list[dict[str, Any]]:
    alerts = http_json(f"{url}/api/v2/alerts?filter=escalated_from%3D%22P1%22")
    return [a for a in alerts if a["status"]["state"] != "resolved"]


def test_an_unacknowledged_p1_is_escalated_once_and_its_ack_resolves_the_copy(tmp_path: Path) -> None:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip("Alertmanager is not installed")
    labels = {"alertname": "GPUThermalThrottling", "severity": "P1", "namespace": "ml",
              "training_job": "llama-pretrain", "pod": "llama-0", "node": "gpu-node-1", "gpu": "3"}  # fmt: skip
    started = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    with alertmanager(binary, write_config(tmp_path), tmp_path) as url:
        http_json(f"{url}/api/v2/alerts", [{"labels": labels, "startsAt": started}])
        escalation = EscalationPass(FakeKube(MONITOR, POLICY), leader=lambda: True, alertmanager_url=url)
        assert escalation.run() == 1, "15 minutes unacknowledged: escalated"
        got = copies(url)
        assert [a["labels"]["severity"] for a in got] == ["P0"] and got[0]["labels"]["gpu"] == "3"
        assert escalation.run() == 0, "one copy, not one per pass"
        now = dt.datetime.now(dt.UTC)
        http_json(f"{url}/api/v2/silences", {
            "matchers": [{"name": k, "value": labels[k], "isRegex": False} for k in ("alertname", "namespace", "training_job")],
            "startsAt": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "endsAt": (now + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "createdBy": "oncall", "comment": "ack",
        })  # fmt: skip
        time.sleep(0.5)
        escalation.run()
        deadline = time.monotonic() + 5
        while copies(url) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert copies(url) == [], "acknowledged: the copy is resolved"
