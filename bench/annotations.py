#!/usr/bin/env python3
"""What an alert's annotations cost Prometheus once many alerts are active: the correlation annotations'
lookups (a `query` in a template) against annotations from the alert's labels alone.

Prometheus expands every annotation of every active alert, pending or firing, at every evaluation of
its rule, and a template's `query` runs a PromQL query each time. The bench serves N jobs' synthetic
series (bench/scenarios/scale_rules.py's, where MonitoringDataMissing holds for every job) to a real
Prometheus, and evaluates copies of that rule in one group, one rule after the other, each copy with
other annotations:

    none       summary, description, cause, runbook, pod log query, report command (no lookup)
    static     the same, and three more annotations of the looked-up ones' length, as text
    shared     the shared group's, as rendered by default (render/shared.py: no lookup)
    lookups    the per-monitor group's and --shared-annotation-lookups': trace id, log window, command
    window     the log window alone (two lookups of ALERTS_FOR_STATE)
    trace      the trace id alone (one lookup of the pod's trainguard_exporter_info)
    one        one lookup that finds a series (the alert's own `up`)
    nothing    one query that selects no series (vector(1))

It reads each copy's own evaluation time (/api/v1/rules) once every job's copy is active, over
`--rounds` evaluations, and prints the median and the cost per active alert above `none`.

    python bench/annotations.py [--jobs 1000] [--rounds 6] [-o bench/results/annotations.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT))

from bench.scenarios import scale_rules as sr  # noqa: E402
from bench.scenarios.live import line  # noqa: E402

from tests.toolchains import find_tool  # noqa: E402
from trainguard.render.shared import shared_group  # noqa: E402

ALERT = "MonitoringDataMissing"
INPUTS = ("trainguard:monitor_setting", "trainguard:monitor_alert_enabled", "trainguard:monitor_jobs",
          "trainguard:up:last_seen_timestamp")  # fmt: skip
"""The recordings the rule reads: evaluated first in the bench's group, as in the shared group."""
LOOKED_UP = ("trace_id", "log_window", "logs_command")
LABELS = "$labels.namespace $labels.training_job $labels.pod $labels.node"


def _query(expr: str, args: str) -> str:
    return '{{ with printf "' + expr + '" ' + args + " | query }}{{ . | first | value }}{{ end }}"


def copies() -> list[dict[str, Any]]:
    """The rule's recorded inputs, then one copy of the alert per variant, named ALERT_<variant>."""
    looked_up = next(r for r in shared_group(lookups=True)["rules"] if r.get("alert") == ALERT)
    plain = next(r for r in shared_group()["rules"] if r.get("alert") == ALERT)
    notes = looked_up["annotations"]
    base = {k: v for k, v in notes.items() if k not in LOOKED_UP}
    variants: dict[str, dict[str, str]] = {
        "none": base,
        "static": base | {k: "x" * len(notes[k]) for k in LOOKED_UP},
        "shared": plain["annotations"],
        "lookups": notes,
        "window": base | {"log_window": notes["log_window"]},
        "trace": base | {"trace_id": notes["trace_id"]},
        "one": base | {"x": _query(r"up{namespace=%q,training_job=%q,pod=%q,node=%q}", LABELS)},
        "nothing": base | {"x": _query("vector(1)", "")},
    }
    rules = [copy.deepcopy(r) for r in shared_group()["rules"] if r.get("record") in INPUTS]
    for tag, given in variants.items():
        rule = copy.deepcopy(plain)
        rule["alert"] = f"{ALERT}_{tag}"
        # each copy looks up its own activation (ALERTS_FOR_STATE of its own name)
        rule["annotations"] = {k: v.replace(f'"{ALERT}"', f'"{ALERT}_{tag}"') for k, v in given.items()}
        rules.append(rule)
    return rules


def _info(i: int, pods: int, nodes: int) -> str:
    """The sidecars' trainguard_exporter_info, with the run's trace id that the trace lookup reads."""
    ns, job = sr.identity(i)
    return "".join(
        line("trainguard_exporter_info", {"namespace": ns, "training_job": job, "pod": f"{job}-{p}",
                                          "node": f"gpu-node-{(i * pods + p) % nodes}", "trace_id": f"{i:032x}"}, 1)
        for p in range(pods)
    )  # fmt: skip


def _rules(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/api/v1/rules", timeout=60) as resp:
        return dict(json.loads(resp.read())["data"]["groups"][0])


def measure(binary: str, jobs: int, rounds: int, workdir: Path) -> dict[str, Any]:
    """Each variant's median evaluation time (ms) over `rounds` evaluations with every job's alert active."""
    (workdir / "render").mkdir(parents=True)
    names = sr.metric_names(sr.groups(1, workdir / "render")[0])
    pods, gpus, nodes = 8, 1, 1000
    bodies = {
        str(i): sr.job_exposition(i, names, pods=pods, gpus=gpus, nodes=nodes) + _info(i, pods, nodes)
        for i in range(jobs)
    }
    render: dict[str, Callable[[float], str]] = {k: (lambda _t, b=b: b) for k, b in bodies.items()}
    ksm, operator = sr.cluster_exposition(jobs, pods, nodes), sr.published(jobs)
    render["ksm"] = lambda _t: ksm
    render["operator"] = lambda _t: operator
    group = {"name": "annotations", "interval": "15s", "rules": copies()}
    seen: dict[str, list[float]] = {}
    all_active = 0  # evaluations so far with every job's alert active in every copy
    last, deadline = None, time.monotonic() + 600 + 60 * rounds
    with sr.prometheus([group], render, workdir / "prometheus", "15s", binary=binary) as (url, _):
        while time.monotonic() < deadline and len(seen.get("none", [])) < rounds:
            time.sleep(2)
            g = _rules(url)
            if g["lastEvaluation"] == last:
                continue
            last = g["lastEvaluation"]
            row = {r["name"].removeprefix(f"{ALERT}_"): (1000 * r["evaluationTime"], len(r.get("alerts") or []))
                   for r in g["rules"] if r["name"].startswith(ALERT)}  # fmt: skip
            active = min(n for _, n in row.values())
            sr.log(f"annotations: group {g['evaluationTime']:.1f} s, {active} of {jobs} alerts active in each copy: "
                   + ", ".join(f"{k} {ms:.0f} ms" for k, (ms, _) in row.items()))  # fmt: skip
            # the first evaluations with every alert active: their ALERTS_FOR_STATE is not written yet,
            # so the window's lookups find nothing; count from the third
            all_active += active == jobs
            if active == jobs and all_active > 2:
                for k, (ms, _) in row.items():
                    seen.setdefault(k, []).append(ms)
    if len(seen.get("none", [])) < rounds:
        raise SystemExit(f"annotations: fewer than {rounds} evaluations with all {jobs} alerts active")
    median = {k: round(statistics.median(v), 1) for k, v in seen.items()}
    return {
        "median_ms": median,
        "per_alert_ms_above_none": {k: round((v - median["none"]) / jobs, 3) for k, v in median.items()},
        "rounds_ms": {k: [round(x) for x in v] for k, v in seen.items()},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--jobs", type=int, default=1000, help="jobs, each with one active alert per copy (default 1000)"
    )
    p.add_argument("--rounds", type=int, default=6, help="evaluations read (default 6)")
    p.add_argument("-o", "--output", type=Path, help="default bench/results/annotations.json")
    args = p.parse_args()
    binaries = {
        "prometheus-2": shutil.which("prometheus"),
        "prometheus-3": find_tool("upstream", "prometheus"),
    }
    result: dict[str, Any] = {"conditions": {
        "cpus": os.cpu_count(), "machine": platform.platform(), "jobs": args.jobs, "rounds": args.rounds,
        "load_average_at_start": list(os.getloadavg()), "binaries": binaries,
        "noise": "2 cores shared with the synthetic targets: compare the variants of one run"}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="tg-annotations-") as tmp:
        for key, binary in binaries.items():
            if binary is None:
                print(
                    f"{key}: not found, skipped (`make upstream-tools` builds Prometheus 3)", file=sys.stderr
                )
                continue
            result[key] = measure(binary, args.jobs, args.rounds, Path(tmp) / key)
    for key in binaries:
        if key in result:
            r = result[key]
            print(
                f"\n{key}, {args.jobs} active alerts per copy: median ms per evaluation (ms per alert above none)"
            )
            for k, ms in r["median_ms"].items():
                print(f"  {k:>8} {ms:>9.0f} ms  {r['per_alert_ms_above_none'][k]:>7.3f}")
    output = args.output or ROOT / "bench" / "results" / "annotations.json"
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwritten to {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
