"""`trainguard status --watch` in a real terminal (tmux) against the local control plane: a monitor and a
job whose pod runs the real exporter and trainer (e2e/podprocesses.py), scraped by a real Prometheus that
evaluates the monitor's rules (e2e/test_pipeline.py's stack). The screen is read back with capture-pane
after each redraw: the job's health, throughput and checkpoint, then a thermal fault's alert, then an
OOM-killed trainer's remediation and the time it lost."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.cluster import Cluster
from e2e.pipeline import JOB, Monitoring, Sink, diagnostics, finished, inject, start
from tests.processes import wait_for
from trainguard.clients.prometheus import prometheus_client
from trainguard.status.fetch import fetch_redo

pytestmark = pytest.mark.e2e
TRAINGUARD = str(Path(sys.executable).parent / "trainguard")


class Tmux:
    """One detached tmux session on its own server socket, so nothing else's sessions are touched."""

    def __init__(self) -> None:
        self.socket = f"trainguard-e2e-{uuid.uuid4().hex[:8]}"

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args], check=False, capture_output=True, text=True, timeout=10
        )
        assert done.returncode == 0, f"tmux {args[0]}: {done.stderr}"
        return done.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "status")

    def __enter__(self) -> Tmux:
        self.tmux("new-session", "-d", "-s", "status", "-x", "160", "-y", "50")
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(
            ["tmux", "-L", self.socket, "kill-server"], check=False, capture_output=True, timeout=10
        )


@pytest.fixture
def term() -> Iterator[Tmux]:
    """Skipped without tmux, failed under TRAINGUARD_REQUIRE_TOOLS=1 (.ci/run: bootstrap installs it)."""
    if shutil.which("tmux") is None:
        if os.environ.get("TRAINGUARD_REQUIRE_TOOLS"):
            pytest.fail("tmux is required (TRAINGUARD_REQUIRE_TOOLS is set) but not on PATH")
        pytest.skip("tmux is not installed (scripts/bootstrap.sh installs it: apt-get install tmux)")
    with Tmux() as t:
        yield t


def redrawn(term: Tmux, after: str | None) -> str | None:
    """The screen once the clock in its header has moved past `after` (a new redraw), else None."""
    screen = term.screen()
    got = re.search(r"trainguard status\s+(\S+ \S+)", screen)
    return screen if got and got.group(1) != after else None


def clock(screen: str) -> str:
    got = re.search(r"trainguard status\s+(\S+ \S+)", screen)
    assert got, screen
    return got.group(1)


def test_status_watch_in_a_terminal_shows_the_job_then_a_fault_then_its_remediation(
    stack: tuple[Cluster, Monitoring, Sink],
    ns: str,
    clean_nodes: None,
    tmp_path: Path,
    term: Tmux,
) -> None:
    cluster, mon, _sink = stack
    with start(stack, ns, tmp_path, completions=1) as pods:
        command = (f"{TRAINGUARD} status -n {ns} --watch --interval 1 --prometheus {mon.prometheus} "
                   f"--kubeconfig {cluster.kubeconfig}")  # fmt: skip
        term.tmux("send-keys", "-t", "status", command, "Enter")
        job = f"{ns}/{JOB}"
        throughput = re.compile(r"throughput  \d+/\S+ .*tokens/s/GPU")
        checkpoint = re.compile(r"checkpoint  step (\d+) \d+(s|m\d\ds) ago")
        try:
            screen = wait_for("the job healthy, with its throughput and checkpoint", lambda: (
                s := term.screen()) and f"{job}  Healthy" in s and throughput.search(s) and checkpoint.search(s)
                and s, timeout=60)  # fmt: skip
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\nscreen:\n{term.screen()}\n" + diagnostics(cluster, mon, pods, ns)
            ) from None
        print(f"\nthe first screen:\n{screen}")
        assert "\x1b" not in screen, "capture-pane without -e shows the text, not the escapes"
        assert "alerts      none" in screen, screen
        assert "remediation none" in screen and "time lost   0s" in screen, screen
        m = checkpoint.search(screen)
        assert m and int(m.group(1)) >= 100, screen  # fullEverySteps: 100, and the trainer is past step 120

        # the same command on a pipe: the plain layout, one line per job, no escapes
        piped = subprocess.run([TRAINGUARD, "status", "-n", ns, "--prometheus", mon.prometheus, "--kubeconfig",
                                str(cluster.kubeconfig)], check=True, capture_output=True, text=True, timeout=60)  # fmt: skip
        lines = piped.stdout.splitlines()
        assert lines[0].startswith("JOB") and "\x1b" not in piped.stdout, piped.stdout
        assert re.match(rf"{job}\s+Healthy\s+none\s+\d+/\S+\s+step \d+ \S+ ago\s+0s$", lines[1]), piped.stdout

        (run,) = pods.running()
        before = clock(screen)
        inject(run, "thermal")
        try:
            screen = wait_for("the thermal alert in a later redraw", lambda: (s := redrawn(term, before))
                              and "GPUThermalThrottling" in s and s, timeout=60)  # fmt: skip
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\nscreen:\n{term.screen()}\n" + diagnostics(cluster, mon, pods, ns)
            ) from None
        print(f"\nthe screen after the thermal fault:\n{screen}")
        assert f"{job}  Degraded" in screen, screen  # a P1 firing
        assert "alerts      P1:" in screen and re.search(r"P1 GPUThermalThrottling node=\S+ gpu=1", screen), (
            screen
        )

        # an OOM-killed trainer: the operator restarts the gang from its checkpoint; status shows the
        # record and counts the stop and the steps redone since the checkpoint as time lost
        t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        cluster.core.patch_namespaced_pod_status(run.name, ns, {"status": {"phase": "Failed", "containerStatuses": [
            {"name": "trainer", "ready": False, "restartCount": 0, "image": "registry.invalid/llama:1", "imageID": "",
             "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": t, "finishedAt": t}}}]}})  # fmt: skip
        (record,) = finished(cluster, ns, timeout=120)
        assert record["phase"] == "Succeeded" and any(s["kind"] == "RestartGang" for s in record["steps"]), (
            record
        )
        screen = wait_for("the remediation and the time it lost on the screen", lambda: (s := term.screen())
                          and "remediation TrainingInterrupted" in s and "Succeeded [RestartInPlace,RestartGang" in s
                          and not re.search(r"time lost   0s\b", s) and s, timeout=30)  # fmt: skip
        lost = re.search(r"time lost   (\S+)", screen)
        assert lost and lost.group(1) not in ("0s", "-"), screen
        assert "+?" not in lost.group(1), f"the steps redone since the checkpoint were not told:\n{screen}"
        # the operator's own detection went to Alertmanager, not into ALERTS: --alertmanager shows it
        am = subprocess.run([TRAINGUARD, "status", "-n", ns, "--prometheus", mon.prometheus, "--alertmanager",
                             mon.alertmanager, "--kubeconfig", str(cluster.kubeconfig)], check=True,
                            capture_output=True, text=True, timeout=60).stdout  # fmt: skip
        print(f"\nwith --alertmanager:\n{am}")
        assert "  P0 TrainingInterrupted" in am and "Critical" in am.splitlines()[1], am
        (rec,) = finished(cluster, ns)
        redo = fetch_redo(prometheus_client(mon.prometheus), ns, JOB, [rec])
        print(
            f"\nthe screen after the remediation:\n{screen}\nrecord {rec['created']} -> {rec['updated']}, {redo}"
        )
