"""Across the seam: the operator's executor carries out the planner's NaN-loss plan (pause, pin the
newest checkpoint saved before the NaN; no launcher runs here, so no restart in place) against a real exporter in this process, through the real
remediation.sidecars.SidecarControl calls, while a real Reporter trains against that exporter on
its unix socket. Only the pod lookup is stood in for: the pod is this process."""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from tests.clock import Clock
from tests.conftest import monitor as make_monitor
from tests.exporter.running import Running, running_exporter
from tests.processes import wait_for
from tests.remediation.fakes import KEY, Store, sign
from trainguard.remediation.cluster import Cluster
from trainguard.remediation.executor import Executor, choose_checkpoint
from trainguard.remediation.model import ClusterState, Phase, Signal, Source, StepKind
from trainguard.remediation.ops import Sidecar
from trainguard.remediation.plan import plan
from trainguard.remediation.records import new_record
from trainguard.remediation.sidecars import SidecarControl
from trainguard.sdk import Reporter

TOKEN = "t0k3n"
MONITOR = make_monitor()


class ThisPod(Cluster):
    """The real sidecar control calls; the one pod of the selector is the exporter in this process."""

    def __init__(self, url: str) -> None:
        super().__init__(None, None, SidecarControl(timeout=2))  # type: ignore[arg-type]
        self.url = url

    def sidecars(self, namespace: str, label_selector: str, port: int) -> list[Sidecar]:
        return [Sidecar("llama-0", "gpu-node-1", self.url)]

    def gang_pods(self, namespace: str, selector: Any) -> list[dict[str, Any]]:
        return [{"metadata": {"name": "llama-0", "creationTimestamp": "2023-11-14T22:00:00Z"},
                 "spec": {"nodeName": "gpu-node-1"}, "status": {"phase": "Running", "podIP": "127.0.0.1"}}]  # fmt: skip


@contextlib.contextmanager
def training(clock: Clock) -> Iterator[tuple[Running, Reporter]]:
    with tempfile.TemporaryDirectory(prefix="tg") as tmp:
        with open(f"{tmp}/token", "w") as f:
            f.write(TOKEN)
        sock = f"{tmp}/sdk.sock"
        with running_exporter("--backend", "none", "--no-host", "--fastpath-token-file", f"{tmp}/token",
                              socket_path=sock, sdk_tcp=False) as exp:  # fmt: skip
            tg = Reporter(f"unix://{sock}", flush_interval_s=0.05, control_interval_s=0.1, clock=clock)
            try:
                yield exp, tg
            finally:
                tg.close()


def nan_plan_run(exp: Running, nan_at: float) -> dict[str, Any]:
    labels = {"alertname": "TrainingLossNonFinite", "severity": "P0", "namespace": "ml",
              "training_job": "llama-pretrain", "pod": "llama-0", "node": "gpu-node-1"}  # fmt: skip
    signal = Signal("TrainingLossNonFinite", "P0", labels, "fp-nan", Source.SIDECAR, nan_at)
    p = plan(signal, MONITOR, ClusterState(now=time.time(), gpu_nodes=2))
    assert [s.kind for s in p.steps] == [StepKind.PAUSE, StepKind.PIN_CHECKPOINT, StepKind.RESTART_IN_PLACE]
    store = Store([])  # the monitor's status, holding the record as the planner signed it
    store.monitor = MONITOR
    record = sign(new_record(p, time.time()), MONITOR)
    store.put(record)
    saver = store.saver()
    executor = Executor(ThisPod(exp.url), saver, lambda monitor: TOKEN, read=saver.read, key=lambda: KEY)
    return executor.run(record, MONITOR)


def knows(exp: Running, step: int) -> bool:
    return any(c["step"] == step for c in exp.exporter.training.control_view()["checkpoints"])


def test_the_executor_pins_the_checkpoint_saved_before_the_nan_and_the_sidecar_holds_it() -> None:
    base = time.time() - 600  # the trainer started ten minutes ago
    clock = Clock(base)
    with training(clock) as (exp, tg):
        clock.now = base + 10
        tg.checkpoint_saved(800, "full", "/ckpt/800")
        clock.now = base + 20
        tg.checkpoint_saved(900, "incremental", "/ckpt/900")
        clock.now = base + 25
        tg.log_step(950, loss=float("nan"))
        wait_for("the exporter to know step 900", lambda: knows(exp, 900), 5, 0.02)

        record = nan_plan_run(exp, nan_at=base + 25)
        assert [s["phase"] for s in record["steps"]] == [Phase.SUCCEEDED, Phase.SUCCEEDED, Phase.SKIPPED], (
            record
        )
        assert record["steps"][2]["detail"].startswith(
            "no live trainguard launch in llama-0; training stays paused"
        )
        pinned = record["steps"][1]["detail"]
        assert pinned.startswith("pinned step 900 (/ckpt/900)"), pinned
        assert "not checked" not in pinned, "the sidecar says when each checkpoint was saved"
        assert "do not hold the pin" not in pinned

        wait_for("the pause", tg.should_pause, 2, 0.02)
        clock.now = base + 30
        tg.checkpoint_saved(1000, "full", "/ckpt/1000")  # the trainer went on: the corrupted state
        wait_for("the exporter to know step 1000", lambda: knows(exp, 1000), 5, 0.02)
        view = ThisPod(exp.url).read_control(exp.url, TOKEN)
        assert view["pinned"] is True
        assert view["resume_from"] == {
            "step": 900,
            "kind": "incremental",
            "path": "/ckpt/900",
            "ts": base + 20,
        }
        # the trainer's own cache holds its newer save until its next control refresh shows the pin
        wait_for("the trainer to see the pin", lambda: tg.resume_from() == view["resume_from"], 5, 0.02)
        # the executor's own judgement of what the sidecar now shows agrees
        chosen, note = choose_checkpoint([view["resume_from"]], base + 24, None)
        assert chosen == view["resume_from"] and note == ""


def test_the_view_lists_the_good_checkpoint_when_a_newer_one_followed_the_nan() -> None:
    """A trainer may save once more between the NaN and the pause: resume_from is then that corrupted
    checkpoint, and the good one before the NaN is found in the view's `checkpoints`."""
    base = time.time() - 600
    clock = Clock(base)
    with training(clock) as (exp, tg):
        clock.now = base + 20
        tg.checkpoint_saved(900, "full", "/ckpt/900")
        clock.now = base + 27
        tg.checkpoint_saved(1000, "full", "/ckpt/1000")  # after the NaN at base + 25
        wait_for("the exporter to know step 1000", lambda: knows(exp, 1000), 5, 0.02)
        view = ThisPod(exp.url).read_control(exp.url, TOKEN)
        assert choose_checkpoint([view["resume_from"]], base + 24, None)[0] is None
        chosen, _ = choose_checkpoint([view["resume_from"], *view["checkpoints"]], base + 24, None)
        assert chosen is not None and chosen["path"] == "/ckpt/900"


def test_the_executor_pins_the_good_checkpoint_when_a_newer_one_followed_the_nan() -> None:
    base = time.time() - 600
    clock = Clock(base)
    with training(clock) as (exp, tg):
        clock.now = base + 20
        tg.checkpoint_saved(900, "full", "/ckpt/900")
        clock.now = base + 27
        tg.checkpoint_saved(1000, "full", "/ckpt/1000")
        wait_for("the exporter to know step 1000", lambda: knows(exp, 1000), 5, 0.02)
        record = nan_plan_run(exp, nan_at=base + 25)
        assert record["steps"][1]["phase"] == Phase.SUCCEEDED, record["steps"][1]["detail"]
        assert exp.exporter.training.control_view()["resume_from"]["path"] == "/ckpt/900"
