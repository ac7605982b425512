#!/usr/bin/env python3
"""Fault to training resumed, restarting in place against restarting the gang's pods, side by side in one
run on the local control plane: a 2-rank torch.distributed gang (examples/train_ddp.py, DDP over gloo on
CPU; e2e/launched.py), its pods' exporters and trainers as local processes (e2e/podprocesses.py), the
operator's fast path. Prints p50 and p95 per fault and mode, and writes the figures as JSON.

    python bench/restart_in_place.py [--runs 5] [--only REGEX] [--json bench/results/restart_in_place.json]

(--only runs the cases whose "owner fault mode" matches; the other cases of the JSON are kept as they
were measured, each with its own date.)

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

The same by the workload's owner, on the real controllers (e2e/controlplane/controllers.py):

- xid-79 on a JobSet (two child Jobs of one pod each), replace pod + in place, warm spare: every trainer
  under `trainguard launch --preload`, gpu-node-2 a labelled, tainted spare; the exporter's XID 79 on rank
  0's node -> ConfirmFault, Cordon, Taint, RequestCheckpoint, ReplacePod (rank 0's child Job deleted, its
  pod evicted; the JobSet recreates it on the spare), RestartInPlace (the healthy rank restarts as
  generation 1 at once; the replacement's first trainer joins it), ConfirmPlacement. Cordon: the node
  seen unschedulable. Resumed: both ranks' generation 1 took its first step.
- xid-79 on a PyTorchJob (training-operator v1.9.3, a Master and a Worker), the same: rank 0's pod
  evicted and recreated under its name by the training-operator on the spare.
- nan-loss and oom on a TrainJob (Kubeflow Trainer v2.2.0, its JobSet), in place, as for the Job.

In place (warm), the fault waits until both warm trainers said they are ready, as they are in a job that
has run for a while. Action is the operator's first record, done when every record finished, resumed as
above; all polled every 50 ms from the injection. Faults and modes alternate run by run, so drift hits them alike.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
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
from e2e.controlplane.controllers import JOBSET, TRAINER, TRAINING_OPERATOR, run_controller  # noqa: E402
from e2e.controlplane.local import local_control_plane, prometheus_operator_crds  # noqa: E402
from e2e.launched import (  # noqa: E402
    JOB_OWNER,
    JOBSET_OWNER,
    PYTORCHJOB_OWNER,
    STEP_DELAY_S,
    TRAINJOB_OWNER,
    WARM_STEP,
    WORLD,
    Owner,
    cold_launch_command,
    generations,
    launch_command,
    rendezvous_port,
    resumed,
    trainer_command,
)
from e2e.monitors import ready  # noqa: E402
from e2e.nodes import restore  # noqa: E402
from e2e.pipeline import FINAL, JOB, Sink, exporter_step, inject, objects  # noqa: E402
from e2e.podprocesses import PodProcesses, PodRun  # noqa: E402
from e2e.receiver import records  # noqa: E402
from tests.processes import http_json, wait_for  # noqa: E402

STAGES = ("cordon", "action", "done", "resumed")
IN_PLACE, COLD, GANG, NO_LAUNCHER = "in place", "in place, cold", "gang restart", "no launcher"
REJOIN = "replace pod + in place, warm spare"
SPARE = "gpu-node-2"
OWNER_APIS = {"JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets"), "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
              "TrainJob": ("trainer.kubeflow.org", "v1alpha1", "trainjobs")}  # fmt: skip


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
    owner: Owner = JOB_OWNER

    @property
    def launched(self) -> bool:
        return self.mode in (IN_PLACE, COLD, REJOIN)

    @property
    def name(self) -> str:
        return f"{self.owner.kind} {self.fault} {self.mode}"


CASES = (
    Case("nan-loss", IN_PLACE, launch_command, ("done", "resumed")),
    Case("nan-loss", COLD, cold_launch_command, ("done", "resumed")),
    Case("nan-loss", NO_LAUNCHER, direct_command, ("done",)),
    Case("oom", IN_PLACE, launch_command, ("done", "resumed")),
    Case("oom", COLD, cold_launch_command, ("done", "resumed")),
    Case("oom", GANG, direct_command, ("done", "resumed")),
    Case("xid-79", REJOIN, launch_command, ("cordon", "done", "resumed"), JOBSET_OWNER),
    Case("xid-79", REJOIN, launch_command, ("cordon", "done", "resumed"), PYTORCHJOB_OWNER),
    Case("nan-loss", IN_PLACE, launch_command, ("done", "resumed"), TRAINJOB_OWNER),
    Case("oom", IN_PLACE, launch_command, ("done", "resumed"), TRAINJOB_OWNER),
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


def spare_node(cluster: Cluster) -> None:
    """SPARE as a warm spare, as e2e/conftest.py's fixture makes it: labelled, and tainted so that only
    the monitored jobs' pods (the webhook gives them the toleration) land there."""
    cluster.core.patch_node(SPARE, {"metadata": {"labels": {"trainguard.io/spare": "true"}},
                                    "spec": {"taints": [{"key": "trainguard.io/spare", "value": "true",
                                                         "effect": "NoSchedule"}]}})  # fmt: skip


def one(cluster: Cluster, case: Case, workdir: Path) -> dict[str, float]:
    ns = cluster.namespace(f"bench-{uuid.uuid4().hex[:8]}")
    owner = case.owner
    monitor, policy = objects(ns, Sink(), {"emergencyCheckpointTimeout": "20s"})
    monitor["spec"]["selector"] = {"matchLabels": dict(owner.selector)}
    monitor["spec"]["workloadRef"] = {"kind": owner.kind, "name": JOB}
    if case.mode == REJOIN:
        spare_node(cluster)
    cluster.apply([monitor, policy])
    wait_for("monitor Ready", lambda: ready(cluster, ns), timeout=60)
    cluster.apply(owner.objects(ns, rendezvous_port()))
    try:
        with PodProcesses(
            cluster.api,
            ns,
            owner.label_selector,
            workdir,
            command=case.command,
            step_delay=STEP_DELAY_S,
            env=owner.trainer_env,
        ) as pods:
            wait_for(f"{WORLD} ranks past step {WARM_STEP}", lambda: len(r := pods.running()) == WORLD
                     and all(exporter_step(x) >= WARM_STEP for x in r), timeout=180)  # fmt: skip
            runs = sorted(pods.running(), key=lambda r: r.rank)
            a, old = runs[0], {r.name for r in runs}
            if case.mode in (
                IN_PLACE,
                REJOIN,
            ):  # a job runs for hours before its fault: the warm trainers are ready
                wait_for("both warm trainers ready", lambda: all("is ready: its imports took" in r.trainer_log()
                         for r in runs), timeout=180)  # fmt: skip

            def gang_resumed() -> bool:
                fresh = [r for r in pods.running() if r.name not in old]
                return len(fresh) == WORLD and all(
                    (generations(r).get(0) or {}).get("first") is not None for r in fresh
                )

            def joined() -> bool:
                return len(r := pods.running()) == WORLD and bool(resumed(r, 1))

            checks: dict[str, Callable[[], bool]] = {
                "cordon": lambda: bool(cluster.core.read_node(a.node).spec.unschedulable),
                "action": lambda: bool(records(cluster, ns)),
                "done": lambda: bool(r := records(cluster, ns)) and all(x["phase"] in FINAL for x in r),
                "resumed": joined if case.mode == REJOIN else (lambda: bool(resumed(runs, 1)))
                if case.launched else gang_resumed,
            }  # fmt: skip
            seen: dict[str, float] = {}
            cleared = case.fault != "nan-loss"
            t0 = time.monotonic()
            if case.fault == "nan-loss":
                inject(a, "nan-loss", gpu=None)
            elif case.fault == "xid-79":
                inject(a, "xid-79")
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
                raise RuntimeError(
                    f"{case.name} in {ns} did not finish: {seen}; records {records(cluster, ns)}"
                )
            return {f"{stage}_s": seen[stage] for stage in STAGES if stage in seen}
    finally:
        if owner.kind in OWNER_APIS:  # its controller would recreate what is deleted below
            group, version, plural = OWNER_APIS[owner.kind]
            cluster.custom.delete_namespaced_custom_object(group, version, ns, plural, JOB,
                                                           propagation_policy="Background")  # fmt: skip
        else:
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
    p.add_argument("--only", type=re.compile, default=None, metavar="REGEX",
                   help='run only the cases whose "owner fault mode" matches, e.g. "JobSet|TrainJob"')  # fmt: skip
    args = p.parse_args()
    cases = [c for c in CASES if args.only is None or args.only.search(c.name)]
    if not cases:
        p.error(f"--only {args.only.pattern!r} matches none of: " + "; ".join(c.name for c in CASES))
    results: dict[str, list[dict[str, float]]] = {c.name: [] for c in cases}
    failures: dict[str, list[str]] = {c.name: [] for c in cases}
    workdir = Path(tempfile.mkdtemp(prefix="trainguard-bench-"))
    t_start = time.monotonic()
    order = [c for _ in range(args.runs) for c in cases]
    kinds = {c.owner.kind for c in cases}
    # the pods' loopback network, as e2e/conftest.py gives each pytest-xdist worker its own
    network = 1 + int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    with local_control_plane(nodes=3, pod_network=network) as plane:
        cluster = Cluster(plane.kubeconfig, workdir)
        cluster.install(prometheus_operator_crds())
        cluster.start_operator(priority=100)
        controllers = contextlib.ExitStack()
        try:
            if kinds & {"JobSet", "TrainJob"}:  # the TrainJob's JobSet needs the JobSet controller too
                controllers.enter_context(run_controller(cluster, JOBSET))
            if "TrainJob" in kinds:
                controllers.enter_context(run_controller(cluster, TRAINER))
            if "PyTorchJob" in kinds:
                controllers.enter_context(run_controller(cluster, TRAINING_OPERATOR))
            for i, case in enumerate(order):
                try:
                    figures = one(cluster, case, workdir / f"run-{i}")
                except (
                    AssertionError,
                    RuntimeError,
                ) as exc:  # a run that never got there: counted, not fatal
                    failures[case.name].append(str(exc).splitlines()[0][:200])
                    print(f"[{i + 1}/{len(order)}] {case.name} FAILED: {failures[case.name][-1]}", flush=True)
                    continue
                results[case.name].append(figures)
                shown = "  ".join(f"{s} {figures[f'{s}_s']:5.2f}s" for s in STAGES if f"{s}_s" in figures)
                print(f"[{i + 1}/{len(order)}] {case.name}: {shown}", flush=True)
        finally:
            controllers.close()
            cluster.stop_all_operators()
    today = time.strftime("%Y-%m-%d", time.gmtime())
    measured = [{"owner": c.owner.kind, "fault": c.fault, "mode": c.mode, **summarise(results[c.name]),
                 "failed": failures[c.name], "measured": today} for c in cases]  # fmt: skip
    kept = []
    if args.only is not None and args.json.exists():  # the cases not run this time, as they were measured
        ran = {(r["owner"], r["fault"], r["mode"]) for r in measured}
        kept = [r for r in json.loads(args.json.read_text()).get("cases", [])
                if (r.get("owner", "Job"), r["fault"], r["mode"]) not in ran]  # fmt: skip
    summary: dict[str, Any] = {
        "conditions": {
            "runs_per_case": args.runs,
            "job": f"{WORLD} ranks, examples/train_ddp.py (DDP, gloo, CPU): a Job ({WORLD}-pod Indexed), a JobSet "
                   f"({WORLD} child Jobs of one pod) or a TrainJob ({WORLD} nodes)",
            "step_delay_s": STEP_DELAY_S, "path": "fast path (sidecar to operator)", "cpus": os.cpu_count(),
            "python": platform.python_version(), "machine": platform.platform(),
            "wall_s": round(time.monotonic() - t_start, 1),
        },
        "cases": [*kept, *measured],
    }  # fmt: skip
    print("\nfault to ... (p50 / p95, seconds; '-' where the mode does not get there)")
    print(
        f"{'owner':10s} {'fault':9s} {'mode':34s} {'n':>3s} "
        + " ".join(f"{s:>13s}" for s in STAGES)
        + "  failed"
    )
    for row in summary["cases"]:
        cells = " ".join(f"{cell(row, s):>13s}" for s in STAGES)
        print(
            f"{row.get('owner', 'Job'):10s} {row['fault']:9s} {row['mode']:34s} {row['n']:3d} {cells}  {len(row['failed'])}"
        )
    by = {(r.get("owner", "Job"), r["fault"], r["mode"]): r for r in summary["cases"]}
    targets = [(("Job", "nan-loss", IN_PLACE), "a NaN restarted in place", 5),
               (("Job", "oom", IN_PLACE), "an OOM restarted in place", 5),
               (("JobSet", "xid-79", REJOIN), "a node fault, its pod replaced on a warm spare", 10)]  # fmt: skip
    for key, what, bound in targets:
        got = (by.get(key) or {}).get("resumed_p50_s")
        print(
            f"target: {what}, fault to resumed p50 under {bound} s: {'-' if got is None else f'{got:.2f}s'}"
        )
    print(f"conditions: {json.dumps(summary['conditions'])}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
