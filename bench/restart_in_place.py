#!/usr/bin/env python3
"""Fault to training resumed, restarting in place against restarting the gang's pods, side by side in one
run on the local control plane: a 2-rank torch.distributed gang (examples/train_ddp.py, DDP over gloo on
CPU; e2e/launched.py), its pods' exporters and trainers as local processes (e2e/podprocesses.py), the
operator's fast path. Prints p50 and p95 per fault and mode, and writes the figures as JSON.

    python bench/restart_in_place.py [--runs 5] [--json bench/results/restart_in_place.json]

(PYTEST_XDIST_WORKER=gwN picks the pods' loopback network, as for the e2e tests.)

Each run is a fresh namespace: the Job's two pods on two of three fake GPU nodes, both ranks past their
first full checkpoint (step 120), then one fault on rank 0:

- nan-loss, in place: every trainer runs under `trainguard launch --preload torch,...`; the exporter's
  NaN fault (cleared as soon as the record is written) -> Pause, PinCheckpoint, RestartInPlace. Resumed:
  both ranks' trainers of generation 1 took their first step (the pin's step + 1).
- nan-loss, in place, cold: the same without --preload: each new trainer starts a fresh interpreter
  and imports torch.
- nan-loss, no launcher: the same trainer run directly. The NaN is paused and pinned and stays so until
  a person restarts the job (RestartInPlace is Skipped): `done` is measured, there is no `resumed`.
- oom, in place (and cold): SIGKILL to rank 0's trainer under the launcher (what the kernel's OOM
  killer does) -> the sidecar's TrainingInterrupted -> RestartInPlace. Resumed as above.
- oom, gang restart: rank 0's trainer run directly; its pod reported OOMKilled (as the kubelet reports a
  container the kernel killed; the pod runner stops its processes) -> the operator's TrainingInterrupted
  -> RestartGang, ConfirmPlacement: both pods deleted and recreated by the Job controller after its
  back-off. Resumed: both replacement pods' trainers took their first step.

In place (warm), the fault waits until both warm trainers said they are ready, as they are in a job that
has run for a while. Action is the operator's first record, done when every record finished, resumed as
above; all polled every 50 ms from the injection. Faults and modes alternate run by run, so drift hits them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from bench.pipeline import oom_killed, percentile  # noqa: E402
from kubernetes import client  # noqa: E402

from e2e.cluster import Cluster  # noqa: E402
from e2e.controlplane.local import local_control_plane, prometheus_operator_crds  # noqa: E402
from e2e.launched import (  # noqa: E402
    STEP_DELAY_S,
    WARM_STEP,
    WORLD,
    cold_launch_command,
    ddp_job,
    generations,
    launch_command,
    resumed,
    trainer_command,
)
from e2e.monitors import ready  # noqa: E402
from e2e.nodes import restore  # noqa: E402
from e2e.pipeline import FINAL, JOB, SELECTOR, Sink, exporter_step, inject, objects  # noqa: E402
from e2e.podprocesses import PodProcesses, PodRun  # noqa: E402
from e2e.receiver import records  # noqa: E402
from tests.processes import free_port, http_json, wait_for  # noqa: E402

STAGES = ("action", "done", "resumed")
IN_PLACE, COLD, GANG, NO_LAUNCHER = "in place", "in place, cold", "gang restart", "no launcher"


def direct_command(run: PodRun, checkpoints: Path) -> list[str]:
    """The trainer without `trainguard launch`: what a job runs today."""
    return trainer_command(checkpoints)


@dataclass(frozen=True)
class Case:
    fault: str
    mode: str
    command: Callable[[PodRun, Path], list[str]]
    stages: tuple[str, ...]
    """What the run waits for (action and done are always measured when they happen)."""

    @property
    def launched(self) -> bool:
        return self.mode in (IN_PLACE, COLD)


CASES = (
    Case("nan-loss", IN_PLACE, launch_command, ("done", "resumed")),
    Case("nan-loss", COLD, cold_launch_command, ("done", "resumed")),
    Case("nan-loss", NO_LAUNCHER, direct_command, ("done",)),
    Case("oom", IN_PLACE, launch_command, ("done", "resumed")),
    Case("oom", COLD, cold_launch_command, ("done", "resumed")),
    Case("oom", GANG, direct_command, ("done", "resumed")),
)


def summarise(runs: list[dict[str, float]]) -> dict[str, Any]:
    row: dict[str, Any] = {"n": len(runs), "runs": runs}
    for stage in STAGES:
        values = [r[f"{stage}_s"] for r in runs if f"{stage}_s" in r]
        if values:
            row[f"{stage}_p50_s"] = percentile(values, 0.5)
            row[f"{stage}_p95_s"] = percentile(values, 0.95)
            row[f"{stage}_mean_s"] = statistics.mean(values)
    return row


def one(cluster: Cluster, case: Case, workdir: Path) -> dict[str, float]:
    ns = cluster.namespace(f"bench-{uuid.uuid4().hex[:8]}")
    cluster.apply(objects(ns, Sink(), {"emergencyCheckpointTimeout": "20s"}))
    wait_for("monitor Ready", lambda: ready(cluster, ns), timeout=60)
    cluster.apply([ddp_job(ns, free_port())])
    try:
        with PodProcesses(
            cluster.api, ns, SELECTOR, workdir, command=case.command, step_delay=STEP_DELAY_S
        ) as pods:
            wait_for(f"{WORLD} ranks past step {WARM_STEP}", lambda: len(r := pods.running()) == WORLD
                     and all(exporter_step(x) >= WARM_STEP for x in r), timeout=180)  # fmt: skip
            runs = sorted(pods.running(), key=lambda r: r.rank)
            a, old = runs[0], {r.name for r in runs}
            if case.mode == IN_PLACE:  # a job runs for hours before its fault: the warm trainers are ready
                wait_for("both warm trainers ready", lambda: all("is ready: its imports took" in r.trainer_log()
                         for r in runs), timeout=180)  # fmt: skip

            def gang_resumed() -> bool:
                fresh = [r for r in pods.running() if r.name not in old]
                return len(fresh) == WORLD and all(
                    (generations(r).get(0) or {}).get("first") is not None for r in fresh
                )

            checks: dict[str, Callable[[], bool]] = {
                "action": lambda: bool(records(cluster, ns)),
                "done": lambda: bool(r := records(cluster, ns)) and all(x["phase"] in FINAL for x in r),
                "resumed": (lambda: bool(resumed(runs, 1))) if case.launched else gang_resumed,
            }  # fmt: skip
            seen: dict[str, float] = {}
            cleared = case.fault != "nan-loss"
            t0 = time.monotonic()
            if case.fault == "nan-loss":
                inject(a, "nan-loss", gpu=None)
            elif case.launched:
                os.kill(generations(a)[0]["pid"], signal.SIGKILL)
            else:
                oom_killed(cluster, ns, a)
            deadline = t0 + 180
            while time.monotonic() < deadline and not all(s in seen for s in case.stages):
                now = time.monotonic()
                for stage, check in checks.items():
                    if stage not in seen and stage in (*case.stages, "action") and check():
                        seen[stage] = now - t0
                if not cleared and "action" in seen:
                    http_json(f"{a.url}/v1/faults", method="DELETE")  # one NaN
                    cleared = True
                time.sleep(0.05)
            if not all(s in seen for s in case.stages):
                raise RuntimeError(f"{case} in {ns} did not finish: {seen}; records {records(cluster, ns)}")
            return {f"{stage}_s": seen[stage] for stage in STAGES if stage in seen}
    finally:
        client.BatchV1Api(cluster.api).delete_namespaced_job(JOB, ns, propagation_policy="Background")
        cluster.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        wait_for("pods gone", lambda: not cluster.core.list_namespaced_pod(ns).items, timeout=60)
        cluster.core.delete_namespace(ns)
        restore(cluster.core)


def cell(row: dict[str, Any], stage: str) -> str:
    return f"{row[f'{stage}_p50_s']:5.2f} / {row[f'{stage}_p95_s']:5.2f}" if f"{stage}_p50_s" in row else "-"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="runs of each fault and mode (default 5)")
    p.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "restart_in_place.json")
    args = p.parse_args()
    results: dict[Case, list[dict[str, float]]] = {c: [] for c in CASES}  # frozen: hashable
    failures: dict[Case, list[str]] = {c: [] for c in CASES}
    workdir = Path(tempfile.mkdtemp(prefix="trainguard-bench-"))
    t_start = time.monotonic()
    order = [c for _ in range(args.runs) for c in CASES]
    # the pods' loopback network, as e2e/conftest.py gives each pytest-xdist worker its own
    network = 1 + int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    with local_control_plane(nodes=3, pod_network=network) as plane:
        cluster = Cluster(plane.kubeconfig, workdir)
        cluster.install(prometheus_operator_crds())
        cluster.start_operator(priority=100)
        try:
            for i, case in enumerate(order):
                try:
                    figures = one(cluster, case, workdir / f"run-{i}")
                except (
                    AssertionError,
                    RuntimeError,
                ) as exc:  # a run that never got there: counted, not fatal
                    failures[case].append(str(exc).splitlines()[0][:200])
                    print(f"[{i + 1}/{len(order)}] {case.fault:9s} {case.mode:15s} FAILED: {failures[case][-1]}",
                          flush=True)  # fmt: skip
                    continue
                results[case].append(figures)
                shown = "  ".join(f"{s} {figures[f'{s}_s']:5.2f}s" for s in STAGES if f"{s}_s" in figures)
                print(f"[{i + 1}/{len(order)}] {case.fault:9s} {case.mode:15s} {shown}", flush=True)
        finally:
            cluster.stop_all_operators()
    summary: dict[str, Any] = {
        "conditions": {
            "runs_per_case": args.runs, "job": f"{WORLD}-pod Indexed Job, examples/train_ddp.py (DDP, gloo, CPU)",
            "step_delay_s": STEP_DELAY_S, "path": "fast path (sidecar to operator)", "cpus": os.cpu_count(),
            "python": platform.python_version(), "machine": platform.platform(),
            "wall_s": round(time.monotonic() - t_start, 1),
        },
        "cases": [{"fault": c.fault, "mode": c.mode, **summarise(runs), "failed": failures[c]}
                  for c, runs in results.items()],
    }  # fmt: skip
    print("\nfault to ... (p50 / p95, seconds; '-' where the mode does not get there)")
    print(f"{'fault':9s} {'mode':15s} {'n':>3s} " + " ".join(f"{s:>13s}" for s in STAGES) + "  failed")
    for row in summary["cases"]:
        cells = " ".join(f"{cell(row, s):>13s}" for s in STAGES)
        print(f"{row['fault']:9s} {row['mode']:15s} {row['n']:3d} {cells}  {len(row['failed'])}")
    by = {(r["fault"], r["mode"]): r for r in summary["cases"]}
    for fault in ("nan-loss", "oom"):
        got = by[(fault, IN_PLACE)].get("resumed_p50_s")
        print(f"target: {fault} restarted in place, fault to resumed p50 under 5 s: "
              f"{'-' if got is None else f'{got:.2f}s'}")  # fmt: skip
    print(f"conditions: {json.dumps(summary['conditions'])}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
