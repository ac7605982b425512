"""The leader's pass announces the nodes its remediations cordoned, on a real Alertmanager with the
rendered configuration, and stops once the node is returned (the notice then ends at its endsAt)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.clock import Clock
from tests.conftest import MONITOR, merged
from tests.kube.fakes import FakeKube
from tests.processes import alertmanager, http_json
from tests.remediation.fakes import FakeCluster
from tests.remediation.test_notices import record
from tests.render.amconfig import write_config
from trainguard.catalog.alerts import NODE_CORDONED
from trainguard.catalog.kubernetes import CORDONED_AT
from trainguard.remediation.passes import CordonNoticePass

pytestmark = pytest.mark.tools


def reads(*records: dict[str, Any]) -> FakeKube:
    """The watch caches, with the test monitor whose status holds `records`."""
    return FakeKube(merged(MONITOR, status={"remediations": list(records)}))


def test_a_cordoned_node_is_announced_on_each_pass_and_no_longer_once_returned(tmp_path: Path) -> None:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip("Alertmanager is not installed")
    clock = Clock()
    cluster = FakeCluster(clock, [])
    cluster.nodes["gpu-a"]["annotations"][CORDONED_AT] = str(clock() - 30)
    with alertmanager(binary, write_config(tmp_path), tmp_path) as url:
        responder = CordonNoticePass(
            reads(record("r1", "gpu-a")), cluster, leader=lambda: True, alertmanager_url=url
        )
        assert responder.run() == 1
        assert responder.run() == 1, "refreshed on every pass"
        active = http_json(f"{url}/api/v2/alerts?filter=alertname%3D%22{NODE_CORDONED}%22")
        assert [(a["labels"]["node"], a["labels"]["training_job"]) for a in active] == [
            ("gpu-a", MONITOR["metadata"]["name"])
        ]
        del cluster.nodes["gpu-a"]["annotations"][CORDONED_AT]  # trainguard uncordon
        assert responder.run() == 0
        standby = CordonNoticePass(
            reads(record("r1", "gpu-a")), cluster, leader=lambda: False, alertmanager_url=url
        )
        cluster.nodes["gpu-a"]["annotations"][CORDONED_AT] = str(clock())
        assert standby.run() == 0, "only the leader posts"
