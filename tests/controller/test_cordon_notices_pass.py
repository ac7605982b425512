"""The leader's pass announces the nodes its remediations cordoned, on a real Alertmanager with the
rendered configuration, and stops once the node is returned (the notice then ends at its endsAt)."""

from __future__ import annotations

import copy
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MONITOR
from tests.processes import alertmanager, http_json
from tests.remediation.test_executor import Clock, FakeCluster
from tests.remediation.test_notices import record
from tests.render.amconfig import write_config
from trainguard.controller.response import Responder
from trainguard.remediation.cluster import CORDONED_AT
from trainguard.remediation.notices import NODE_CORDONED

pytestmark = pytest.mark.tools


class FakeKube:
    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.records = records

    def list_monitors(self, namespace: str | None = None) -> list[dict[str, Any]]:
        body = copy.deepcopy(MONITOR)
        body["status"] = {"remediations": self.records}
        return [body]


def test_a_cordoned_node_is_announced_on_each_pass_and_no_longer_once_returned(tmp_path: Path) -> None:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip("Alertmanager is not installed")
    clock = Clock()
    cluster = FakeCluster(clock, [])
    cluster.nodes["gpu-a"]["annotations"][CORDONED_AT] = str(clock() - 30)
    with alertmanager(binary, write_config(tmp_path), tmp_path) as url:
        responder = Responder(
            FakeKube([record("r1", "gpu-a")]),  # type: ignore[arg-type]
            cluster,
            key=lambda: None,
            leader=lambda: True,
            lock=lambda ns, n: threading.Lock(),
            alertmanager_url=url,
        )
        assert responder.cordon_notices() == 1
        assert responder.cordon_notices() == 1, "refreshed on every pass"
        active = http_json(f"{url}/api/v2/alerts?filter=alertname%3D%22{NODE_CORDONED}%22")
        assert [(a["labels"]["node"], a["labels"]["training_job"]) for a in active] == [
            ("gpu-a", MONITOR["metadata"]["name"])
        ]
        del cluster.nodes["gpu-a"]["annotations"][CORDONED_AT]  # trainguard uncordon
        assert responder.cordon_notices() == 0
        standby = Responder(FakeKube([record("r1", "gpu-a")]), cluster, key=lambda: None,  # type: ignore[arg-type]
                            leader=lambda: False, lock=lambda ns, n: threading.Lock(), alertmanager_url=url)  # fmt: skip
        cluster.nodes["gpu-a"]["annotations"][CORDONED_AT] = str(clock())
        assert standby.cordon_notices() == 0, "only the leader posts"
