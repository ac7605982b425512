#!/usr/bin/env python3
"""Operator and rule scale: how trainguard's costs grow with the number of TrainingJobMonitors.

Two parts, run one after the other so they do not share the CPUs:

rules    (bench/scenarios/scale_rules.py) a real Prometheus with the per-monitor rule groups that
         `trainguard render --format prometheus` produces for N monitors, scraping synthetic series
         for N jobs of --pods-per-monitor pods; then the same series with one shared group that reads
         per-job thresholds as series. Reads prometheus_rule_group_last_duration_seconds (per group,
         averaged over two evaluation rounds), Prometheus's CPU seconds per round and its memory.
cluster  (bench/scenarios/scale_cluster.py) the local control plane (e2e/controlplane) with --nodes
         fake GPU nodes and the operator; --monitors are cumulative steps (100 then 500: 400 more
         applied on top of the first 100), each with --pods-per-monitor bare pods created through the
         operator's webhook. Per step: time from apply to all Ready, the operator's API requests per
         reconcile (the apiserver's count, by FlowSchema), its RSS (/proc), and the cordon latency of
         a P0 posted to its receiver while the step's monitors reconcile and again in a steady window.

    python bench/scale.py [--monitors 100,500] [--nodes 500] [--pods-per-monitor 8] [--quick]

Prints a table and the findings on stdout, progress on stderr, and writes bench/results/scale.json
(not with --quick unless -o is given). The machine is small (2 cores) and shared: absolute figures
are noisy; the ratios between steps and between variants are what the run is for.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from bench.scenarios import scale_cluster, scale_rules  # noqa: E402

from e2e.controlplane.local import K8S_VERSION, local_control_plane  # noqa: E402


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "kubernetes": K8S_VERSION}
    prom = shutil.which("prometheus")
    if prom:
        first = subprocess.run(
            [prom, "--version"], check=False, capture_output=True, text=True
        ).stdout.splitlines()
        out["prometheus"] = first[0] if first else "?"
    with __import__("contextlib").suppress(Exception):
        from importlib.metadata import version  # noqa: PLC0415

        out["kopf"] = version("kopf")
        out["trainguard"] = version("trainguard")
    return out


def per_monitor_growth(xs: list[int], ys: list[float]) -> float | None:
    """Cost per monitor at the largest point over cost per monitor at the smallest: 1.0 is linear."""
    if len(xs) < 2 or not ys[0]:
        return None
    return round((ys[-1] / xs[-1]) / (ys[0] / xs[0]), 2)


def findings(result: dict[str, Any]) -> list[str]:
    """What the figures say, computed from them (docs/performance.md states the why)."""
    out = []
    rules = result.get("rules")
    if rules:
        pts = rules["points"]
        xs = [p["monitors"] for p in pts]
        per = [p["per-monitor"]["eval_sum_ms"] for p in pts]
        shared = [p["shared"]["eval_sum_ms"] for p in pts]
        cpu = [p["per-monitor"]["prometheus_cpu_s_per_round"] for p in pts]
        out.append(f"rules: per-monitor groups, evaluation time per monitor grows x{per_monitor_growth(xs, per)} "
                   f"from {xs[0]} to {xs[-1]} monitors (1.0 = linear); Prometheus CPU per round x"
                   f"{per_monitor_growth(xs, cpu)}; shared group x{per_monitor_growth(xs, shared)}")  # fmt: skip
        out.append(f"rules: at {xs[-1]} monitors the shared group takes {shared[-1]:.0f} ms per round against "
                   f"{per[-1]:.0f} ms summed over {xs[-1]} per-monitor groups ({per[-1] / max(shared[-1], 1e-9):.1f}x); "
                   f"interval {rules['interval']}")  # fmt: skip
    cl = result.get("cluster")
    if cl and cl.get("stages"):
        st = cl["stages"]
        for s in st:
            w = s["steady_window"]
            n = s["monitors"]
            mean = w.get("reconcile_mean_ms") or s["apply_window"].get("reconcile_mean_ms") or 0
            out.append(f"operator at {n} monitors: resync pass ~{n * mean / 1000:.0f} s of reconciles "
                       f"(period {result['conditions']['resync_s']} s); {w['requests_per_s']} API requests/s "
                       f"steady; RSS {s['rss_steady_mib']['max']} MiB")  # fmt: skip
            cpu = s.get("operator_cpu")
            if cpu and cpu.get("monitors_per_core_s"):
                rate = cpu["monitors_per_core_s"]
                out.append(f"operator at {n} monitors: {cpu['ms_per_monitor']} ms of its own CPU per monitor made "
                           f"Ready, {rate} monitors/s on one core of its own (2,000 in {2000 / rate:.0f} s); "
                           f"steady {s.get('steady_cpu_cores', 0):.2f} of a core")  # fmt: skip
    return out


def print_table(result: dict[str, Any]) -> None:
    rules = result.get("rules")
    if rules:
        print(f"\nPrometheus rule evaluation ({rules['rules_per_monitor_group']} rules per monitor group, "
              f"interval {rules['interval']}, {len(rules['thresholds_as_series'])} thresholds as series in the shared group)")  # fmt: skip
        print(f"{'monitors':>8} {'series':>8} | {'groups':>6} {'eval sum':>9} {'p50/group':>9} {'cpu/round':>9} "
              f"{'rss':>6} {'load':>6} | {'shared eval':>11} {'cpu/round':>9} {'rss':>6}")  # fmt: skip
        for p in rules["points"]:
            a, b = p["per-monitor"], p["shared"]
            print(f"{p['monitors']:>8} {a['series']:>8} | {a['groups']:>6} {a['eval_sum_ms']:>7.0f}ms "
                  f"{a['group_p50_ms']:>7.1f}ms {a['prometheus_cpu_s_per_round']:>8.2f}s {a['prometheus_rss_mib']:>4}Mi "
                  f"{a['start_to_ready_s']:>5.1f}s | {b['eval_sum_ms']:>9.0f}ms {b['prometheus_cpu_s_per_round']:>8.2f}s "
                  f"{b['prometheus_rss_mib']:>4}Mi")  # fmt: skip
    cl = result.get("cluster")
    if cl and cl.get("stages"):
        idle = cl["cordon_idle"]["cordon_s"]
        print(f"\noperator on the local control plane ({result['conditions']['nodes']} fake nodes; cordon with no "
              f"monitors: {idle}s; RSS idle {cl['rss_idle_mib']} MiB)")  # fmt: skip
        print(f"{'monitors':>8} {'pods':>6} | {'all Ready':>9} {'mon/s':>6} {'req/rec':>7} {'rd/wr':>9} "
              f"{'rec ms':>7} {'cpu/mon':>8} | {'steady req/s':>12} {'req/rec':>7} | {'RSS max':>8} | {'cordon apply':>12} {'steady':>7}")  # fmt: skip
        for s in cl["stages"]:
            a, w = s["apply_window"], s["steady_window"]
            print(f"{s['monitors']:>8} {s['monitors'] * result['conditions']['pods_per_monitor']:>6} | "
                  f"{s['ready']['all_ready_s']:>8.1f}s {s['ready']['monitors_per_s']:>6.2f} "
                  f"{a['requests_per_reconcile'] or 0:>7.1f} {a['reads_per_reconcile'] or 0:>4.1f}/{a['writes_per_reconcile'] or 0:<4.1f} "
                  f"{a['reconcile_mean_ms'] or 0:>7.0f} {(s.get('operator_cpu') or {}).get('ms_per_monitor', 0):>6.0f}ms | {w['requests_per_s']:>12.1f} {w['requests_per_reconcile'] or 0:>7.1f} | "
                  f"{s['rss_steady_mib']['max']:>6.0f}Mi | {s['cordon_during_apply']['cordon_s']:>11}s "
                  f"{s['cordon_steady']['cordon_s']:>6}s")  # fmt: skip
    print()
    for f in findings(result):
        print(f)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--monitors", default="100,500", help="cumulative steps for the operator (default 100,500)"
    )
    p.add_argument("--nodes", type=int, default=500, help="fake GPU nodes (default 500)")
    p.add_argument("--pods-per-monitor", type=int, default=8)
    p.add_argument("--rule-monitors", default="100,250,500", help="Prometheus points (default 100,250,500)")
    p.add_argument("--rule-gpus-per-pod", type=int, default=1,
                   help="GPU series per pod in the synthetic data (default 1: 8 would be 600k series at 500 jobs)")  # fmt: skip
    p.add_argument("--resync-seconds", type=float, default=60.0, help="the operator's resync (default 60)")
    p.add_argument("--pods-seconds", type=float, default=15.0, help="its pod count period (default 15)")
    p.add_argument("--steady-seconds", type=float, default=75.0, help="steady window per step (default 75)")
    p.add_argument("--skip", choices=["rules", "cluster"], action="append", default=[])
    p.add_argument("--quick", action="store_true",
                   help="10 then 30 monitors, 40 nodes, 2 pods each, rules at 10 and 30, short windows; nothing written")  # fmt: skip
    p.add_argument("-o", "--output", type=Path, help="default bench/results/scale.json (none with --quick)")
    args = p.parse_args()
    if args.quick:
        args.monitors, args.nodes, args.pods_per_monitor, args.rule_monitors = "10,30", 40, 2, "10,30"
        args.resync_seconds, args.steady_seconds = 20.0, 30.0
    output = args.output or (None if args.quick else ROOT / "bench" / "results" / "scale.json")
    steps, points = ints(args.monitors), ints(args.rule_monitors)
    wall0 = time.monotonic()
    result: dict[str, Any] = {
        "conditions": {
            "cpus": os.cpu_count(), "machine": platform.platform(), "versions": versions(),
            "flags": " ".join(sys.argv[1:]), "monitor_steps": steps, "rule_points": points, "nodes": args.nodes,
            "pods_per_monitor": args.pods_per_monitor, "rule_gpus_per_pod": args.rule_gpus_per_pod,
            "resync_s": args.resync_seconds, "pods_s": args.pods_seconds, "steady_window_s": args.steady_seconds,
            "load_average_at_start": list(os.getloadavg()),
            "noise": "2 cores shared with other work: absolute times are noisy, compare ratios",
        },
    }  # fmt: skip
    if "rules" not in args.skip:
        t = time.monotonic()
        result["rules"] = scale_rules.run(
            points, pods=args.pods_per_monitor, gpus=args.rule_gpus_per_pod, nodes=args.nodes, rounds=2
        )
        result["rules"]["wall_s"] = round(time.monotonic() - t, 1)
    if "cluster" not in args.skip:
        t = time.monotonic()
        workdir = Path(tempfile.mkdtemp(prefix="tg-scale-"))
        try:
            with local_control_plane(nodes=args.nodes) as plane:
                result["cluster"] = scale_cluster.run(
                    plane, workdir, steps, nodes=args.nodes, pods_per_monitor=args.pods_per_monitor,
                    resync_s=args.resync_seconds, pods_s=args.pods_seconds, steady_s=args.steady_seconds,
                )  # fmt: skip
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        result["cluster"]["wall_s"] = round(time.monotonic() - t, 1)
    result["conditions"]["wall_s"] = round(time.monotonic() - wall0, 1)
    result["conditions"]["load_average_at_end"] = list(os.getloadavg())
    result["findings"] = findings(result)
    print_table(result)
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
