#!/usr/bin/env python3
"""Fault to cordon and fault to training resumed, through the whole P0 pipeline on the local control
plane: the fast path (sidecar -> operator) and the Prometheus path (exporter -> Prometheus ->
Alertmanager -> operator) measured in one run, injection by injection, with the same harness as
e2e/test_pipeline.py (real apiserver, scheduler and Job controller; exporters and train_tiny.py as
local processes; real Prometheus and Alertmanager). Prints p50 and p95 per path with the intervals used,
and writes the figures as JSON.

    python bench/pipeline.py [--injections 20] [--json bench/results/pipeline.json]

Each injection is a fresh namespace: a 2-pod Indexed Job on two of three fake GPU nodes, trained past
its first checkpoint, then an XID 79 on rank 0's GPU. Cordon time is when the node is first seen
unschedulable (polled every 50 ms); resumed is when both replacement trainers have logged that they
resume from the checkpoint (polled every 100 ms). The two paths alternate, so drift hits both alike.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from kubernetes import client  # noqa: E402

from e2e.cluster import Cluster, wait_for  # noqa: E402
from e2e.controlplane.local import local_control_plane, prometheus_operator_crds  # noqa: E402
from e2e.pipeline import (  # noqa: E402
    EVAL_SECONDS,
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
from e2e.podprocesses import PodProcesses  # noqa: E402
from e2e.test_remediation_cluster import _restore  # noqa: E402
from trainguard.render.routing import TIMING  # noqa: E402

PATHS = ("fast path", "Prometheus path")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def one(cluster: Cluster, mon: Monitoring, sink: Sink, fastpath: bool, workdir: Path) -> dict[str, float]:
    ns = cluster.namespace(f"bench-{uuid.uuid4().hex[:8]}")
    remediation = {"maxCordonedNodes": 100}  # each injection is a new job: its restart budget is fresh
    cluster.apply(objects(ns, sink, remediation))
    wait_for("monitor Ready", lambda: (m := cluster.get("trainguard.io/v1alpha1", "TrainingJobMonitor", ns, JOB))
             and any(c["type"] == "Ready" and c["status"] == "True" for c in (m.get("status") or {}).get("conditions", [])),
             timeout=60)  # fmt: skip
    cluster.apply([job(ns)])
    try:
        with PodProcesses(cluster.api, ns, SELECTOR, workdir, fastpath=fastpath) as pods:
            wait_for("2 trainers past a checkpoint", lambda: len(r := pods.running()) == 2
                     and all(exporter_step(x) >= 30 for x in r), timeout=120)  # fmt: skip
            wait_for("Prometheus scraping both", lambda: len(mon.query(
                f'up{{namespace="{ns}", container="trainguard-exporter"}} == 1')) == 2, timeout=30)  # fmt: skip
            wait_for("Prometheus settled after its last reload", mon.settled, timeout=30)
            a = min(pods.running(), key=lambda r: r.rank)
            old = {r.name for r in pods.running()}
            t0 = time.monotonic()
            inject(a, "xid-79")
            cordon = resumed = None
            deadline = t0 + 180
            while time.monotonic() < deadline and resumed is None:
                now = time.monotonic()
                if cordon is None and cluster.core.read_node(a.node).spec.unschedulable:
                    cordon = now - t0
                if cordon is not None and len(resumed_from(pods, old)) == 2:
                    resumed = now - t0
                time.sleep(0.05 if cordon is None else 0.1)
            if cordon is None or resumed is None:
                raise RuntimeError(f"injection in {ns} did not finish: cordon={cordon} resumed={resumed}")
            return {"cordon_s": cordon, "resumed_s": resumed}
    finally:
        batch = client.BatchV1Api(cluster.api)
        batch.delete_namespaced_job(JOB, ns, propagation_policy="Background")
        cluster.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        wait_for("pods gone", lambda: not cluster.core.list_namespaced_pod(ns).items, timeout=60)
        cluster.core.delete_namespace(ns)
        _restore(cluster.core)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--injections", type=int, default=20, help="per path (default 20)")
    p.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "pipeline.json")
    args = p.parse_args()
    group_wait = TIMING["P0"]["group_wait"]
    bound = SCRAPE_SECONDS + EVAL_SECONDS + float(group_wait.rstrip("s")) + 2
    results: dict[str, list[dict[str, float]]] = {k: [] for k in PATHS}
    workdir = Path(tempfile.mkdtemp(prefix="trainguard-bench-"))
    t_start = time.monotonic()
    with local_control_plane(nodes=3) as plane:
        cluster = Cluster(plane.kubeconfig, workdir)
        cluster.install(prometheus_operator_crds())
        with Sink().serve() as sink, Monitoring(cluster.api, workdir) as mon:
            cluster.start_operator(priority=100, extra=("--alertmanager-url", mon.alertmanager))
            try:
                for i in range(args.injections * 2):
                    path = PATHS[i % 2]
                    figures = one(cluster, mon, sink, path == PATHS[0], workdir / f"run-{i}")
                    results[path].append(figures)
                    print(f"[{i + 1}/{args.injections * 2}] {path:16s} cordon {figures['cordon_s']:5.2f}s  "
                          f"resumed {figures['resumed_s']:5.2f}s", flush=True)  # fmt: skip
            finally:
                cluster.stop_all_operators()
    summary: dict[str, Any] = {
        "conditions": {
            "injections_per_path": args.injections, "scrape_interval_s": SCRAPE_SECONDS,
            "evaluation_interval_s": EVAL_SECONDS, "p0_group_wait": group_wait,
            "prometheus_path_bound_s": bound, "fault": "xid-79 on rank 0's GPU (GPUCriticalXid, GPULost)",
            "job": "2-pod Indexed Job, 8 GPUs per pod, 3 fake nodes", "cpus": os.cpu_count(),
            "python": platform.python_version(), "machine": platform.platform(),
            "wall_s": round(time.monotonic() - t_start, 1),
        },
        "paths": {},
    }  # fmt: skip
    print(
        f"\n{'path':16s} {'n':>3s} {'cordon p50':>11s} {'cordon p95':>11s} {'resumed p50':>12s} {'resumed p95':>12s}"
    )
    for path, runs in results.items():
        cordon = [r["cordon_s"] for r in runs]
        resumed = [r["resumed_s"] for r in runs]
        row = {"n": len(runs), "cordon_p50_s": percentile(cordon, 0.5), "cordon_p95_s": percentile(cordon, 0.95),
               "resumed_p50_s": percentile(resumed, 0.5), "resumed_p95_s": percentile(resumed, 0.95),
               "cordon_mean_s": statistics.mean(cordon), "runs": runs}  # fmt: skip
        summary["paths"][path] = row
        print(f"{path:16s} {len(runs):3d} {row['cordon_p50_s']:10.2f}s {row['cordon_p95_s']:10.2f}s "
              f"{row['resumed_p50_s']:11.2f}s {row['resumed_p95_s']:11.2f}s")  # fmt: skip
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
