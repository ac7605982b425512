#!/usr/bin/env python3
"""A P0 that fires again: fault to phone through a real Prometheus and a real Alertmanager alone.

Several single-node jobs (one monitor each, default settings: scrape and evaluation every 15 s, the
rendered rules and routes with their default timing) see a fatal XID 79 on GPU 0 for 30 s, and the
same XID again on the same GPU a minute later (`--gap`, jittered per job), after the first resolved:
the repeat meets the alert group the first left behind, which Alertmanager keeps until up to 30 s
after its last notification. Delay: the XID's onset in the scrape target to the phone receiver's
webhook post (a local sink).

    python bench/repeat_page.py [--jobs 6] [--gap 60]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT))

from bench.scenarios.live import (  # noqa: E402
    Targets,
    alertmanager_cmd,
    line,
    prometheus_cmd,
    scrape_config,
    serve_targets,
)

from tests.processes import free_port, start, stop, wait_http  # noqa: E402
from tests.render.notification_sink import Sink, serve  # noqa: E402
from trainguard.api import load_documents  # noqa: E402
from trainguard.render import render_prometheus  # noqa: E402
from trainguard.render.routing import TIMING  # noqa: E402

NS = "ml"
XID_S = 30.0
"""How long each XID shows in the exporter's gauge."""


def documents(sink: Sink, jobs: list[str]) -> str:
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "trainguard.io/v1alpha1", "kind": "TrainingJobMonitor",
            "metadata": {"name": job, "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": job}}, "gpusPerPod": 2, "policyRefs": [{"name": "default"}],
                     "exporter": {"gpuBackend": "simulated", "scrapeInterval": "15s"}},
        }
        for job in jobs
    ]  # fmt: skip
    receivers = [
        {"name": "phone", "type": "webhook", "roles": ["phone", "sms"], "url": sink.receiver_url("phone")},
        {"name": "im", "type": "webhook", "roles": ["im"], "url": sink.receiver_url("im")},
    ]
    docs.append({
        "apiVersion": "trainguard.io/v1alpha1", "kind": "AlertPolicy",
        "metadata": {"name": "default", "namespace": NS},
        "spec": {"receivers": receivers, "escalation": {"enabled": False}},
    })  # fmt: skip
    return "\n---\n".join(json.dumps(d) for d in docs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=6, help="jobs, each with its two XIDs (default 6)")
    ap.add_argument("--gap", type=float, default=60.0, help="seconds from the first XID to the second")
    ap.add_argument(
        "--tail", type=float, default=60.0, help="seconds the run waits after the last XID's onset"
    )
    ap.add_argument("--quick", action="store_true", help="print, do not write the results")
    ap.add_argument("-o", "--output", default=str(ROOT / "bench/results/repeat_page.json"))
    args = ap.parse_args()
    prometheus = shutil.which("prometheus")
    am_bin = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if prometheus is None or am_bin is None:
        raise SystemExit("prometheus and alertmanager are needed (scripts/bootstrap.sh installs them)")
    jobs = [f"xid-{i}" for i in range(args.jobs)]
    rng = random.Random(25)
    onsets = {j: [20 + rng.uniform(0, 15)] for j in jobs}
    for j in jobs:
        onsets[j].append(onsets[j][0] + args.gap + rng.uniform(0, 15))
    run_s = max(o[1] for o in onsets.values()) + args.tail
    wall0 = time.monotonic()
    t0 = 0.0

    def xid(job: str, now: float) -> int:
        return 79 if any(o <= now - t0 < o + XID_S for o in onsets[job]) else 0

    with tempfile.TemporaryDirectory(prefix="tg-repeat-") as tmp, serve() as sink:
        d = Path(tmp)
        files = render_prometheus(load_documents([("repeat.yaml", documents(sink, jobs))]))
        (d / "rules.yml").write_text(json.dumps(files["rules.yml"]))
        targets = Targets()
        identities: dict[str, dict[str, str]] = {}
        for i, job in enumerate(jobs):
            node = f"node-{i}"
            pod = {"namespace": NS, "training_job": job, "node": node, "pod": f"{job}-0"}
            identities[node] = pod

            def render(now: float, pod: dict[str, str] = pod, job: str = job) -> str:
                out = [
                    line("trainguard_train_step", pod, now),
                    line("trainguard_exporter_gpus_assigned", pod, 2),
                ]
                for gpu in ("0", "1"):
                    code = xid(job, now) if gpu == "0" else 0
                    out.append(line("DCGM_FI_DEV_XID_ERRORS", {**pod, "gpu": gpu}, code))
                return "".join(out)

            targets.render[node] = render
        with serve_targets(targets):
            am_port, prom_port = free_port(), free_port()
            procs = [start(alertmanager_cmd(am_bin, d, am_port, files["alertmanager.yml"]), d / "am.log")]
            config = {
                "global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
                "rule_files": [str(d / "rules.yml")],
                "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
                "scrape_configs": [scrape_config(targets, identities, "15s")],
            }
            procs.append(start(prometheus_cmd(prometheus, d, prom_port, config), d / "prometheus.log"))
            try:
                wait_http(f"http://127.0.0.1:{am_port}/-/ready", timeout=30)
                wait_http(f"http://127.0.0.1:{prom_port}/-/ready", timeout=30)
                t0 = time.time()
                while time.time() - t0 < run_s:
                    time.sleep(0.5)
            finally:
                stop(procs)
    result = summarise(jobs, onsets, sink, t0)
    result["conditions"] = {
        "scrape_and_evaluation_interval": "15s",
        "p0_timing": TIMING["P0"],
        "jobs": args.jobs,
        "xid_seconds": XID_S,
        "gap_s": f"{args.gap} + uniform(0, 15)",
        "first_onset_s": "20 + uniform(0, 15)",
        "tail_s": args.tail,
        "run_s": round(run_s, 1),
        "wall_s": round(time.monotonic() - wall0, 1),
        "cpus": os.cpu_count(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "machine": platform.platform(),
        "python": platform.python_version(),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "conditions"}, indent=1))
    if not args.quick:
        Path(args.output).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.output}")


def summarise(jobs: list[str], onsets: dict[str, list[float]], sink: Sink, t0: float) -> dict[str, Any]:
    per: dict[str, Any] = {}
    first, repeat = [], []
    for job in jobs:
        pages = [n for n in sink.notifications() if n.receiver == "phone" and n.status == "firing"
                 and n.alerts[0]["labels"].get("training_job") == job]  # fmt: skip
        # each page after its XID's onset: the first XID's, then the repeat's
        delays = [round(p.at - t0 - onsets[job][k], 1) for k, p in enumerate(pages[:2])]
        per[job] = {"pages": len(pages), "delays_s": delays}
        first += delays[:1]
        repeat += delays[1:2]
    return {
        "jobs": per,
        "first_page_median_s": statistics.median(first) if first else None,
        "first_page_max_s": max(first) if first else None,
        "repeat_page_median_s": statistics.median(repeat) if repeat else None,
        "repeat_page_max_s": max(repeat) if repeat else None,
        "repeats_paged": len(repeat),
        "repeats": len(jobs),
        "target": "the repeat reaches the phone within 30 s of its onset, as the first does",
    }


if __name__ == "__main__":
    main()
