#!/usr/bin/env python3
"""Operator and rule scale: how trainguard's costs grow with the number of TrainingJobMonitors.

Two parts, run one after the other so they do not share the CPUs:

rules    (bench/scenarios/scale_rules.py) a real Prometheus with the per-monitor rule groups that
         `trainguard render --format prometheus` produces for N monitors, scraping synthetic series
         for N jobs of --pods-per-monitor pods; then the same series with one shared group that reads
         per-job thresholds as series. Reads prometheus_rule_group_last_duration_seconds (per group,
         averaged over two evaluation rounds), Prometheus's CPU seconds per round and its memory.
         At the --rule-shared-only points only the shared group runs (per-monitor groups would not fit);
         at the --rule-distributed points the shared group runs on Thanos too (Receive, Query, Ruler);
         at the --rule-concurrent points on Prometheus 3 too, without and with concurrent-rule-eval.
cluster  (bench/scenarios/scale_cluster.py) the local control plane (e2e/controlplane) with --nodes
         fake GPU nodes and the operator; --monitors are cumulative steps (100 then 500: 400 more
         applied on top of the first 100), each with --pods-per-monitor bare pods created through the
         operator's webhook. Per step: time from apply to all Ready, the operator's API requests per
         reconcile (the apiserver's count, by FlowSchema), its RSS (/proc), and the cordon latency of
         a P0 posted to its receiver while the step's monitors reconcile and again in a steady window.

    python bench/scale.py [--monitors 100,500] [--nodes 500] [--pods-per-monitor 8]
                          [--rule-monitors 100,250,500] [--rule-shared-only 1000,2000]
                          [--rule-distributed 100,500] [--rule-concurrent 2000] [--quick]

Prints a table and the findings on stdout, progress on stderr, and writes bench/results/scale.json
(not with --quick unless -o is given). The machine is small (2 cores) and shared: absolute figures
are noisy; the ratios between steps and between variants are what the run is for.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
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
from trainguard.render.shared import PER_MONITOR, SHARED  # noqa: E402


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def prometheus3() -> str | None:
    """The upstream toolchain's Prometheus 3 (`make upstream-tools`), where built."""
    from tests.toolchains import find_tool  # noqa: PLC0415

    return find_tool("upstream", "prometheus")


def image_malloc_arena_max() -> str:
    """The image's MALLOC_ARENA_MAX (its Dockerfile's ENV): the operator is measured as the image runs it."""
    found = re.search(r"MALLOC_ARENA_MAX=(\d+)", (ROOT / "Dockerfile").read_text())
    return found.group(1) if found else ""


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "kubernetes": K8S_VERSION}
    if os.environ.get("MALLOC_ARENA_MAX"):  # the operator inherits it: glibc's malloc arenas (its RSS)
        out["malloc_arena_max"] = os.environ["MALLOC_ARENA_MAX"]
    for key, prom in (("prometheus", shutil.which("prometheus")), ("prometheus3", prometheus3())):
        if prom:
            first = subprocess.run(
                [prom, "--version"], check=False, capture_output=True, text=True
            ).stdout.splitlines()
            out[key] = first[0] if first else "?"
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
        pts = [p for p in rules["points"] if "per-monitor" in p]
        xs = [p["monitors"] for p in pts]
        per = [p["per-monitor"]["eval_sum_ms"] for p in pts]
        shared = [p["shared"]["eval_sum_ms"] for p in pts]
        cpu = [p["per-monitor"]["prometheus_cpu_s_per_round"] for p in pts]
        if pts:  # none when only the shared form ran (--rule-monitors '')
            out.append(f"rules: per-monitor groups, evaluation time per monitor grows x{per_monitor_growth(xs, per)} "
                       f"from {xs[0]} to {xs[-1]} monitors (1.0 = linear); Prometheus CPU per round x"
                       f"{per_monitor_growth(xs, cpu)}; shared group x{per_monitor_growth(xs, shared)}")  # fmt: skip
            out.append(f"rules: at {xs[-1]} monitors the shared group takes {shared[-1]:.0f} ms per round against "
                       f"{per[-1]:.0f} ms summed over {xs[-1]} per-monitor groups ({per[-1] / max(shared[-1], 1e-9):.1f}x); "
                       f"interval {rules['interval']}")  # fmt: skip
        for p in pts:
            a, b = p["per-monitor"]["prometheus_cpu_s_per_round"], p["shared"]["prometheus_cpu_s_per_round"]
            out.append(f"rules: at {p['monitors']} monitors Prometheus spends {b:.2f} s of CPU per round on the "
                       f"shared form against {a:.2f} s on the per-monitor form: {b / max(a, 1e-9):.2f} of it "
                       f"(target at 500: at most 0.33)")  # fmt: skip
        every = rules["points"]
        sx = [p["monitors"] for p in every]
        scpu = [p["shared"]["prometheus_cpu_s_per_round"] for p in every]
        srss = [p["shared"]["prometheus_rss_mib"] for p in every]
        out.append(f"rules: shared form from {sx[0]} to {sx[-1]} monitors: Prometheus CPU per round per monitor "
                   f"x{per_monitor_growth(sx, scpu)}, memory per monitor x{per_monitor_growth(sx, srss)} "
                   f"(1.0 = linear; {scpu[-1]:.2f} s per {rules['interval']} round at {sx[-1]})")  # fmt: skip
        for p in every:
            t = p.get("distributed")
            if t:
                b = p["shared"]
                out.append(f"rules on Thanos at {p['monitors']} monitors: the Ruler and Query spend "
                           f"{t['ruler_query_cpu_s_per_round']:.2f} s of CPU per round ({t['eval_sum_ms']:.0f} ms of "
                           f"evaluation) against {b['prometheus_cpu_s_per_round']:.2f} s for one Prometheus that also "
                           f"scrapes; Receive {t['receive_cpu_s_per_round']:.2f} s, the scraper "
                           f"{t['scraper_cpu_s_per_round']:.2f} s; {t['alert_series']} alert series "
                           f"(one Prometheus: {b['alert_series']})")  # fmt: skip
        for p, seq, conc in both(rules, "shared-3", "shared-3-concurrent"):
            out.append(f"rules at {p['monitors']} monitors on Prometheus 3: the shared group takes "
                       f"{seq['eval_sum_ms']:.0f} ms one rule after the other, {conc['eval_sum_ms']:.0f} ms with "
                       f"concurrent-rule-eval (its rules' own times sum to {conc['rule_eval_sum_ms'] or 0:.0f} ms), "
                       f"{conc['eval_sum_ms'] / max(seq['eval_sum_ms'], 1e-9):.2f} of it; CPU per round "
                       f"{seq['prometheus_cpu_s_per_round']:.2f} and {conc['prometheus_cpu_s_per_round']:.2f} s; "
                       f"Prometheus 2.42: {p['shared']['eval_sum_ms']:.0f} ms, interval {rules['interval']}")  # fmt: skip
        for p, t, ts in both(rules, "distributed", "distributed-split"):
            out.append(f"rules on Thanos at {p['monitors']} monitors, the shared group in {rules.get('split_parts', '?')} "
                       f"groups: the slowest takes {ts.get('group_max_ms', 0):.0f} ms against "
                       f"{t.get('group_max_ms', t['eval_sum_ms']):.0f} ms for the one group (interval {rules['interval']}); "
                       f"the Ruler and Query {ts['ruler_query_cpu_s_per_round']:.2f} against "
                       f"{t['ruler_query_cpu_s_per_round']:.2f} s of CPU per round; {ts['alert_series']} alert series "
                       f"against {t['alert_series']}")  # fmt: skip
        p3 = [p for p in every if p.get("shared-3")]
        if len(p3) > 1:
            x3 = [p["monitors"] for p in p3]
            c3 = [p["shared-3"]["prometheus_cpu_s_per_round"] for p in p3]
            e3 = [p["shared-3"]["eval_sum_ms"] for p in p3]
            out.append(f"rules on Prometheus 3 (one rule after the other), shared form from {x3[0]} to {x3[-1]} monitors: "
                       f"CPU per round per monitor x{per_monitor_growth(x3, c3)}, evaluation per monitor "
                       f"x{per_monitor_growth(x3, e3)} (1.0 = linear; "
                       + ", ".join(f"{c:.2f} s" for c in c3) + f" per {rules['interval']} round at "
                       + ", ".join(str(x) for x in x3) + ")")  # fmt: skip
        for p, one, sp in both(rules, "shared", "shared-split"):
            out.append(f"rules at {p['monitors']} monitors on Prometheus 2.42, the shared group in {sp['groups']} "
                       f"groups: the slowest takes {sp['group_max_ms']:.0f} ms, all of them {sp['eval_sum_ms']:.0f} ms, "
                       f"against {one['group_max_ms']:.0f} ms for the one group (interval {rules['interval']}); "
                       f"iterations missed {sp['iterations_missed']:.0f} against {one['iterations_missed']:.0f}; CPU "
                       f"per round {sp['prometheus_cpu_s_per_round']:.2f} against {one['prometheus_cpu_s_per_round']:.2f} s; "
                       f"{sp['alert_series']} alert series against {one['alert_series']}")  # fmt: skip
    cl = result.get("cluster")
    if cl and cl.get("stages"):
        st = cl["stages"]
        for s in st:
            w = s["steady_window"]
            n = s["monitors"]
            mean = s["apply_window"].get("reconcile_mean_ms") or 0
            passes = w.get("resyncs", 0) / n if n else 0
            out.append(f"operator at {n} monitors, steady window of {w['seconds']} s ({passes:.1f} resync passes "
                       f"over every monitor in it, {w.get('resync_writes', '?')} monitors written by them; resync "
                       f"every {result['conditions']['resync_s']} s): {w.get('lists', '?')} LISTs, {w['writes']} "
                       f"writes ({w.get('status_writes', '?')} of them monitor status), {w['reconciles']} "
                       f"reconciles" + ("" if passes >= 1 else " (NO whole resync pass fell in this window)"))  # fmt: skip
            out.append(f"operator at {n} monitors: {w['requests_per_s']} API requests/s steady; RSS "
                       f"{s['rss_steady_mib']['max']} MiB; {mean:.0f} ms a reconcile during the apply; "
                       f"{s['apply_window'].get('reconciles', '?')} reconciles and "
                       f"{s['apply_window'].get('repeated_creations', '?')} creations handed over again "
                       f"(nothing done) during the apply")  # fmt: skip
            b = s.get("cordons_during_apply")
            if b and b["cordoned"]:
                out.append(f"operator at {n} monitors: {b['cordoned']} of {b['samples']} P0s posted while the step's "
                           f"monitors reconciled cordoned their node in {b['p50_s']} s at the median, {b['max_s']} s at "
                           f"most (target: p99 under 2 s; {b['samples']} samples bound a p99 only by their maximum)")  # fmt: skip
            r = s["ready"]
            out.append(f"operator at {n} monitors: the {s['applied']} applied all Ready {r['all_ready_s']} s from "
                       f"the apply's start (target: 120 s), {r.get('after_apply_end_s', '?')} s after its end (the "
                       f"apply took {s['apply_s']} s, one server-side apply after the other)")  # fmt: skip
            if cores := s.get("apply_window_cores"):
                out.append(f"operator at {n} monitors: cores in use from the apply's start to the last Ready "
                           f"(of {result['conditions']['cpus']}): "
                           + ", ".join(f"{k} {v:.2f}" for k, v in sorted(cores.items(), key=lambda kv: -kv[1]))
                           + f"; {sum(cores.values()):.2f} in all")  # fmt: skip
            cpu = s.get("operator_cpu")
            if cpu and cpu.get("monitors_per_core_s"):
                rate = cpu["monitors_per_core_s"]
                out.append(f"operator at {n} monitors: {cpu['ms_per_monitor']} ms of its own CPU per monitor made "
                           f"Ready, {rate} monitors/s on one core of its own (2,000 in {2000 / rate:.0f} s); "
                           f"steady {s.get('steady_cpu_cores', 0):.2f} of a core")  # fmt: skip
    out += remediation_first_findings(result.get("clusters") or [])
    return out


def remediation_first_findings(clusters: list[dict[str, Any]]) -> list[str]:
    """The same steps with the operator's --remediation-first-seconds at each value, side by side."""
    if len(clusters) < 2:
        return []
    out = []
    for i, stage in enumerate(clusters[0]["stages"]):
        cells = []
        for cl in clusters:
            if i >= len(cl["stages"]):
                continue
            s = cl["stages"][i]
            b = s.get("cordons_during_apply") or {}
            cells.append(f"{cl['remediation_first_s']:g} s: cordons during the apply {b.get('p50_s')} s median, "
                         f"{b.get('max_s')} s at most ({b.get('cordoned')} of {b.get('samples')}), all Ready in "
                         f"{s['ready']['all_ready_s']} s")  # fmt: skip
        out.append(
            f"operator at {stage['monitors']} monitors with --remediation-first-seconds " + "; ".join(cells)
        )
    return out


def burst_cell(stage: dict[str, Any]) -> str:
    """The cordons during a step's apply: median/max (samples), or the one sample of older results."""
    b = stage.get("cordons_during_apply")
    if not b:
        return f"{stage['cordon_during_apply']['cordon_s']}s"
    return f"{b['p50_s']}/{b['max_s']}s ({b['samples']})"


def both(
    rules: dict[str, Any], a: str, b: str
) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """The points where variants `a` and `b` both ran, each with the two readings."""
    return [(p, p[a], p[b]) for p in rules["points"] if p.get(a) and p.get(b)]


def print_table(result: dict[str, Any]) -> None:
    rules = result.get("rules")
    if rules:
        print(f"\nPrometheus rule evaluation ({rules['rules_per_monitor_group']} rules per monitor group, "
              f"interval {rules['interval']}, {rules['rules_in_shared_group']} rules in the shared group, thresholds as series)")  # fmt: skip
        print(f"{'monitors':>8} {'series':>8} | {'groups':>6} {'eval sum':>9} {'p50/group':>9} {'cpu/round':>9} "
              f"{'rss':>6} {'load':>6} | {'shared eval':>11} {'cpu/round':>9} {'rss':>6}")  # fmt: skip
        for p in rules["points"]:
            a, b = p.get("per-monitor"), p["shared"]
            left = (f"{a['groups']:>6} {a['eval_sum_ms']:>7.0f}ms {a['group_p50_ms']:>7.1f}ms "
                    f"{a['prometheus_cpu_s_per_round']:>8.2f}s {a['prometheus_rss_mib']:>4}Mi {a['start_to_ready_s']:>5.1f}s"
                    if a else f"{'(shared form only)':>50}")  # fmt: skip
            print(f"{p['monitors']:>8} {b['series']:>8} | {left} | {b['eval_sum_ms']:>9.0f}ms "
                  f"{b['prometheus_cpu_s_per_round']:>8.2f}s {b['prometheus_rss_mib']:>4}Mi")  # fmt: skip
    if rules and any("distributed" in p for p in rules["points"]):
        print("\nthe shared group on Thanos (3 Receive, replication factor 2, Query, Ruler; a Prometheus scraping and "
              "remote-writing), beside the shared group on one Prometheus")  # fmt: skip
        print(f"{'monitors':>8} {'alerts':>6} | {'ruler eval':>10} {'ruler+query':>11} {'receive':>8} {'scraper':>8} "
              f"{'rss r+q/recv/scr':>17} | {'one Prometheus':>14} {'eval':>8}")  # fmt: skip
        for p in rules["points"]:
            t, b = p.get("distributed"), p["shared"]
            if not t:
                continue
            m = t["rss_mib"]
            print(f"{p['monitors']:>8} {t['alert_series']:>6} | {t['eval_sum_ms']:>8.0f}ms "
                  f"{t['ruler_query_cpu_s_per_round']:>10.2f}s {t['receive_cpu_s_per_round']:>7.2f}s "
                  f"{t['scraper_cpu_s_per_round']:>7.2f}s {m['ruler_query']:>5}/{m['receive']:>5}/{m['scraper']:>5}Mi | "
                  f"{b['prometheus_cpu_s_per_round']:>13.2f}s {b['eval_sum_ms']:>6.0f}ms")  # fmt: skip
    if rules and any("distributed-split" in p for p in rules["points"]):
        print(
            f"\nthe shared group on Thanos, one group against the same rules in at most {rules.get('split_parts', '?')} groups"
        )
        print(f"{'monitors':>8} | {'one group':>9} {'ruler+query':>11} {'alerts':>6} | {'slowest':>8} {'all':>8} "
              f"{'ruler+query':>11} {'alerts':>6}")  # fmt: skip
        for p, t, ts in both(rules, "distributed", "distributed-split"):
            print(f"{p['monitors']:>8} | {t['eval_sum_ms']:>7.0f}ms {t['ruler_query_cpu_s_per_round']:>10.2f}s "
                  f"{t['alert_series']:>6} | {ts['group_max_ms']:>6.0f}ms {ts['eval_sum_ms']:>6.0f}ms "
                  f"{ts['ruler_query_cpu_s_per_round']:>10.2f}s {ts['alert_series']:>6}")  # fmt: skip
    if rules and any("shared-3" in p for p in rules["points"]):
        print("\nthe shared group on Prometheus 3, one rule after the other and with concurrent-rule-eval")
        print(f"{'monitors':>8} | {'P2.42 eval':>10} | {'P3 eval':>8} {'cpu/round':>9} {'rss':>6} | "
              f"{'concurrent':>10} {'rules sum':>9} {'cpu/round':>9} {'rss':>6} {'alerts':>6}")  # fmt: skip
        for p, seq, conc in both(rules, "shared-3", "shared-3-concurrent"):
            print(f"{p['monitors']:>8} | {p['shared']['eval_sum_ms']:>8.0f}ms | {seq['eval_sum_ms']:>6.0f}ms "
                  f"{seq['prometheus_cpu_s_per_round']:>8.2f}s {seq['prometheus_rss_mib']:>4}Mi | "
                  f"{conc['eval_sum_ms']:>8.0f}ms {conc['rule_eval_sum_ms'] or 0:>7.0f}ms "
                  f"{conc['prometheus_cpu_s_per_round']:>8.2f}s {conc['prometheus_rss_mib']:>4}Mi {conc['alert_series']:>6}")  # fmt: skip
    if rules and any("shared-split" in p for p in rules["points"]):
        print(f"\nthe shared group on Prometheus 2.42, one group against the same rules in at most "
              f"{rules.get('split_parts', '?')} groups (--shared-rule-groups)")  # fmt: skip
        print(f"{'monitors':>8} | {'one group':>9} {'missed':>6} {'cpu/round':>9} {'alerts':>6} | {'groups':>6} "
              f"{'slowest':>8} {'all':>8} {'missed':>6} {'cpu/round':>9} {'alerts':>6}")  # fmt: skip
        for p, one, sp in both(rules, "shared", "shared-split"):
            print(f"{p['monitors']:>8} | {one['group_max_ms']:>7.0f}ms {one['iterations_missed']:>6.0f} "
                  f"{one['prometheus_cpu_s_per_round']:>8.2f}s {one['alert_series']:>6} | {sp['groups']:>6} "
                  f"{sp['group_max_ms']:>6.0f}ms {sp['eval_sum_ms']:>6.0f}ms {sp['iterations_missed']:>6.0f} "
                  f"{sp['prometheus_cpu_s_per_round']:>8.2f}s {sp['alert_series']:>6}")  # fmt: skip
    for cl in result.get("clusters") or [result.get("cluster")]:
        if not cl or not cl.get("stages"):
            continue
        idle = cl["cordon_idle"]["cordon_s"]
        first = cl.get("remediation_first_s")
        flag = "" if first is None else f"; --remediation-first-seconds {first:g}"
        flag += f"; --rule-form {cl.get('rule_form', PER_MONITOR)}"
        print(f"\noperator on the local control plane ({result['conditions']['nodes']} fake nodes; cordon with no "
              f"monitors: {idle}s; RSS idle {cl['rss_idle_mib']} MiB{flag})")  # fmt: skip
        print(f"{'monitors':>8} {'pods':>6} | {'all Ready':>9} {'mon/s':>6} {'req/rec':>7} {'rd/wr':>9} "
              f"{'rec ms':>7} {'cpu/mon':>8} | {'steady req/s':>12} {'LISTs':>5} {'writes':>6} | {'RSS max':>8} | {'cordon apply p50/max (n)':>24} {'steady':>7}")  # fmt: skip
        for s in cl["stages"]:
            a, w = s["apply_window"], s["steady_window"]
            print(f"{s['monitors']:>8} {s['monitors'] * result['conditions']['pods_per_monitor']:>6} | "
                  f"{s['ready']['all_ready_s']:>8.1f}s {s['ready']['monitors_per_s']:>6.2f} "
                  f"{a['requests_per_reconcile'] or 0:>7.1f} {a['reads_per_reconcile'] or 0:>4.1f}/{a['writes_per_reconcile'] or 0:<4.1f} "
                  f"{a['reconcile_mean_ms'] or 0:>7.0f} {(s.get('operator_cpu') or {}).get('ms_per_monitor', 0):>6.0f}ms | {w['requests_per_s']:>12.1f} {w.get('lists', 0):>5} {w['writes']:>6} | "
                  f"{s['rss_steady_mib']['max']:>6.0f}Mi | {burst_cell(s):>24} "
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
    p.add_argument("--rule-shared-only", default="1000,2000",
                   help="Prometheus points with the shared form alone (default 1000,2000)")  # fmt: skip
    p.add_argument("--rule-distributed", default="100,500",
                   help="points where the shared group runs on Thanos too (default 100,500)")  # fmt: skip
    p.add_argument(
        "--rule-split",
        default="2000",
        help="points where the shared group also runs split (--shared-rule-groups) on Prometheus 2.42 (default 2000)",
    )
    p.add_argument(
        "--rule-split-groups",
        type=int,
        default=4,
        help="the groups the shared group is split into at --rule-split points (default 4)",
    )
    p.add_argument(
        "--rule-rounds",
        type=int,
        default=2,
        help="evaluation rounds read per rule variant, CPU averaged over them (default 2)",
    )
    p.add_argument("--rule-concurrent", default="",
                   help="points where the shared group also runs on Prometheus 3, one rule after the other and "
                        "with concurrent-rule-eval (default none; `make upstream-tools` builds it)")  # fmt: skip
    p.add_argument("--rule-gpus-per-pod", type=int, default=1,
                   help="GPU series per pod in the synthetic data (default 1: 8 would be 600k series at 500 jobs)")  # fmt: skip
    p.add_argument("--resync-seconds", type=float, default=60.0, help="the operator's resync (default 60)")
    p.add_argument("--pods-seconds", type=float, default=15.0, help="its pod count period (default 15)")
    p.add_argument("--burst-cordons", type=int, default=6,
                   help="canaries per step, one P0 each while the step's monitors reconcile (default 6)")  # fmt: skip
    p.add_argument("--steady-seconds", type=float, default=None,
                   help="steady window per step (default twice the resync and 10 s: the window leaves out the "
                        "P0 in its middle, and each half must hold a resync pass)")  # fmt: skip
    p.add_argument("--remediation-first", default="",
                   help="the operator's --remediation-first-seconds, a comma list: the operator's steps run once "
                        "per value, each on a fresh control plane, side by side (default: its default, once)")  # fmt: skip
    p.add_argument("--rule-form", choices=[PER_MONITOR, SHARED], default=PER_MONITOR,
                   help="the operator's --rule-form (default per-monitor, its default)")  # fmt: skip
    p.add_argument("--reconcile-workers", type=int, default=None,
                   help="the operator's --reconcile-workers (default: its default)")  # fmt: skip
    p.add_argument("--kubelet-renew-seconds", type=float, default=10.0,
                   help="how often each fake node's Lease is renewed (default 10, a real kubelet's)")  # fmt: skip
    p.add_argument("--kubelet-status-seconds", type=float, default=300.0,
                   help="how often each fake node posts its Ready condition (default 300, a real kubelet's "
                        "nodeStatusReportFrequency)")  # fmt: skip
    p.add_argument("--profile", type=Path,
                   help="py-spy samples the operator into this file (collapsed stacks; pip install py-spy)")  # fmt: skip
    p.add_argument("--skip", choices=["rules", "cluster"], action="append", default=[])
    p.add_argument("--quick", action="store_true",
                   help="10 then 30 monitors, 40 nodes, 2 pods each, rules at 10 and 30, short windows; nothing written")  # fmt: skip
    p.add_argument("--malloc-arena-max", default=None,
                   help="the operator's MALLOC_ARENA_MAX (default: the image's, from the Dockerfile; '' for "
                        "glibc's own, 8 arenas a core)")  # fmt: skip
    p.add_argument("-o", "--output", type=Path, help="default bench/results/scale.json (none with --quick)")
    args = p.parse_args()
    arenas = image_malloc_arena_max() if args.malloc_arena_max is None else args.malloc_arena_max
    if arenas:  # the operator inherits the environment (e2e/cluster.py's start_operator)
        os.environ["MALLOC_ARENA_MAX"] = arenas
    else:
        os.environ.pop("MALLOC_ARENA_MAX", None)
    if args.quick:
        args.monitors, args.nodes, args.pods_per_monitor, args.rule_monitors = "10,30", 40, 2, "10,30"
        args.rule_shared_only, args.rule_distributed, args.rule_split = "60", "30", "30,60"
        args.resync_seconds, args.burst_cordons = 20.0, 2
    if args.steady_seconds is None:
        args.steady_seconds = 2 * args.resync_seconds + 10
    output = args.output or (None if args.quick else ROOT / "bench" / "results" / "scale.json")
    steps, shared_only = ints(args.monitors), ints(args.rule_shared_only)
    points = sorted(set(ints(args.rule_monitors)) | set(shared_only) | set(ints(args.rule_concurrent))
                    | set(ints(args.rule_split)))  # fmt: skip
    wall0 = time.monotonic()
    result: dict[str, Any] = {
        "conditions": {
            "cpus": os.cpu_count(), "machine": platform.platform(), "versions": versions(),
            "flags": " ".join(sys.argv[1:]), "monitor_steps": steps, "rule_points": points, "rule_shared_only": shared_only, "rule_distributed": ints(args.rule_distributed), "rule_concurrent": ints(args.rule_concurrent), "rule_split": ints(args.rule_split), "rule_split_groups": args.rule_split_groups, "rule_rounds": args.rule_rounds, "nodes": args.nodes,
            "pods_per_monitor": args.pods_per_monitor, "rule_gpus_per_pod": args.rule_gpus_per_pod,
            "resync_s": args.resync_seconds, "rule_form": args.rule_form, "pods_s": args.pods_seconds, "burst_cordons": args.burst_cordons, "steady_window_s": args.steady_seconds,
            "load_average_at_start": list(os.getloadavg()),
            "noise": "2 cores shared with other work: absolute times are noisy, compare ratios",
        },
    }  # fmt: skip
    if "rules" not in args.skip:
        t = time.monotonic()
        result["rules"] = scale_rules.run(
            points,
            pods=args.pods_per_monitor,
            gpus=args.rule_gpus_per_pod,
            nodes=args.nodes,
            rounds=args.rule_rounds,
            shared_only=tuple(shared_only),
            distributed_at=tuple(ints(args.rule_distributed)),
            concurrent_at=tuple(ints(args.rule_concurrent)),
            prometheus3=prometheus3(),
            split_at=tuple(ints(args.rule_split)),
            split_parts=args.rule_split_groups,
        )
        result["rules"]["wall_s"] = round(time.monotonic() - t, 1)
    if "cluster" not in args.skip:
        variants: list[float | None] = [float(v) for v in args.remediation_first.split(",") if v.strip()] or [
            None
        ]
        result["conditions"]["remediation_first_s"] = variants
        result["conditions"]["reconcile_workers"] = args.reconcile_workers
        result["conditions"]["kubelet_renew_s"] = args.kubelet_renew_seconds
        result["conditions"]["kubelet_status_s"] = args.kubelet_status_seconds
        for first in variants:
            t = time.monotonic()
            workdir = Path(tempfile.mkdtemp(prefix="tg-scale-"))
            try:
                with local_control_plane(
                    nodes=args.nodes, kubelet_renew_s=args.kubelet_renew_seconds,
                    kubelet_status_s=args.kubelet_status_seconds,
                ) as plane:  # fmt: skip
                    cl = scale_cluster.run(
                        plane, workdir, steps, nodes=args.nodes, pods_per_monitor=args.pods_per_monitor,
                        resync_s=args.resync_seconds, pods_s=args.pods_seconds, steady_s=args.steady_seconds,
                        burst_cordons=args.burst_cordons, remediation_first_s=first, rule_form=args.rule_form,
                        profile=args.profile, reconcile_workers=args.reconcile_workers,
                    )  # fmt: skip
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
            cl["wall_s"] = round(time.monotonic() - t, 1)
            result.setdefault("clusters", []).append(cl)
        # the operator's default (or the last value) is the one the tables and findings read first
        result["cluster"] = next((c for c in result["clusters"] if c["remediation_first_s"] is None),
                                 result["clusters"][-1])  # fmt: skip
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
