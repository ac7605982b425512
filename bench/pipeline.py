#!/usr/bin/env python3
"""Fault to cordon and fault to training resumed, through the whole P0 pipeline on the local control
plane: the fast path (sidecar -> operator) and the Prometheus path (exporter -> Prometheus ->
Alertmanager -> operator) measured in one run, injection by injection, with the same harness as
e2e/test_pipeline.py (real apiserver, scheduler and Job controller; exporters and train_tiny.py as
local processes; real Prometheus and Alertmanager). Prints p50 and p95 per path with the intervals used,
then the same by fault class, and writes the figures as JSON.

    python bench/pipeline.py [--injections 20] [--per-class 5] [--json bench/results/pipeline.json]

Each injection is a fresh namespace: a 2-pod Indexed Job on two of three fake GPU nodes, trained past
its first checkpoint, then one fault on rank 0. Cordon time is when the node is first seen
unschedulable (polled every 50 ms); resumed is when both replacement trainers have logged that they
resume from the checkpoint (polled every 100 ms); action is when the operator's first remediation
record appears in the monitor's status, done when every record has finished. Paths and classes
alternate, so drift hits them alike.

Fault classes (FAULTS): XID 79 (GPU fallen off the bus; `--injections` per path, the headline `paths`
figures), an ECC double-bit error (both node faults: checkpoint, cordon, restart the gang on a
healthy node), a non-finite loss (pause and pin the last good checkpoint: no cordon, no restart), and
an OOM-killed trainer (the operator's own detection from pod state, so one path: restart the gang).
A node going NotReady is not here: the harness has no way to bring a fake node back (its Ready
condition is patched by hand, and a NotReady node inhibits everything on it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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

from kubernetes import client  # noqa: E402

from e2e.cluster import Cluster  # noqa: E402
from e2e.controlplane.local import local_control_plane, prometheus_operator_crds  # noqa: E402
from e2e.nodes import restore  # noqa: E402
from e2e.pipeline import (  # noqa: E402
    EVAL_SECONDS,
    FINAL,
    JOB,
    SCRAPE_SECONDS,
    SELECTOR,
    Monitoring,
    Sink,
    exporter_step,
    inject,
    job,
    objects,
    resumed_from,
)
from e2e.podprocesses import PodProcesses, PodRun  # noqa: E402
from e2e.receiver import records  # noqa: E402
from tests.processes import wait_for  # noqa: E402
from trainguard.render.routing import TIMING  # noqa: E402

PATHS = ("fast path", "Prometheus path")
OPERATOR_PATH = "operator (pod state)"


def oom_killed(cluster: Cluster, ns: str, run: PodRun) -> None:
    """The kubelet's report of an OOM-killed trainer, as e2e/test_pipeline.py writes it."""
    t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cluster.core.patch_namespaced_pod_status(run.name, ns, {"status": {"phase": "Failed", "containerStatuses": [
        {"name": "trainer", "ready": False, "restartCount": 0, "image": "registry.invalid/llama:1", "imageID": "",
         "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": t, "finishedAt": t}}}]}})  # fmt: skip


@dataclass(frozen=True)
class Fault:
    description: str
    inject: Callable[[Cluster, str, PodRun], None]
    paths: tuple[str, ...]
    stages: tuple[str, ...]
    """What the injection waits for (action and done are always measured)."""


FAULTS: dict[str, Fault] = {
    "xid-79": Fault("XID 79 on rank 0's GPU 1 (GPUCriticalXid, GPULost): nodeFault",
                    lambda c, ns, r: inject(r, "xid-79"), PATHS, ("cordon", "resumed")),
    "ecc-dbe": Fault("ECC double-bit error on rank 0's GPU 1 (GPUDoubleBitECCError): nodeFault",
                     lambda c, ns, r: inject(r, "ecc-dbe"), PATHS, ("cordon", "resumed")),
    "nan-loss": Fault("non-finite loss on rank 0 (TrainingLossNonFinite): pause and pin the checkpoint",
                      lambda c, ns, r: inject(r, "nan-loss", gpu=None), PATHS, ("done",)),
    "oom-killed": Fault("rank 0's trainer OOMKilled (TrainingInterrupted from pod state): restart the gang",
                        oom_killed, (OPERATOR_PATH,), ("resumed",)),
}  # fmt: skip
STAGES = ("action", "done", "cordon", "resumed")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summarise(runs: list[dict[str, float]]) -> dict[str, Any]:
    """p50, p95 and mean of each stage the runs measured, with the runs themselves."""
    row: dict[str, Any] = {"n": len(runs), "runs": runs}
    for stage in STAGES:
        values = [r[f"{stage}_s"] for r in runs if f"{stage}_s" in r]
        if values:
            row[f"{stage}_p50_s"] = percentile(values, 0.5)
            row[f"{stage}_p95_s"] = percentile(values, 0.95)
            row[f"{stage}_mean_s"] = statistics.mean(values)
    return row


def one(
    cluster: Cluster, mon: Monitoring, sink: Sink, *, kind: str, path: str, workdir: Path
) -> dict[str, float]:
    fault = FAULTS[kind]
    ns = cluster.namespace(f"bench-{uuid.uuid4().hex[:8]}")
    remediation = {"maxCordonedNodes": 100}  # each injection is a new job: its restart budget is fresh
    cluster.apply(objects(ns, sink, remediation))
    wait_for("monitor Ready", lambda: (m := cluster.get("trainguard.io/v1alpha1", "TrainingJobMonitor", ns, JOB))
             and any(c["type"] == "Ready" and c["status"] == "True" for c in (m.get("status") or {}).get("conditions", [])),
             timeout=60)  # fmt: skip
    cluster.apply([job(ns)])
    try:
        with PodProcesses(cluster.api, ns, SELECTOR, workdir, fastpath=path != PATHS[1]) as pods:
            wait_for("2 trainers past a checkpoint", lambda: len(r := pods.running()) == 2
                     and all(exporter_step(x) >= 30 for x in r), timeout=120)  # fmt: skip
            wait_for("Prometheus scraping both", lambda: len(mon.query(
                f'up{{namespace="{ns}", container="trainguard-exporter"}} == 1')) == 2, timeout=30)  # fmt: skip
            wait_for("Prometheus settled after its last reload", mon.settled, timeout=30)
            a = min(pods.running(), key=lambda r: r.rank)
            old = {r.name for r in pods.running()}
            checks: dict[str, Callable[[], bool]] = {
                "cordon": lambda: bool(cluster.core.read_node(a.node).spec.unschedulable),
                "resumed": lambda: len(resumed_from(pods, old)) == 2,
                "action": lambda: bool(records(cluster, ns)),
                "done": lambda: bool(r := records(cluster, ns)) and all(x["phase"] in FINAL for x in r),
            }
            seen: dict[str, float] = {}
            t0 = time.monotonic()
            fault.inject(cluster, ns, a)
            deadline = t0 + 180
            while time.monotonic() < deadline and not all(s in seen for s in fault.stages):
                now = time.monotonic()
                for stage, check in checks.items():
                    if stage not in seen and check():
                        seen[stage] = now - t0
                time.sleep(0.05 if "cordon" not in seen and "action" not in seen else 0.1)
            if not all(s in seen for s in fault.stages):
                raise RuntimeError(f"{kind} in {ns} did not finish: {seen}; records {records(cluster, ns)}")
            return {f"{stage}_s": seen[stage] for stage in STAGES if stage in seen}
    finally:
        batch = client.BatchV1Api(cluster.api)
        batch.delete_namespaced_job(JOB, ns, propagation_policy="Background")
        cluster.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        wait_for("pods gone", lambda: not cluster.core.list_namespaced_pod(ns).items, timeout=60)
        cluster.core.delete_namespace(ns)
        restore(cluster.core)


def plan(injections: int, per_class: int, kinds: list[str]) -> list[tuple[str, str]]:
    """(class, path) in the order run: round by round, so each class and path sees the same drift."""
    want = {(k, p): (injections if k == "xid-79" else per_class) for k in kinds for p in FAULTS[k].paths}
    order: list[tuple[str, str]] = []
    for i in range(max(want.values(), default=0)):
        order += [kp for kp, n in want.items() if i < n]
    return order


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--injections", type=int, default=20, help="XID 79 injections per path (default 20)")
    p.add_argument(
        "--per-class", type=int, default=5, help="injections per path of each other class (default 5)"
    )
    p.add_argument("--classes", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
    p.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "pipeline.json")
    args = p.parse_args()
    kinds = [k for k in args.classes.split(",") if k]
    if unknown := sorted(set(kinds) - set(FAULTS)):
        p.error(f"unknown classes {unknown}")
    if "xid-79" not in kinds:
        p.error("xid-79 gives the headline figures: keep it")
    group_wait = TIMING["P0"]["group_wait"]
    bound = SCRAPE_SECONDS + EVAL_SECONDS + float(group_wait.rstrip("s")) + 2
    order = plan(args.injections, args.per_class, kinds)
    results: dict[str, dict[str, list[dict[str, float]]]] = {
        k: {p: [] for p in FAULTS[k].paths} for k in kinds
    }
    workdir = Path(tempfile.mkdtemp(prefix="trainguard-bench-"))
    t_start = time.monotonic()
    with local_control_plane(nodes=3) as plane:
        cluster = Cluster(plane.kubeconfig, workdir)
        cluster.install(prometheus_operator_crds())
        with Sink().serve() as sink, Monitoring(cluster.api, workdir) as mon:
            cluster.start_operator(priority=100, extra=("--alertmanager-url", mon.alertmanager))
            try:
                for i, (kind, path) in enumerate(order):
                    figures = one(cluster, mon, sink, kind=kind, path=path, workdir=workdir / f"run-{i}")
                    results[kind][path].append(figures)
                    shown = "  ".join(f"{s} {figures[f'{s}_s']:5.2f}s" for s in STAGES if f"{s}_s" in figures)
                    print(f"[{i + 1}/{len(order)}] {kind:10s} {path:20s} {shown}", flush=True)
            finally:
                cluster.stop_all_operators()
    summary: dict[str, Any] = {
        "conditions": {
            "injections_per_path": args.injections, "injections_per_class_and_path": args.per_class,
            "scrape_interval_s": SCRAPE_SECONDS,
            "evaluation_interval_s": EVAL_SECONDS, "p0_group_wait": group_wait,
            "prometheus_path_bound_s": bound, "fault": FAULTS["xid-79"].description,
            "job": "2-pod Indexed Job, 8 GPUs per pod, 3 fake nodes", "cpus": os.cpu_count(),
            "python": platform.python_version(), "machine": platform.platform(),
            "wall_s": round(time.monotonic() - t_start, 1),
        },
        "paths": {path: summarise(runs) for path, runs in results["xid-79"].items()},
        "classes": {kind: {"fault": FAULTS[kind].description,
                           "paths": {path: summarise(runs) for path, runs in by_path.items()}}
                    for kind, by_path in results.items()},
    }  # fmt: skip
    print(
        f"\n{'path':16s} {'n':>3s} {'cordon p50':>11s} {'cordon p95':>11s} {'resumed p50':>12s} {'resumed p95':>12s}"
    )
    for path, row in summary["paths"].items():
        print(f"{path:16s} {row['n']:3d} {row['cordon_p50_s']:10.2f}s {row['cordon_p95_s']:10.2f}s "
              f"{row['resumed_p50_s']:11.2f}s {row['resumed_p95_s']:11.2f}s")  # fmt: skip
    print("\nby fault class (p50 / p95, seconds from the fault; '-' where the class does not do it)")
    print(f"{'class':11s} {'path':20s} {'n':>3s} " + " ".join(f"{s:>13s}" for s in STAGES))
    for kind, entry in summary["classes"].items():
        for path, row in entry["paths"].items():
            cells = [f"{row[f'{s}_p50_s']:5.1f} / {row[f'{s}_p95_s']:5.1f}" if f"{s}_p50_s" in row else "-"
                     for s in STAGES]  # fmt: skip
            print(f"{kind:11s} {path:20s} {row['n']:3d} " + " ".join(f"{c:>13s}" for c in cells))
    fast, prom = summary["paths"][PATHS[0]], summary["paths"][PATHS[1]]
    print(f"\ntargets: fast path cordon p95 < 2s: {fast['cordon_p95_s']:.2f}s; Prometheus path cordon p95 < "
          f"scrape {SCRAPE_SECONDS}s + evaluation {EVAL_SECONDS}s + group_wait {group_wait} + 2s = {bound:.0f}s: "
          f"{prom['cordon_p95_s']:.2f}s; the product's bar, 30s")  # fmt: skip
    print(f"conditions: {json.dumps(summary['conditions'])}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
