"""A GPU slow, not dead, replaced at the job's next checkpoint: GPUClocksThrottled (a P1) posted to the
running operator's authenticated receiver the way Alertmanager posts it, on the local control plane.
Each pod's injected exporter and examples/train_tiny.py run as local processes from the pod's own spec
(e2e/podprocesses.py). The GPU's clocks are held down by the exporter's `thermal` fault (hardware and
software thermal slowdown on a busy GPU), which the sidecar records for the operator to confirm.

The record (slowNode, ReplaceAtCheckpoint by default) confirms the claim with the node's sidecar, waits,
asking nothing, for the trainers' own next periodic checkpoint, then cordons and taints the node and
restarts the gang away from it, onto the warm spare. The new trainers resume from the checkpoint every
rank has (train_tiny.py's first step is that step + 1): what was done up to it is not lost.

No Prometheus or Alertmanager here: the alert's rule is the catalogue's and promtool's; this is the
operator's side."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.cluster import Cluster
from e2e.pipeline import JOB, SELECTOR, exporter_step, http_text, inject
from e2e.podprocesses import PodProcesses, PodRun
from e2e.receiver import finished, monitor_token, post
from e2e.test_ecc_isolation import rfc3339, sbe_payload, start
from tests.processes import wait_for
from trainguard.catalog.kubernetes import CORDONED_BY, FAULTY_TAINT
from trainguard.remediation import tokens

pytestmark = pytest.mark.e2e
THROTTLED = "GPUClocksThrottled"
STEPS = ["ConfirmFault", "AwaitCheckpoint", "Cordon", "Taint", "RestartGang", "ConfirmPlacement"]
GPU = 1


@pytest.fixture
def trainers(operator: Cluster, ns: str, tmp_path: Path, spare: str) -> Iterator[PodProcesses]:
    start(operator, ns, {"emergencyCheckpointTimeout": "30s", "slowNodeCheckpointWait": "60s"})
    with PodProcesses(operator.api, ns, SELECTOR, tmp_path, fastpath=False) as pods:
        wait_for("2 trainers past their first full checkpoint",
                 lambda: len(r := pods.running()) == 2 and all(exporter_step(x) >= 120 for x in r),
                 timeout=120)  # fmt: skip
        yield pods


def throttled(run: PodRun) -> bool:
    """The sidecar's metrics show GPU `GPU` held down: the render that shows it also recorded it for
    GET /v1/hardware (the detector runs before the exposition is made)."""
    pattern = re.compile(rf'^DCGM_FI_DEV_CLOCK_THROTTLE_REASONS\{{[^}}]*gpu="{GPU}"[^}}]*\}} (\S+)$')
    for line in http_text(f"{run.url}/metrics").splitlines():
        if (m := pattern.match(line)) and int(float(m.group(1))) & 0x40:
            return True
    return False


def test_a_throttled_gpu_is_replaced_at_the_next_checkpoint_and_no_work_before_it_is_lost(
    operator: Cluster, ns: str, clean_nodes: None, spare: str, trainers: PodProcesses
) -> None:
    slow, other = sorted(trainers.running(), key=lambda r: r.rank)
    old = {slow.name, other.name}
    inject(slow, "thermal", GPU)
    wait_for("the sidecar sees its GPU throttled", lambda: throttled(slow), timeout=30)

    token = monitor_token(operator, tokens.ALERTS, ns, JOB)
    payload = sbe_payload(
        ns, slow.node, rfc3339(time.time() - 5), gpu=str(GPU), pod=slow.name, reason="hw_thermal"
    )
    for alert in payload["alerts"]:
        alert["labels"]["alertname"] = THROTTLED
    payload["commonLabels"]["alertname"] = THROTTLED
    t0 = time.monotonic()
    status, answer = post(operator, "/v1/alerts", payload, token)
    assert status == 200 and answer["accepted"] == 1, answer
    done = finished(operator, ns, "the slow node replaced", timeout=90)
    elapsed = time.monotonic() - t0
    assert done["phase"] == "Succeeded", json.dumps(done, indent=1)
    assert (done["alert"], done["class"], done["node"]) == (THROTTLED, "slowNode", slow.node)
    assert [s["kind"] for s in done["steps"]] == STEPS, done
    confirm, wait, cordon, _, restart, placed = done["steps"]
    assert (
        confirm["detail"]
        == f"confirmed by the sidecar of {slow.name} on {slow.node}: it saw {THROTTLED} on GPU {GPU}"
    )
    found = re.match(r"checkpoint step (\d+) on every rank", wait["detail"])
    assert found, wait
    awaited = int(found.group(1))
    assert awaited > wait["progress"]["pastStep"], "a checkpoint saved after the wait began"
    assert cordon["detail"] == "cordoned", cordon
    pointer = int(re.search(r"resume-from step (\d+)", restart["detail"]).group(1))  # type: ignore[union-attr]
    assert pointer >= awaited, (pointer, awaited)

    n = operator.core.read_node(slow.node)
    assert n.spec.unschedulable is True and n.metadata.annotations[CORDONED_BY] == done["id"]
    assert {(t.key, t.value, t.effect) for t in n.spec.taints or []} >= {
        (FAULTY_TAINT, THROTTLED, "NoSchedule")
    }

    def resumed() -> list[str]:
        runs = [r for r in trainers.running() if r.name not in old]
        lines = [ln for r in runs for ln in r.trainer_log().splitlines() if ln.startswith("resuming after")]
        return lines if len(runs) == 2 and len(lines) == 2 else []

    lines = wait_for("both new trainers resumed", resumed, timeout=60)
    # train_tiny.py starts at the resumed step + 1 with the checkpoint's weights: nothing done up to the
    # checkpoint the move waited for is redone from scratch
    steps = {float(ln.split("step ")[1].split()[0]) for ln in lines}
    assert steps == {pointer}, (steps, pointer, lines)
    assert all("weights loaded" in ln for ln in lines), lines
    new = [r for r in trainers.running() if r.name not in old]
    assert slow.node not in {r.node for r in new} and spare in {r.node for r in new}, placed
    wait_for("training going on past the checkpoint", lambda: min(exporter_step(r) for r in trainers.running())
             > pointer + 5, timeout=30)  # fmt: skip
    print(f"\nslow GPU on {slow.node}: replaced in {elapsed:.1f}s, waited for checkpoint {awaited} "
          f"({wait['detail']}); both ranks resumed from step {pointer}")  # fmt: skip
