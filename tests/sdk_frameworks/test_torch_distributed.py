"""torch.distributed with 2 ranks on CPU (gloo, torchrun), one sidecar per rank's pod: the all-reduce
share of step time is measured around real collectives, and a rank slowed on purpose is the one that
does not wait in them while the other does."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.sdk_frameworks.conftest import REPO, Sidecar, require, sidecar_process
from trainguard.remediation.slow_node import straggler_evidence

require("torch.distributed.run")

WORKER = Path(__file__).with_name("ddp_worker.py")
STEPS = 30


@pytest.fixture
def two_pods() -> Iterator[list[Sidecar]]:
    with ExitStack() as stack:
        pods = []
        for _ in range(2):
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tgfw")))
            pods.append(stack.enter_context(sidecar_process(tmp)))
        yield pods


def torchrun(pods: list[Sidecar], **env: str) -> None:
    env = os.environ | {"TG_ENDPOINTS": ",".join(p.endpoint for p in pods), "TG_SLOW_RANK": "1",
                        "TG_SLOW_S": "0.1", "TG_STEPS": str(STEPS), "OMP_NUM_THREADS": "1",
                        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])} | env  # fmt: skip
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          str(WORKER)], check=False, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


def slower_than(pod: Sidecar, seconds: str) -> tuple[float, float]:
    """(collectives that took longer than `seconds`, all collectives) from the pod's histogram."""
    metrics = pod.metrics()
    count = sum(v for _, v in metrics["trainguard_train_collective_seconds_count"])
    within = sum(
        v for lbl, v in metrics["trainguard_train_collective_seconds_bucket"] if lbl["le"] == seconds
    )
    return count - within, count


def test_two_ranks_report_through_their_sidecars_and_the_slow_rank_is_the_straggler(
    two_pods: list[Sidecar],
) -> None:
    torchrun(two_pods)
    fast, slow = two_pods
    for pod in two_pods:
        assert pod.settled("trainguard_train_step", lambda v: v == STEPS) == STEPS
        loss = pod.value("trainguard_train_loss")
        assert loss is not None and 0 < loss < 10
    fast_share = fast.value("trainguard_train_allreduce_time_ratio")
    slow_share = slow.value("trainguard_train_allreduce_time_ratio")
    assert fast_share is not None and slow_share is not None
    assert fast_share > 0.5, f"rank 0 waits in all-reduce for the straggler: {fast_share:.2f} of its step"
    # the share is the last step's alone: one collective of the straggler's that stalls on a loaded
    # machine can lift it (0.31 seen in CI), so its own share is held against its peer's, and the
    # operator's decision over both views must name it
    assert slow_share < fast_share, f"the straggler waits less than its peer: {slow_share:.2f} of its step"
    views = {"fast": fast.control_view(), "slow": slow.control_view()}
    assert straggler_evidence(views, ["slow"])[0] == "slow", views
    assert straggler_evidence(views, ["fast"])[0] == "", views
    # each all-reduce is in the histogram: 3 gradients a step; the fast rank's first one each step
    # waits about 0.1 s for the straggler
    waited, total = slower_than(fast, "0.05")
    assert total == 3 * STEPS and waited >= STEPS - 2, (waited, total)
    # the straggler seldom waits: a few of its collectives can stall on a loaded machine (3 of 90 seen in
    # CI at load 11 on 2 cores), far from the fast rank's one a step
    waited, total = slower_than(slow, "0.05")
    assert total == 3 * STEPS and waited <= STEPS // 5, (waited, total)


def test_ddp_gradient_all_reduces_are_timed_by_the_comm_hook(two_pods: list[Sidecar]) -> None:
    torchrun(two_pods, TG_DDP="1")
    fast, slow = two_pods
    for pod in two_pods:
        assert pod.settled("trainguard_train_step", lambda v: v == STEPS) == STEPS
    waited, total = slower_than(fast, "0.05")
    assert total >= STEPS and waited >= STEPS - 2, f"one bucket or more a step: {waited} of {total}"
    waited, total = slower_than(slow, "0.05")  # seldom, as above: a loaded machine stalls a few
    assert total >= STEPS and waited <= STEPS // 5, (waited, total)
