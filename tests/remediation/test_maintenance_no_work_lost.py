"""No work lost to a planned maintenance move, measured with real sidecars and trainers: two real exporters,
each with a trainer's Reporter stepping on its unix socket, and the executor carrying out the planner's
maintenance record (the pods and the owner are tests/remediation/fakes.py's, the sidecar calls are real).
The drain begins at a trainer step; the checkpoint the move waits for is taken by every rank after it, and
the gang's resume-from pointer is that checkpoint: the first step after the resume is at least the last
step before the drain + 1, so nothing done before the drain is done again."""

from __future__ import annotations

import contextlib
import json
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from tests.clock import Clock
from tests.exporter.running import running_exporter
from tests.processes import wait_for
from tests.remediation.fakes import KEY, TOKEN, FakeCluster, Rig, job_monitor, sign
from trainguard.catalog.kubernetes import RESUME_FROM
from trainguard.remediation import maintenance
from trainguard.remediation.executor import Executor
from trainguard.remediation.model import ClusterState, Phase, Step, StepKind
from trainguard.remediation.plan import plan
from trainguard.remediation.records import new_record
from trainguard.remediation.sidecars import SidecarControl
from trainguard.sdk import Reporter

STEP_S = 0.02
PODS = {"job-0": "gpu-a", "job-1": "gpu-b"}


class Gang(threading.Thread):
    """A synchronous gang's trainers, in lockstep as collectives hold them: a step every STEP_S on every
    rank, and a checkpoint at the step just done whenever any rank's SDK says so (the operator's request
    or the cadence), agreed among the ranks as a real trainer agrees it (an all-reduce of the flag)."""

    def __init__(self, reporters: list[Reporter]) -> None:
        super().__init__(daemon=True)
        self.reporters, self.step, self.stop = reporters, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.step += 1
            for r in self.reporters:
                r.log_step(self.step, loss=1.0)
            kinds = {k for r in self.reporters if (k := r.should_checkpoint(self.step))}
            if kinds:
                kind = "full" if "full" in kinds else "incremental"
                for r in self.reporters:
                    r.checkpoint_saved(self.step, kind, f"/ckpt/{self.step}")
            time.sleep(STEP_S)


class RealSidecars(FakeCluster):
    """The fake cluster's pods and owner, with the real sidecars (`urls`) of the gang's first pods."""

    urls: dict[str, str]

    def _real(self, base_url: str) -> str | None:
        pod = base_url.removeprefix("http://").split(":")[0]
        return self.urls.get(pod) if pod in self.pods else None

    def read_control(self, base_url: str, token: str) -> dict[str, Any]:
        real = self._real(base_url)
        return SidecarControl().read_control(real, token) if real else super().read_control(base_url, token)

    def control(self, base_url: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
        real = self._real(base_url)
        return SidecarControl().control(real, token, body) if real else super().control(base_url, token, body)


class RealClock(Clock):
    """The executor's and the fake cluster's clock: real seconds (the trainers run in real time)."""

    def __call__(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@contextlib.contextmanager
def rank() -> Iterator[tuple[str, Reporter]]:
    """A real sidecar and the trainer's Reporter on its unix socket, as in a pod."""
    with tempfile.TemporaryDirectory(prefix="tg") as tmp:
        with open(f"{tmp}/token", "w") as f:
            f.write(TOKEN)
        sock = f"{tmp}/sdk.sock"
        with running_exporter("--backend", "none", "--no-host", "--fastpath-token-file", f"{tmp}/token",
                              socket_path=sock, sdk_tcp=False) as exp:  # fmt: skip
            reporter = Reporter(f"unix://{sock}", flush_interval_s=0.05, control_interval_s=0.2,
                                incremental_every=1000, full_every=100)  # fmt: skip
            try:
                yield exp.url, reporter
            finally:
                reporter.close()


@contextlib.contextmanager
def gang(reporters: list[Reporter]) -> Iterator[Gang]:
    g = Gang(reporters)
    g.start()
    try:
        yield g
    finally:
        g.stop.set()
        g.join(5)


def test_the_gang_resumes_past_the_last_step_before_the_drain() -> None:
    with rank() as (url0, r0), rank() as (url1, r1), gang([r0, r1]) as g:
        urls = {"job-0": url0, "job-1": url1}
        control = SidecarControl()
        rig = Rig(pods=PODS)
        clock = RealClock()

        sidecars = RealSidecars(clock, rig.timeline, pods=PODS)
        sidecars.urls, sidecars.admitted_pointer = urls, rig.cluster.admitted_pointer
        sidecars.nodes["gpu-a"]["unschedulable"] = True  # the drain's cordon
        rig.cluster = sidecars

        def listed() -> bool:  # the cadence's step-100 checkpoint reported by both sidecars: none in flight
            views = [control.read_control(u, TOKEN) for u in urls.values()]
            return all(any(c.get("step") == 100 for c in v.get("checkpoints") or []) for v in views)

        wait_for("both ranks' step-100 checkpoint listed by their sidecars", listed, 30, 0.05)
        before = g.step  # the drain begins: the last step any rank finished
        m = job_monitor()
        cordoned = {"metadata": {"name": "gpu-a"}, "spec": {"unschedulable": True}}
        pods = [{"metadata": {"name": p, "namespace": "ml", "labels": {"app": "llama-pretrain"}},
                 "spec": {"nodeName": n}, "status": {"phase": "Running"}} for p, n in PODS.items()]  # fmt: skip
        (signal,) = maintenance.signals([cordoned], pods, m, time.time(), {})
        p = plan(signal, m, ClusterState(now=time.time(), gpu_nodes=3, job_nodes=frozenset(PODS.values())))
        steps = tuple(
            Step(s.kind, {**s.params, "timeout_s": "20"}) if s.kind == StepKind.REQUEST_CHECKPOINT else s
            for s in p.steps
        )
        record = new_record(replace(p, steps=steps), time.time())
        rig.store.monitor = m
        rig.store.put(sign(record, m))
        saver = rig.store.saver()
        went: list[int] = []  # the gang's step when its pods were deleted
        effect = rig.cluster._effect

        def noted(*what: str) -> None:
            if what[0] == "delete" and not went:
                went.append(g.step)
            effect(*what)

        rig.cluster._effect = noted  # type: ignore[method-assign]
        ops: Any = rig.cluster  # the fake cluster stands in for ClusterOps, as in tests/remediation/fakes.py
        executor = Executor(ops, saver, lambda _: TOKEN, read=saver.read, key=lambda: KEY,
                            clock=clock, sleep=clock.sleep, poll_interval=0.05)  # fmt: skip
        started = time.monotonic()
        done = executor.run(record, m)
        took = time.monotonic() - started
        detail = {s["kind"]: s.get("detail", "") for s in done["steps"]}
        assert done["phase"] == Phase.SUCCEEDED, detail
        pointer: dict[str, Any] = json.loads(str(rig.cluster.annotations_written[0][RESUME_FROM]))
        (after,) = went
        print(f"\nplanned maintenance: last step before the drain {before}, checkpoint (resume-from) step "
              f"{pointer['step']:g}, first step after the resume {pointer['step'] + 1:g}; record done in "
              f"{took:.2f}s; steps done after the checkpoint before the pods went (redone): "
              f"{after - pointer['step']:g}")  # fmt: skip
        assert pointer["step"] >= before, (pointer, before, detail)  # nothing before the drain is lost
