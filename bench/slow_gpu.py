#!/usr/bin/env python3
"""Slow-GPU detection quality (issue 25): seeded synthetic traces of GPUs slowed by 5, 10 and 20% among
normal ones, judged by the rules trainguard ships, evaluated by a real Prometheus.

Each trace is one training job of 8 GPUs (two pods of 4 on two nodes), 30 minutes of 15 s samples of
the sidecar's series: utilization, SM clock and its maximum, the throttle-reason bitmask, the PCIe link's
generation and width and their maximum. Healthy GPUs are ~93% busy with step-boundary dips, run at or
just under their 1980 MHz maximum (silicon spread up to 45 MHz, one 15 MHz clock step of jitter), and
now and then touch the power cap (bit 0x4, a few % lower clock for a minute or two).

Slow traces (one GPU, from minute 8 to the end):
  clock   the SM clock held L% low with no reason NVML reports (NVSentinel #890's silent throttling)
  brake   an external power brake: reasons 0x88 (HW slowdown + power brake), clock L% low (#1666)
  pcie    the link trained down to x8 (or Gen4) while busy; the clock is not touched: L is what it
          costs the job, which no GPU signal shows, so this class does not depend on L
Normal events (nothing may fire):
  idle-downtrain   the whole job idles 6 minutes (an evaluation, a checkpoint, a data stall): links at
                   Gen1, clocks at 345 MHz, reason gpu_idle; and one GPU left idle all along
  job-clock-dip    every GPU of the job 15-25% lower for 6 minutes (a data-centre power cap), with the
                   SW power-cap bit
  power-cap        half the GPUs at the power cap (0x4) for 10 minutes, clocks 2-5% lower each
  power-capped-job every GPU at its power cap all along, each 0-8% under the maximum clock (silicon
                   differs), so the spread between peers is up to 8%
  thermal-blip     one GPU thermally throttled (0x60, clock 20% lower) for 45-90 s, under the 2m hold
  healthy          nothing happens

How it is evaluated: the traces are written as OpenMetrics and backfilled into a TSDB with the
toolchain's `promtool tsdb create-blocks-from openmetrics`; that toolchain's Prometheus serves them, and
each alert's expression, exactly as `render/prometheus.py` renders it for a default monitor (only the
job selector widened from one training_job to the bench's namespace, so one query judges every trace),
is run as a range query at the 15 s evaluation interval. The rule's `for` is then applied in Python as
Prometheus applies it (pending at the first true evaluation, firing once it has held `for`, reset by any
evaluation that is not true). Static rules (no `for`, raw thresholds) run the same way for contrast.

A slow trace is detected when any of the three alerts fires on its slow GPU after the onset; its delay
is onset to the first firing evaluation. A false alarm is a firing episode on any other GPU (of a slow
trace or of a normal one). Precision at level L: detected / (detected + false alarms on the level's own
traces + false alarms on the normal traces).

    python bench/slow_gpu.py [--seeds 20] [--toolchain debian|upstream]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT))

from tests.processes import free_port, start, stop, wait_http  # noqa: E402
from tests.toolchains import find_tool  # noqa: E402
from trainguard.api.common import duration_seconds  # noqa: E402
from trainguard.api.load import parse_object  # noqa: E402
from trainguard.api.monitor import TrainingJobMonitor  # noqa: E402
from trainguard.render.policy import effective_policy  # noqa: E402
from trainguard.render.prometheus import rule_group  # noqa: E402

NS = "bench"
ALERTS = ("GPUPCIeLinkDegraded", "GPUClocksThrottled", "GPUClockBelowPeers")
STATIC: dict[str, str] = {
    # what a hand-written rule file does: raw thresholds, no `for`, no idea of busy or of the job
    "StaticThrottled": f'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{{namespace="{NS}"}} > 1',
    "StaticPCIeBelowMax": f'DCGM_FI_DEV_PCIE_LINK_GEN{{namespace="{NS}"}} < DCGM_FI_DEV_PCIE_MAX_LINK_GEN '
    f'or DCGM_FI_DEV_PCIE_LINK_WIDTH{{namespace="{NS}"}} < DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH',
    "StaticClockLow": f'DCGM_FI_DEV_SM_CLOCK{{namespace="{NS}"}} < 0.9 * DCGM_FI_DEV_MAX_SM_CLOCK',
}
LEVELS = (5, 10, 20)
SLOW_KINDS = ("clock", "brake", "pcie")
NORMAL_KINDS = ("idle-downtrain", "job-clock-dip", "power-cap", "power-capped-job", "thermal-blip", "healthy")
STEP_S = 15
SAMPLES = 120  # 30 minutes
ONSET = 32  # minute 8
MAX_MHZ = 1980.0
GPUS = [(pod, gpu) for pod in range(2) for gpu in range(4)]


@dataclass
class Trace:
    name: str
    kind: str
    level: int  # 0 for a normal trace
    seed: int
    slow: tuple[int, int] | None = None
    """(pod, gpu) of the slow GPU."""
    series: dict[tuple[int, int], dict[str, list[float]]] = field(default_factory=dict)


def _gpu(rng: random.Random) -> dict[str, list[float]]:
    """A healthy, busy GPU: step-boundary utilization dips, boost spread and jitter, power-cap touches."""
    spread = rng.choice([0.0, 0.0, rng.uniform(0, 45)])
    util, clock, reasons = [], [], []
    cap_left = 0
    for _ in range(SAMPLES):
        util.append(max(0.0, min(100.0, rng.gauss(93, 3) if rng.random() > 0.06 else rng.uniform(30, 70))))
        if cap_left == 0 and rng.random() < 0.01:
            cap_left = rng.randint(4, 8)
        capped = cap_left > 0
        cap_left = max(0, cap_left - 1)
        mhz = MAX_MHZ - spread - (rng.uniform(0.02, 0.05) * MAX_MHZ if capped else 0.0)
        clock.append(float(round((mhz + rng.choice((-15, 0, 0, 15))) / 15) * 15))
        reasons.append(float(0x4 if capped else 0))
    n = SAMPLES
    return {"util": util, "clock": [min(MAX_MHZ, c) for c in clock], "reasons": reasons,
            "gen": [5.0] * n, "width": [16.0] * n}  # fmt: skip


def trace(kind: str, level: int, seed: int) -> Trace:
    rng = random.Random(f"{kind}-{level}-{seed}")
    t = Trace(f"{kind}-{level}-{seed}", kind, level, seed)
    t.series = {g: _gpu(rng) for g in GPUS}
    window = range(ONSET, SAMPLES)
    if kind in SLOW_KINDS:
        t.slow = rng.choice(GPUS)
        s = t.series[t.slow]
        for i in window:
            if kind == "pcie":
                if seed % 2:
                    s["width"][i] = 8.0
                else:
                    s["gen"][i] = 4.0
                continue
            s["clock"][i] = float(round(s["clock"][i] * (1 - level / 100) / 15) * 15)
            if kind == "brake":
                s["reasons"][i] = float(0x88)
    elif kind == "idle-downtrain":
        start_at = rng.randint(ONSET, SAMPLES - 30)
        lone = rng.choice(GPUS)
        for g, s in t.series.items():
            idle = range(0, SAMPLES) if g == lone else range(start_at, start_at + 24)
            for i in idle:
                s["util"][i], s["clock"][i], s["reasons"][i] = rng.uniform(0, 2), 345.0, float(0x1)
                s["gen"][i] = 1.0
    elif kind == "job-clock-dip":
        start_at, drop = rng.randint(ONSET, SAMPLES - 30), rng.uniform(0.15, 0.25)
        for s in t.series.values():
            for i in range(start_at, start_at + 24):
                s["clock"][i] = float(round(s["clock"][i] * (1 - drop) / 15) * 15)
                s["reasons"][i] = float(0x4)
    elif kind == "power-cap":
        start_at = rng.randint(ONSET, SAMPLES - 45)
        for g in rng.sample(GPUS, 4):
            s, drop = t.series[g], rng.uniform(0.02, 0.05)
            for i in range(start_at, start_at + 40):
                s["clock"][i] = float(round(MAX_MHZ * (1 - drop) / 15) * 15)
                s["reasons"][i] = float(0x4)
    elif kind == "power-capped-job":
        for s in t.series.values():  # a heavy load at its power limit all along: each GPU's silicon differs
            drop = rng.uniform(0.0, 0.08)
            for i in range(SAMPLES):
                s["clock"][i] = float(round(MAX_MHZ * (1 - drop) / 15 + rng.choice((-1, 0, 0, 1))) * 15)
                s["reasons"][i] = float(0x4)
    elif kind == "thermal-blip":
        g, start_at, length = rng.choice(GPUS), rng.randint(ONSET, SAMPLES - 10), rng.randint(3, 6)
        s = t.series[g]
        for i in range(start_at, start_at + length):
            s["clock"][i] = float(round(s["clock"][i] * 0.8 / 15) * 15)
            s["reasons"][i] = float(0x60)
    return t


def traces(seeds: int) -> list[Trace]:
    out = [trace(k, lvl, s) for k in SLOW_KINDS for lvl in LEVELS for s in range(seeds)]
    return out + [trace(k, 0, s) for k in NORMAL_KINDS for s in range(seeds)]


def labels_of(t: Trace, pod: int, gpu: int) -> str:
    return (f'namespace="{NS}",training_job="{t.name}",pod="{t.name}-{pod}",node="node-{t.name}-{pod}",'
            f'gpu="{gpu}",UUID="GPU-{pod}-{gpu}",modelName="NVIDIA H100 80GB HBM3",Hostname="node-{t.name}-{pod}"')  # fmt: skip


SERIES = {
    "DCGM_FI_DEV_GPU_UTIL": "util", "DCGM_FI_DEV_SM_CLOCK": "clock", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "reasons",
    "DCGM_FI_DEV_PCIE_LINK_GEN": "gen", "DCGM_FI_DEV_PCIE_LINK_WIDTH": "width",
}  # fmt: skip
CONSTANT = {"DCGM_FI_DEV_MAX_SM_CLOCK": MAX_MHZ, "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": 5.0,
            "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": 16.0}  # fmt: skip


def openmetrics(ts: list[Trace], t0: int, path: Path) -> None:
    """Every series of every trace, one family at a time (OpenMetrics wants a family's samples together)."""
    with path.open("w") as f:
        for metric in (*SERIES, *CONSTANT):
            f.write(f"# TYPE {metric} gauge\n")
            for t in ts:
                for (pod, gpu), s in t.series.items():
                    lbl = labels_of(t, pod, gpu)
                    values = s[SERIES[metric]] if metric in SERIES else [CONSTANT[metric]] * SAMPLES
                    for i, v in enumerate(values):
                        f.write(f"{metric}{{{lbl}}} {v:g} {t0 + i * STEP_S}\n")
        f.write("# EOF\n")


def shipped_rules() -> dict[str, tuple[str, float]]:
    """alert -> (expression, for in seconds), as rendered for a default monitor, job selector widened."""
    monitor = parse_object({"apiVersion": "trainguard.io/v1alpha1", "kind": "TrainingJobMonitor",
                            "metadata": {"name": "one", "namespace": NS},
                            "spec": {"selector": {"matchLabels": {"app": "train"}}}}, "bench")  # fmt: skip
    assert isinstance(monitor, TrainingJobMonitor)
    group = rule_group(monitor, effective_policy(monitor, []))
    one = f'namespace="{NS}",training_job="one"'
    out = {}
    for rule in group["rules"]:
        if rule.get("alert") in ALERTS:
            assert one in rule["expr"]
            out[rule["alert"]] = (
                rule["expr"].replace(one, f'namespace="{NS}"'),
                duration_seconds(rule["for"]),
            )
    assert set(out) == set(ALERTS), "the catalogue lost one of the slow-GPU alerts"
    return out


def query_range(url: str, expr: str, start: int, end: int) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": STEP_S})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{q}", timeout=600) as resp:  # many traces at once
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def firings(result: list[dict[str, Any]], hold_s: float) -> list[tuple[dict[str, str], int]]:
    """(labels, first firing time) of each episode, applying `for` as Prometheus does: pending from the
    first true evaluation, firing once held `for`, reset by an evaluation where the expression is absent."""
    out = []
    for series in result:
        times = [int(float(ts)) for ts, _ in series["values"]]
        active_at, fired, prev = 0, False, None
        for ts in times:
            if prev is None or ts - prev > STEP_S:  # a gap: the alert was resolved in between
                active_at, fired = ts, False
            prev = ts
            if not fired and ts - active_at >= hold_s:
                out.append((series["metric"], ts))
                fired = True
    return out


def score(ts: list[Trace], fired: dict[str, list[tuple[dict[str, str], int]]], t0: int) -> dict[str, Any]:
    by_name = {t.name: t for t in ts}
    detected: dict[str, float] = {}  # slow trace -> delay
    by_alert: dict[str, set[str]] = {a: set() for a in fired}
    false_alarms: dict[str, list[str]] = {}
    for alert, episodes in fired.items():
        for labels, at in episodes:
            t = by_name[labels["training_job"]]
            pod, gpu = int(labels["pod"].rsplit("-", 1)[1]), int(labels["gpu"])
            onset = t0 + ONSET * STEP_S
            if t.slow == (pod, gpu) and at >= onset:
                detected[t.name] = min(detected.get(t.name, 1e9), at - onset)
                by_alert[alert].add(t.name)
            else:
                false_alarms.setdefault(t.name, []).append(f"{alert} on {labels['pod']}/{gpu}")
    normal_fa = sum(len(v) for k, v in false_alarms.items() if by_name[k].kind in NORMAL_KINDS)
    levels = {}
    for lvl in LEVELS:
        slow = [t for t in ts if t.level == lvl]
        if not slow:
            continue
        tp = [t for t in slow if t.name in detected]
        fa = sum(len(false_alarms.get(t.name, [])) for t in slow) + normal_fa
        delays = [detected[t.name] for t in tp]
        levels[str(lvl)] = {
            "traces": len(slow),
            "recall": round(len(tp) / len(slow), 3),
            "precision": round(len(tp) / (len(tp) + fa), 3) if tp or fa else None,
            "false_alarms": fa,
            "recall_by_kind": {
                k: round(
                    sum(t.name in detected for t in slow if t.kind == k)
                    / max(1, sum(t.kind == k for t in slow)),
                    3,
                )
                for k in SLOW_KINDS
            },
            "detected_by": {a: sum(t.name in names for t in slow) for a, names in by_alert.items()},
            "delay_s": {
                "median": statistics.median(delays),
                "p90": sorted(delays)[int(0.9 * (len(delays) - 1))],
                "max": max(delays),
            }
            if delays
            else None,
        }
    normals = {k: sum(len(false_alarms.get(t.name, [])) for t in ts if t.kind == k) for k in NORMAL_KINDS}
    return {"levels": levels, "false_alarms_by_normal_event": normals,
            "false_alarm_examples": {k: v[:3] for k, v in sorted(false_alarms.items())[:8]}}  # fmt: skip


def evaluate(ts: list[Trace], toolchain: str, workdir: Path) -> dict[str, Any]:
    promtool, prometheus = find_tool(toolchain, "promtool"), find_tool(toolchain, "prometheus")
    if promtool is None or prometheus is None:
        raise SystemExit(f"promtool and prometheus ({toolchain}) are needed: scripts/bootstrap.sh installs "
                         "Debian's, `make upstream-tools` builds upstream's")  # fmt: skip
    t0 = (int(time.time()) - 3 * 3600) // 3600 * 3600  # whole hours back: inside retention, out of the head
    openmetrics(ts, t0, workdir / "traces.om")
    data = workdir / "data"
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(workdir / "traces.om"), str(data)],
                   check=True, capture_output=True, timeout=900)  # fmt: skip
    port = free_port()
    (workdir / "prometheus.yml").write_text("global: {}\n")
    proc = start([prometheus, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
                  f"--web.listen-address=127.0.0.1:{port}"], workdir / "prometheus.log")  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/-/ready", timeout=120)
        end = t0 + (SAMPLES - 1) * STEP_S
        rules = shipped_rules()
        fired = {a: firings(query_range(url, expr, t0, end), hold) for a, (expr, hold) in rules.items()}
        static = {a: firings(query_range(url, expr, t0, end), 0.0) for a, expr in STATIC.items()}
        version = subprocess.run([prometheus, "--version"], capture_output=True, text=True, check=False)
    finally:
        stop([proc])
    return {
        "prometheus": (version.stdout or version.stderr).splitlines()[0],
        "rules": {a: {"expr": e, "for_s": h} for a, (e, h) in rules.items()},
        "shipped": score(ts, fired, t0),
        "static": score(ts, static, t0),
    }


def print_table(name: str, r: dict[str, Any]) -> None:
    print(f"\n{name}")
    print(f"{'slowdown':>8} {'recall':>7} {'precision':>9} {'false':>6} {'clock':>6} {'brake':>6} {'pcie':>6}"
          f" {'delay med':>9} {'p90':>5} {'max':>5}")  # fmt: skip
    for lvl, row in r["levels"].items():
        k, d = row["recall_by_kind"], row["delay_s"] or {}
        print(f"{lvl + '%':>8} {row['recall']:>7.3f} {row['precision'] if row['precision'] is not None else '-':>9}"
              f" {row['false_alarms']:>6} {k['clock']:>6.2f} {k['brake']:>6.2f} {k['pcie']:>6.2f}"
              f" {d.get('median', '-'):>9} {d.get('p90', '-'):>5} {d.get('max', '-'):>5}")  # fmt: skip
    print("false alarms on normal events:", r["false_alarms_by_normal_event"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20, help="traces per class and level (default 20)")
    ap.add_argument("--toolchain", choices=("debian", "upstream"), default="debian")
    ap.add_argument("-o", "--output", default=None, help="default bench/results/slow_gpu-<toolchain>.json")
    args = ap.parse_args()
    ts = traces(args.seeds)
    wall0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tg-slowgpu-") as tmp:
        r = evaluate(ts, args.toolchain, Path(tmp))
    result = {
        "bench": "slow_gpu",
        "seeds": args.seeds,
        "traces": {
            "slow": sum(t.level > 0 for t in ts),
            "normal": sum(t.level == 0 for t in ts),
            "gpus_per_trace": len(GPUS),
            "minutes": SAMPLES * STEP_S / 60,
            "onset_minute": ONSET * STEP_S / 60,
        },
        "toolchain": args.toolchain,
        **r,
        "wall_s": round(time.monotonic() - wall0, 1),
        "machine": platform.platform(),
    }
    print(f"{result['traces']} on {r['prometheus']}")
    print_table("shipped rules (GPUPCIeLinkDegraded, GPUClocksThrottled, GPUClockBelowPeers)", r["shipped"])
    print_table("static rules (no for, raw thresholds)", r["static"])
    out = Path(args.output or ROOT / f"bench/results/slow_gpu-{args.toolchain}.json")
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"\nwrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


if __name__ == "__main__":
    main()
