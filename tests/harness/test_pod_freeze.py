"""The e2e pod runner's node death (e2e/podprocesses.py `freeze`): every process of a node's pods stopped,
a launcher's child in its own session included, nothing else; and all of them killed when the pod goes.
Real processes; the runner's Kubernetes client is never called (no sync runs)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from kubernetes import client

from e2e.podprocesses import PodProcesses, PodRun, _spawn_logged, descendants, process_state
from tests.processes import wait_for

LAUNCHER = """
import subprocess, sys, time
# as trainguard launch runs its trainer: a child in a session of its own
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
time.sleep(600)
"""


def run_on(node: str, tmp: Path) -> PodRun:
    d = tmp / node
    d.mkdir()
    exporter = _spawn_logged([sys.executable, "-c", "import time; time.sleep(600)"], d / "exporter.log", None)
    launcher = _spawn_logged([sys.executable, "-c", LAUNCHER], d / "trainer.log", None)
    return PodRun(f"pod-{node}", f"uid-{node}", node, "127.0.0.1", 0, "0", d, exporter, {}, trainer=launcher)


def test_a_frozen_node_stops_every_process_of_its_pods_and_a_deleted_pod_kills_them(tmp_path: Path) -> None:
    pods = PodProcesses(client.ApiClient(), "ns", "app=x", tmp_path)
    dead, alive = run_on("dead", tmp_path), run_on("alive", tmp_path)
    pods.runs = {dead.uid: dead, alive.uid: alive}
    roots = [p.pid for r in (dead, alive) for p in (r.exporter, r.trainer) if p is not None]
    every: set[int] = set()
    try:
        assert dead.trainer is not None and alive.trainer is not None
        for launcher in (dead.trainer, alive.trainer):
            wait_for("the launcher's child", lambda pid=launcher.pid: descendants([pid]) - {pid})
        every = descendants(roots)
        trainer = descendants([dead.trainer.pid]) - {dead.trainer.pid}
        assert os.getpgid(next(iter(trainer))) != os.getpgid(dead.trainer.pid)  # a session of its own
        frozen = descendants([dead.exporter.pid, dead.trainer.pid])
        assert pods.freeze("dead") == [dead]
        assert {process_state(p) for p in frozen} == {"T"}, {p: process_state(p) for p in frozen}
        assert "T" not in {process_state(p) for p in descendants([alive.exporter.pid, alive.trainer.pid])}
        assert process_state(os.getpid()) != "T"
        t0 = time.monotonic()
        pods._stop(dead)  # the pod was deleted
        assert time.monotonic() - t0 < 3, "a frozen pod is killed at once, not after a SIGTERM's grace"
        wait_for(
            "every process of the frozen pod gone",
            lambda: {process_state(p) for p in frozen} <= {"gone", "Z"},
        )
    finally:
        for pid in every | descendants(roots):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for proc in (p for r in (dead, alive) for p in (r.exporter, r.trainer) if p is not None):
            proc.wait()
