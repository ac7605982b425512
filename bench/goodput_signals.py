#!/usr/bin/env python3
"""The sidecar's goodput counters against a known trace: how much of the time a seeded trainer really
lost to stalls and checkpoint writes the exporter counts (exporter/stalls.py, through TrainingState's
reports and snapshots, as a scrape every 15 s reads them), and how much it counts wrongly.

    python bench/goodput_signals.py [--hours 24] [--seed 1] [--json bench/results/goodput_signals.json]

The trace (simulated time, no sleeping): one pod's trainer steps every STEP_S (jittered +-10%), writes
a checkpoint every CKPT_EVERY_STEPS steps that takes a lognormal time around CKPT_S, and stalls (a hung
collective, a dead data loader) as a Poisson process of STALLS_PER_DAY, each 1 to 20 minutes. The truth
is what was injected: the stalls' time beyond one step, and the writes' time. Three SDK styles: writes
announced (Reporter.saving), reported only at their end (checkpoint_saved(seconds=)), not reported.
The figures are the exporter's alone; the rules' share and ETTR (clamped at 1 per rate window) are
tested in tests/render/test_goodput_rules.py.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from trainguard.exporter.training import TrainingState  # noqa: E402

STEP_S = 4.0
CKPT_EVERY_STEPS = 450
"""A write every 30 minutes of steps."""
CKPT_S = 60.0
STALLS_PER_DAY = 12.0
SCRAPE_S = 15.0
STYLES = ("announced", "end-only", "unreported")


@dataclass
class Result:
    style: str
    hours: float
    true_stall_s: float
    counted_stall_s: float
    true_save_s: float
    counted_save_s: float
    true_ettr: float
    counted_ettr: float


def run(style: str, hours: float, seed: int) -> Result:
    rng = random.Random(seed)
    now = [0.0]
    state = TrainingState(clock=lambda: now[0])
    state.ingest({"type": "hello", "pid": 1, "started_at": 0.0})
    end = hours * 3600.0
    next_scrape, step = SCRAPE_S, 0
    true_stall = true_save = 0.0
    view = state.snapshot()

    def advance(to: float) -> None:
        nonlocal next_scrape, view
        while next_scrape <= to:
            now[0] = next_scrape
            view = state.snapshot()
            next_scrape += SCRAPE_S
        now[0] = to

    while now[0] < end:
        pace = STEP_S * rng.uniform(0.9, 1.1)
        if rng.random() < STALLS_PER_DAY * pace / 86400.0:
            stalled = rng.uniform(60.0, 1200.0)
            true_stall += stalled
            pace += stalled
        advance(now[0] + pace)
        step += 1
        state.ingest({"type": "step", "step": step, "ts": now[0]})
        if step % CKPT_EVERY_STEPS == 0:
            write = CKPT_S * rng.lognormvariate(0.0, 0.5)
            true_save += write
            if style == "announced":
                state.ingest({"type": "saving", "ts": now[0]})
            advance(now[0] + write)
            if style != "unreported":
                state.ingest({"type": "checkpoint", "step": step, "kind": "full", "ok": True, "ts": now[0],
                              "seconds": write})  # fmt: skip
    advance(end)
    wall = now[0]
    counted_stall, counted_save = view.stall_seconds_total, view.checkpoint_save_seconds_total
    return Result(
        style=style,
        hours=hours,
        true_stall_s=round(true_stall, 1),
        counted_stall_s=round(counted_stall, 1),
        true_save_s=round(true_save, 1),
        counted_save_s=round(counted_save, 1),
        true_ettr=round(1 - (true_stall + true_save) / wall, 4),
        counted_ettr=round(1 - (counted_stall + counted_save) / wall, 4),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "goodput_signals.json")
    args = parser.parse_args()
    results = [run(style, args.hours, args.seed) for style in STYLES]
    print(f"one pod, {args.hours:g} h simulated, step {STEP_S:g} s +-10%, a write every {CKPT_EVERY_STEPS} steps "
          f"(~{CKPT_S:g} s lognormal), {STALLS_PER_DAY:g} stalls/day of 1-20 min, scraped every {SCRAPE_S:g} s, "
          f"seed {args.seed}")  # fmt: skip
    print(
        f"{'writes':<11} {'stall true':>10} {'counted':>9} {'save true':>10} {'counted':>9} {'ETTR true':>9} {'counted':>8}"
    )
    for r in results:
        print(f"{r.style:<11} {r.true_stall_s:>10.0f} {r.counted_stall_s:>9.0f} {r.true_save_s:>10.0f} "
              f"{r.counted_save_s:>9.0f} {r.true_ettr:>9.4f} {r.counted_ettr:>8.4f}")  # fmt: skip
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "conditions": {
                    "hours": args.hours,
                    "seed": args.seed,
                    "step_s": STEP_S,
                    "checkpoint_every_steps": CKPT_EVERY_STEPS,
                    "checkpoint_s": CKPT_S,
                    "stalls_per_day": STALLS_PER_DAY,
                    "scrape_s": SCRAPE_S,
                    "python": platform.python_version(),
                },
                "results": [asdict(r) for r in results],
            },
            indent=2,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
