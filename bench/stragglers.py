#!/usr/bin/env python3
"""StragglerRank on seeded traces: recall, precision and delay by slowdown, through the rule that ships.

Logic evaluated: the rendered `StragglerRank` rule and its recording rules (render/prometheus.py, the
per-monitor form by default, `--rule-form shared` for the shared group), run by `promtool test rules`
over each trace. promtool is asked, at every `--eval-every` seconds, for no alert; what it reports
instead is what fired. Nothing here re-implements the rule.

Traces: a synchronous gang of 2 to 64 ranks simulated step by step (0.8 s of compute per step with a
per-step jitter and a small per-rank offset, 0.2 s of collective after the slowest rank arrives, the
exporter's counters sampled every 15 s), 35 minutes each, with every normal event that fools static
rules: a warm-up whose first 300 steps run slower on one rank, a checkpoint every 10 minutes (the gang
pauses, or rank 0 writes while the others wait in a barrier), an evaluation pass every 7 minutes, one
data-loader hiccup on one rank (30-120 s), one rank 20-30% slower for 1-2 minutes, and a whole-gang
slowdown of 15-30% for 5-10 minutes. A straggler trace adds one rank slowed by the level from a random
minute in 10..15 to the end; a clean trace has none.

Recall: straggler traces where the straggler's rank fired after its onset. Precision: alert episodes
(one rank's run of firing evaluations) that name the straggler after its onset, over all episodes in
that level's traces. False alarms: episodes in clean traces. Delay: onset to the first firing
evaluation of the right rank (granularity --eval-every).

    python bench/stragglers.py [--seeds 4] [--sizes 2,3,4,8,16,32,64] [--rule-form per-monitor|shared]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT))

from trainguard.api.load import parse_object  # noqa: E402
from trainguard.api.monitor import TrainingJobMonitor  # noqa: E402
from trainguard.catalog.alerts import ALERTS_BY_NAME  # noqa: E402
from trainguard.render import dump_yaml  # noqa: E402
from trainguard.render.policy import effective_policy  # noqa: E402
from trainguard.render.prometheus import rule_group  # noqa: E402
from trainguard.render.shared import shared_group  # noqa: E402

ALERT = "StragglerRank"
SCRAPE_S = 15
MINUTES = 35
COMPUTE_S = 0.8
COMM_S = 0.2
STEP_JITTER = 0.05
"""Per-step, per-rank relative jitter of compute time (a normal's sigma)."""
RANK_OFFSET = 0.01
"""Per-rank persistent relative offset of compute time (sigma): no two GPUs are exactly alike."""
WARMUP_STEPS = 1000
START_STEP = WARMUP_STEPS - 300
LEVELS = (0.05, 0.10, 0.20)
TARGET = {"recall": 0.95, "precision": 0.95, "from_level": 0.10}
NS, JOB = "ml", "bench-job"


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    ranks: frozenset[int] | None = None
    """For a pause: the ranks busy during it (the others wait in a collective); None: all of them."""
    factor: float = 1.0
    """For a slowdown: the compute multiplier of `ranks` (None: the whole gang)."""


@dataclass
class Trace:
    size: int
    seed: int
    level: float
    straggler: int | None
    onset_s: float | None
    pauses: list[Window] = field(default_factory=list)
    slowdowns: list[Window] = field(default_factory=list)
    events: list[str] = field(default_factory=list)


def plan(size: int, seed: int, level: float, straggler: bool) -> Trace:
    rng = random.Random(f"{size}/{seed}/{level}/{straggler}")
    end = MINUTES * 60.0
    t = Trace(size, seed, level, None, None)
    if straggler:
        t.straggler, t.onset_s = rng.randrange(size), rng.uniform(600, 900)
        t.slowdowns.append(Window(t.onset_s, end, frozenset({t.straggler}), 1 + level))
    warm = rng.randrange(size)
    t.slowdowns.append(Window(0, 300, frozenset({warm}), 1.3))
    t.events.append(f"warm-up: rank {warm} 30% slower for the first ~300 steps")
    at = rng.uniform(120, 480)
    while at < end:
        dur = rng.uniform(60, 120)
        if rng.random() < 0.5:
            t.pauses.append(Window(at, at + dur, None))
            t.events.append(f"checkpoint {at:.0f}s: the gang pauses {dur:.0f}s")
        else:
            t.pauses.append(Window(at, at + dur, frozenset({0})))
            t.events.append(f"checkpoint {at:.0f}s: rank 0 writes {dur:.0f}s, the others wait")
        at += 600
    at = rng.uniform(60, 420)
    while at < end:
        dur = rng.uniform(45, 75)
        t.pauses.append(Window(at, at + dur, None))
        t.events.append(f"evaluation {at:.0f}s: {dur:.0f}s")
        at += 420
    r, at, dur = rng.randrange(size), rng.uniform(300, end - 300), rng.uniform(30, 120)
    t.pauses.append(Window(at, at + dur, frozenset({r})))
    t.events.append(f"data-loader hiccup {at:.0f}s: rank {r} waits {dur:.0f}s")
    r, at, dur, by = (
        rng.randrange(size),
        rng.uniform(300, end - 300),
        rng.uniform(60, 120),
        rng.uniform(0.2, 0.3),
    )
    t.slowdowns.append(Window(at, at + dur, frozenset({r}), 1 + by))
    t.events.append(f"transient {at:.0f}s: rank {r} {by:.0%} slower for {dur:.0f}s")
    at, dur, by = rng.uniform(300, end - 600), rng.uniform(300, 600), rng.uniform(0.15, 0.3)
    t.slowdowns.append(Window(at, at + dur, None, 1 + by))
    t.events.append(f"whole gang {at:.0f}s: {by:.0%} slower for {dur:.0f}s")
    return t


def simulate(t: Trace) -> dict[int, tuple[list[float], list[float], list[int]]]:
    """Step by step: each rank's compute, then the collective that ends COMM_S after the slowest rank
    (a pause that starts before a step adds its time, to the busy ranks' own time and the others' wait).
    Returns per rank the samples of (step seconds, collective seconds, step) at every scrape."""
    rng = random.Random(f"sim/{t.size}/{t.seed}/{t.level}/{t.straggler}")
    offsets = [1 + rng.gauss(0, RANK_OFFSET) for _ in range(t.size)]
    step_s, coll = [0.0] * t.size, [0.0] * t.size
    out: dict[int, tuple[list[float], list[float], list[int]]] = {i: ([], [], []) for i in range(t.size)}
    now, step, next_scrape, end = 0.0, START_STEP, 0.0, MINUTES * 60.0
    pauses = sorted(t.pauses, key=lambda w: w.start)
    pending: tuple[float, list[float]] | None = None
    while next_scrape <= end:
        while True:
            if pending is None:
                extra = [0.0] * t.size
                while pauses and pauses[0].start <= now:
                    w = pauses.pop(0)
                    for i in range(t.size):
                        if w.ranks is None or i in w.ranks:
                            extra[i] += w.end - w.start
                own = []
                for i in range(t.size):
                    f = offsets[i] * (1 + rng.gauss(0, STEP_JITTER))
                    for w in t.slowdowns:
                        if w.start <= now < w.end and (w.ranks is None or i in w.ranks):
                            f *= w.factor
                    own.append(COMPUTE_S * max(0.1, f) + extra[i])
                # a rank not busy during a pause waits it out in the collective
                pending = (now + max(own) + COMM_S, own)
            done_at, own = pending
            if done_at > next_scrape:
                break
            for i in range(t.size):
                step_s[i] += done_at - now
                coll[i] += done_at - now - own[i]
            now, step, pending = done_at, step + 1, None
        for i in range(t.size):  # the counters as of the last step completed by the scrape
            out[i][0].append(step_s[i])
            out[i][1].append(coll[i])
            out[i][2].append(step)
        next_scrape += SCRAPE_S
    return out


def _samples(values: list[float] | list[int]) -> str:
    return " ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in values)


def input_series(t: Trace) -> list[dict[str, str]]:
    series = []
    for i, (s, c, st) in simulate(t).items():
        labels = f'namespace="{NS}",training_job="{JOB}",pod="{JOB}-{i}",node="node-{i}"'
        series += [
            {"series": f"trainguard_train_step_seconds_total{{{labels}}}", "values": _samples(s)},
            {"series": f"trainguard_train_step_collective_seconds_total{{{labels}}}", "values": _samples(c)},
            {"series": f"trainguard_train_step{{{labels}}}", "values": _samples(st)},
            {"series": f"up{{{labels}}}", "values": f"1x{len(s) - 1}"},
        ]
    return series


def monitor() -> TrainingJobMonitor:
    obj = parse_object(
        {
            "apiVersion": "trainguard.io/v1alpha1",
            "kind": "TrainingJobMonitor",
            "metadata": {"name": JOB, "namespace": NS},
            "spec": {
                "selector": {"matchLabels": {"app": JOB}},
                "exporter": {"gpuBackend": "simulated", "scrapeInterval": f"{SCRAPE_S}s"},
            },
        },
        "the bench monitor",
    )
    assert isinstance(obj, TrainingJobMonitor)
    return obj


def rule_file(form: str) -> dict[str, Any]:
    m = monitor()
    group = rule_group(m, effective_policy(m, [])) if form == "per-monitor" else shared_group()
    rules = [r for r in group["rules"] if "record" in r or r["alert"] == ALERT]
    for r in rules:
        r.pop("annotations", None)
    return {"groups": [group | {"rules": rules}]}


_EVAL = re.compile(r"time: ([0-9hms.]+),")
_RANK = re.compile(r'Labels:\{[^}]*\brank="(\d+)"')


def _seconds(text: str) -> float:
    total = 0.0
    for n, unit in re.findall(r"([0-9.]+)(h|m|s)", text):
        total += float(n) * {"h": 3600, "m": 60, "s": 1}[unit]
    return total


def run_promtool(
    promtool: str, form: str, traces: list[Trace], eval_every: int
) -> list[dict[float, set[int]]]:
    """What fired, per trace: eval time (s) -> ranks, from promtool's report of unexpected alerts."""
    evals = [f"{s}s" for s in range(0, MINUTES * 60 + 1, eval_every)]
    with tempfile.TemporaryDirectory(prefix="stragglers-") as tmp:
        d = Path(tmp)
        (d / "rules.yml").write_text(dump_yaml(rule_file(form)))
        tests = [
            {
                "name": f"trace-{n}",
                "interval": f"{SCRAPE_S}s",
                "input_series": input_series(t),
                "alert_rule_test": [{"eval_time": e, "alertname": ALERT, "exp_alerts": []} for e in evals],
            }
            for n, t in enumerate(traces)
        ]
        (d / "test.yml").write_text(
            json.dumps({"rule_files": ["rules.yml"], "evaluation_interval": f"{SCRAPE_S}s", "tests": tests})
        )
        done = subprocess.run(
            [promtool, "test", "rules", "test.yml"],
            cwd=d,
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
    text = done.stdout + done.stderr
    if done.returncode != 0 and "FAILED" not in text:
        raise SystemExit(f"promtool failed:\n{text[-3000:]}")
    fired: list[dict[float, set[int]]] = [{} for _ in traces]
    current: int | None = None
    at = 0.0
    for line in text.splitlines():
        m = re.search(r"name: trace-(\d+),", line)
        if m:
            current = int(m.group(1))
            continue
        m = _EVAL.search(line)
        if m:
            at = _seconds(m.group(1))
            continue
        m = _RANK.search(line)
        if m and current is not None:
            fired[current].setdefault(at, set()).add(int(m.group(1)))
    return fired


def episodes(fired: dict[float, set[int]], eval_every: int) -> list[tuple[int, float]]:
    """(rank, start) of each run of consecutive firing evaluations of one rank."""
    out = []
    for rank in sorted({r for ranks in fired.values() for r in ranks}):
        times = sorted(t for t, ranks in fired.items() if rank in ranks)
        prev = -math.inf
        for t in times:
            if t - prev > eval_every:
                out.append((rank, t))
            prev = t
    return out


def score(traces: list[Trace], fired: list[dict[float, set[int]]], eval_every: int) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for level in LEVELS:
        mine = [
            (t, f) for t, f in zip(traces, fired, strict=True) if t.straggler is not None and t.level == level
        ]
        hits, delays, good, bad = 0, [], 0, 0
        for t, f in mine:
            assert t.onset_s is not None
            eps = episodes(f, eval_every)
            right = [s for r, s in eps if r == t.straggler and s >= t.onset_s]
            good += len(right)
            bad += len(eps) - len(right)
            if right:
                hits += 1
                delays.append(min(right) - t.onset_s)
        by_size = {}
        for size in sorted({t.size for t, _ in mine}):
            of = [(t, f) for t, f in mine if t.size == size]
            caught = sum(
                1
                for t, f in of
                if any(r == t.straggler and s >= (t.onset_s or 0) for r, s in episodes(f, eval_every))
            )
            by_size[str(size)] = f"{caught}/{len(of)}"
        rows[f"{level:.2f}"] = {
            "traces": len(mine),
            "recall": round(hits / len(mine), 3) if mine else None,
            "precision": round(good / (good + bad), 3) if good + bad else None,
            "false_episodes": bad,
            "delay_s_median": round(statistics.median(delays), 1) if delays else None,
            "delay_s_p95": round(sorted(delays)[max(0, math.ceil(0.95 * len(delays)) - 1)], 1)
            if delays
            else None,
            "detected_by_gang_size": by_size,
        }
    clean = [(t, f) for t, f in zip(traces, fired, strict=True) if t.straggler is None]
    false_clean = sum(len(episodes(f, eval_every)) for _, f in clean)
    return {
        "levels": rows,
        "clean": {
            "traces": len(clean),
            "false_episodes": false_clean,
            "trace_hours": round(len(clean) * MINUTES / 60, 2),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=4, help="traces per gang size and level (and clean ones)")
    ap.add_argument("--sizes", default="2,3,4,8,16,32,64")
    ap.add_argument("--rule-form", choices=("per-monitor", "shared"), default="per-monitor")
    ap.add_argument(
        "--eval-every", type=int, default=30, help="seconds between the evaluations asked of promtool"
    )
    ap.add_argument("--promtool", default=shutil.which("promtool") or "promtool")
    ap.add_argument("--quick", action="store_true", help="print, do not write the results")
    ap.add_argument("-o", "--output", default=str(ROOT / "bench/results/stragglers.json"))
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    traces = [plan(n, s, lvl, True) for lvl in LEVELS for n in sizes for s in range(args.seeds)]
    traces += [plan(n, s, 0.0, False) for n in sizes for s in range(args.seeds)]
    started = time.monotonic()
    fired = run_promtool(args.promtool, args.rule_form, traces, args.eval_every)
    elapsed = time.monotonic() - started
    result = score(traces, fired, args.eval_every)
    version = subprocess.run([args.promtool, "--version"], capture_output=True, text=True, check=False)
    alert = ALERTS_BY_NAME[ALERT]
    result["conditions"] = {
        "logic": f"the rendered {ALERT} rule and its recording rules ({args.rule_form} form), "
        "evaluated by promtool test rules",
        "promtool": (version.stdout or version.stderr).splitlines()[0]
        if (version.stdout or version.stderr)
        else "?",
        "alert": {"for": alert.for_} | {p.name: p.default for p in alert.params},
        "gang_sizes": sizes,
        "seeds": args.seeds,
        "minutes_per_trace": MINUTES,
        "scrape_s": SCRAPE_S,
        "eval_every_s": args.eval_every,
        "compute_s": COMPUTE_S,
        "collective_s": COMM_S,
        "step_jitter": STEP_JITTER,
        "rank_offset": RANK_OFFSET,
        "normal_events": "warm-up imbalance, checkpoints (gang pause or rank 0 writing), evaluation passes, "
        "one data-loader hiccup, one transient one-rank slowdown, one whole-gang slowdown, per trace",
        "targets": TARGET,
        "promtool_seconds": round(elapsed, 1),
        "machine": f"{platform.machine()}, {platform.python_version()}",
    }
    print(f"{ALERT} through promtool ({args.rule_form} form), {len(traces)} traces of {MINUTES} min, "
          f"gangs of {args.sizes} ranks, {args.seeds} seeds, evaluated every {args.eval_every}s ({elapsed:.0f}s)")  # fmt: skip
    print(
        f"{'slowdown':>9} {'traces':>6} {'recall':>7} {'precision':>9} {'false':>5} {'delay p50':>9} {'p95':>6}  by gang size"
    )
    for level, row in result["levels"].items():
        print(
            f"{float(level):>9.0%} {row['traces']:>6} {row['recall']!s:>7} {row['precision']!s:>9} "
            f"{row['false_episodes']:>5} {row['delay_s_median']!s:>9} {row['delay_s_p95']!s:>6}  "
            + " ".join(f"{k}:{v}" for k, v in row["detected_by_gang_size"].items())
        )
    c = result["clean"]
    print(f"clean traces: {c['traces']} ({c['trace_hours']} h), false alarm episodes: {c['false_episodes']}")
    if not args.quick:
        Path(args.output).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
