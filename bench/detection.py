#!/usr/bin/env python3
"""Detection quality: labelled synthetic traces through a real Prometheus, catalogue rules beside
static-threshold rules.

The generator (below, seeded) models one single-node training job per trace: a healthy baseline
(step advancing, loss slowly falling, GPU 95% busy at 65 C, 75% memory, noise drawn from a
random.Random seeded by trace seed and second), then at a jittered onset either a fault or a normal
event that fools naive rules:

fault classes (the alerts that count as detecting them):
  nan-loss (P0)        the non-finite loss counter steps up, loss is NaN
  ecc-dbe (P0)         a double-bit ECC error, reported as XID 48 too
  xid-79 (P0)          the GPU falls off the bus: XID 79, trainguard_gpu_lost 1
  oom (P0)             the CUDA OOM counter steps up
  node-down (P0)       the Node goes NotReady and its exporter stops answering
  stall (P0)           the step stops advancing and the GPUs idle (not in --quick)
  thermal (P1)         GPU temperature 88 C
  memory-critical (P1) GPU memory 97% used
  packet-loss (P1)     packet loss 0.3%
normal events (nothing should fire):
  lr-warmup            a fresh start: step from 0, loss 10 falling to 2.5, grad norm 8 falling to 1
  eval-pause           the step stops for 90 s, GPUs at 5%, no tokens
  checkpoint-pause     the step stops for 45 s, disk writes at 500 ms for 30 s
  epoch-boundary       dataloader wait at 60% and throughput halved for 20 s
  planned-restart      the exporter is gone for 40 s (the Node stays Ready), training resumes from
                       the checkpoint (the step goes back), an XID 43 from the killed process for
                       30 s, a loss and gradient spike on resume
  kubelet-restart      the Node is NotReady for 5 s (a kubelet or container runtime restart reports
                       it), its pods and exporter keep running

The catalogue rules are those `trainguard render --format prometheus` produces for one monitor per
trace at default settings (scrape and evaluation every 15 s, the catalogue's `for`, thresholds and
baselines); the static rules (STATIC_RULES) fire on a raw threshold with no `for`. Both run in the
same Prometheus on the same scrapes. A firing alert of the class's set after onset detects the
fault; every other P0-P2 firing on a trace is a false positive. Delay: onset to the first firing
sample of a detecting alert in ALERTS.

    python bench/detection.py [--seeds 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT))

from bench.scenarios.live import Targets, line, prometheus_cmd, scrape_config, serve_targets  # noqa: E402

from tests.processes import free_port, http_json, start, stop, wait_http  # noqa: E402
from trainguard.api import load_documents  # noqa: E402
from trainguard.render import render_prometheus  # noqa: E402

NS = "ml"
FAULTS: dict[str, tuple[str, set[str], set[str]]] = {
    # class: (priority, catalogue alerts that detect it, static rules that detect it)
    "nan-loss": ("P0", {"TrainingLossNonFinite"}, {"StaticLossNonFinite", "StaticLossHigh"}),
    "ecc-dbe": ("P0", {"GPUDoubleBitECCError", "GPUCriticalXid"}, {"StaticECCError", "StaticXid"}),
    "xid-79": ("P0", {"GPUCriticalXid", "GPULost"}, {"StaticXid"}),
    "oom": ("P0", {"GPUOutOfMemory"}, {"StaticOOM"}),
    "node-down": ("P0", {"GPUNodeDown", "TrainguardExporterDown"}, {"StaticTargetDown"}),
    "stall": ("P0", {"TrainingJobStalled"}, {"StaticStepStalled", "StaticThroughputLow"}),
    "thermal": ("P1", {"GPUThermalThrottling", "GPUMemoryTemperatureHigh"}, {"StaticGPUHot"}),
    "memory-critical": (
        "P1",
        {"GPUMemoryCritical", "GPUMemoryPressure", "GPUMemorySustainedHigh"},
        {"StaticGPUMemoryFull"},
    ),
    "packet-loss": ("P1", {"NetworkPacketLossHigh", "NetworkPacketLoss"}, {"StaticPacketLoss"}),
}
NORMAL = (
    "lr-warmup",
    "eval-pause",
    "checkpoint-pause",
    "epoch-boundary",
    "planned-restart",
    "kubelet-restart",
)
KUBELET_BLIP_S = 5.0

STATIC_RULES: list[tuple[str, str, str]] = [
    # name, severity, expression: what a hand-written rule file without baselines or `for` does
    ("StaticLossNonFinite", "P0", "trainguard_train_nonfinite_loss_total > 0"),
    ("StaticLossHigh", "P1", "trainguard_train_loss > 5"),
    ("StaticECCError", "P0", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0"),
    ("StaticXid", "P0", "DCGM_FI_DEV_XID_ERRORS > 0"),
    ("StaticOOM", "P0", "trainguard_train_oom_total > 0"),
    ("StaticTargetDown", "P0", 'up{training_job=~"det-.*"} == 0'),
    ("StaticStepStalled", "P0", "time() - trainguard_train_last_step_timestamp_seconds > 30"),
    ("StaticThroughputLow", "P1", "trainguard_train_tokens_per_second_per_gpu < 1500"),
    ("StaticGradientHigh", "P1", "trainguard_train_grad_norm > 5"),
    ("StaticGPUHot", "P1", "DCGM_FI_DEV_GPU_TEMP > 85"),
    ("StaticGPUMemoryFull", "P1", "DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) > 0.95"),
    ("StaticPacketLoss", "P1", "trainguard_network_packet_loss_ratio > 0.001"),
    ("StaticDataLoaderSlow", "P2", "trainguard_train_dataloader_wait_ratio > 0.3"),
    ("StaticDiskSlow", "P2", "trainguard_host_disk_write_latency_seconds > 0.2"),
]


@dataclass
class Trace:
    """One labelled trace: a job on one node whose metrics are a function of time since the start."""

    kind: str
    seed: int
    onset: float
    """Seconds after the start of the run."""
    job: str
    node: str
    run_start: float = 0.0

    @property
    def fault(self) -> bool:
        return self.kind in FAULTS

    def noise(self, t: float, scale: float) -> float:
        return random.Random(f"{self.seed}-{self.kind}-{int(t)}").gauss(0.0, scale)

    def phase(self, t: float) -> float:
        """Seconds since onset (negative before it)."""
        return t - self.onset

    def ready(self, t: float) -> bool:
        p = self.phase(t)
        return not (
            (self.kind == "node-down" and p >= 0)
            or (self.kind == "kubelet-restart" and 0 <= p < KUBELET_BLIP_S)
        )

    def exporter_up(self, t: float) -> bool:
        p = self.phase(t)
        if self.kind == "node-down":
            return p < 0
        return not (self.kind == "planned-restart" and 0 <= p < 40)

    def exposition(self, now: float) -> str:
        t = now - self.run_start
        p = self.phase(t)
        k = self.kind
        step_rate = 2.0
        paused = (k == "eval-pause" and 0 <= p < 90) or (k == "checkpoint-pause" and 0 <= p < 45)
        stalled = k == "stall" and p >= 0
        if k == "lr-warmup" and p >= 0:
            step = p * step_rate
            loss = 2.5 + 7.5 * math.exp(-p / 60)
            grad = 1.0 + 7.0 * math.exp(-p / 60)
        elif k == "planned-restart" and p >= 40:
            step = 500 + (p - 40) * step_rate  # resumed from the checkpoint at step 500
            loss = 2.6 + 2.0 * math.exp(-(p - 40) / 10)
            grad = 1.0 + 2.0 * math.exp(-(p - 40) / 10)
        else:
            frozen = min(t, self.onset) if (paused or stalled) else t
            if k == "eval-pause" and p >= 90:
                frozen = t - 90
            if k == "checkpoint-pause" and p >= 45:
                frozen = t - 45
            step = 1000 + frozen * step_rate
            loss = 2.6 - 0.0005 * t + self.noise(t, 0.02)
            grad = 1.0 + self.noise(t, 0.05)
        # the step froze at onset during a pause or a stall; otherwise the last step was just now
        last_step_ts = self.run_start + self.onset if (paused or stalled) else now
        if k == "nan-loss" and p >= 0:
            loss = float("nan")
        idle = paused or stalled
        tokens = 0.0 if idle else 3000 + self.noise(t, 50)
        if k == "epoch-boundary" and 0 <= p < 20:
            tokens = 1400 + self.noise(t, 50)
        if k == "lr-warmup" and p >= 0:
            tokens = 3000 * min(1.0, 0.3 + p / 100)
        pod = {"namespace": NS, "training_job": self.job, "node": self.node, "pod": f"{self.job}-0"}
        out = [
            line("trainguard_train_step", pod, step),
            line("trainguard_train_last_step_timestamp_seconds", pod, last_step_ts),
            line("trainguard_train_start_timestamp_seconds", pod, self.run_start - (0 if k == "lr-warmup" else 7200)),
            line("trainguard_train_loss", pod, loss),
            line("trainguard_train_grad_norm", pod, grad),
            line("trainguard_train_tokens_per_second_per_gpu", pod, tokens),
            line("trainguard_train_dataloader_wait_ratio", pod, 0.6 if k == "epoch-boundary" and 0 <= p < 20 else 0.03),
            line("trainguard_host_disk_write_latency_seconds", pod,
                 0.5 if k == "checkpoint-pause" and 0 <= p < 30 else 0.01),
            line("trainguard_network_packet_loss_ratio", pod, 0.003 if k == "packet-loss" and p >= 0 else 0.0),
            line("trainguard_train_oom_total", pod, 1 if k == "oom" and p >= 0 else 0),
            line("trainguard_train_nonfinite_loss_total", pod, 1 if k == "nan-loss" and p >= 0 else 0),
            line("trainguard_checkpoint_last_success_timestamp_seconds", {**pod, "kind": "full"}, now - 300),
            line("trainguard_checkpoint_last_success_timestamp_seconds", {**pod, "kind": "incremental"}, now - 30),
            line("trainguard_exporter_gpus_assigned", pod, 2),
        ]  # fmt: skip
        for gpu in range(2):
            lab = {**pod, "gpu": str(gpu)}
            xid = 0
            if gpu == 0 and p >= 0:
                xid = {"ecc-dbe": 48, "xid-79": 79}.get(k, 0)
            if k == "planned-restart" and 40 <= p < 70:
                xid = 43  # the killed process's "GPU stopped processing"
            mem = 0.97 if k == "memory-critical" and gpu == 0 and p >= 0 else 0.75 + self.noise(t + gpu, 0.01)
            used = 80e9 * mem
            out += [
                line("DCGM_FI_DEV_GPU_TEMP", lab, 88.0 if k == "thermal" and p >= 0 else 65 + self.noise(t, 1.5)),
                line("DCGM_FI_DEV_MEMORY_TEMP", lab, 70 + self.noise(t + 7, 1.5)),
                line("DCGM_FI_DEV_GPU_UTIL", lab, 5.0 if idle else 95 + self.noise(t + gpu, 2)),
                line("DCGM_FI_DEV_FB_USED", lab, used),
                line("DCGM_FI_DEV_FB_FREE", lab, 80e9 - used),
                line("DCGM_FI_DEV_XID_ERRORS", lab, xid),
                line("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", lab, 1 if k == "ecc-dbe" and gpu == 0 and p >= 0 else 0),
                line("DCGM_FI_DEV_POWER_USAGE", lab, 500),
                line("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", lab, 700),
                line("trainguard_gpu_lost", lab, 1 if k == "xid-79" and gpu == 0 and p >= 0 else 0),
            ]  # fmt: skip
        return "".join(out)


def traces(seeds: int, quick: bool, onset: float) -> list[Trace]:
    kinds = [k for k in FAULTS if not (quick and k == "stall")] + list(NORMAL)
    out: list[Trace] = []
    for seed in range(seeds):
        for k in kinds:
            jitter = random.Random(f"onset-{seed}-{k}").uniform(0, 15)
            i = len(out)
            out.append(Trace(k, seed, onset + jitter, f"det-{k}-{seed}", f"det-node-{i}"))
    return out


def monitors(ts: list[Trace], scrape: str) -> str:
    docs = [
        {
            "apiVersion": "trainguard.io/v1alpha1",
            "kind": "TrainingJobMonitor",
            "metadata": {"name": tr.job, "namespace": NS},
            "spec": {
                "selector": {"matchLabels": {"app": tr.job}},
                "gpusPerPod": 2,
                "exporter": {"gpuBackend": "simulated", "scrapeInterval": scrape},
            },
        }
        for tr in ts
    ]
    return "\n---\n".join(json.dumps(d) for d in docs)


def static_rules() -> dict[str, Any]:
    rules = [
        {"alert": n, "expr": e, "labels": {"severity": s, "rules": "static"}} for n, s, e in STATIC_RULES
    ]
    return {"groups": [{"name": "static-thresholds", "rules": rules}]}


def firings(prom: str, start: float, end: float) -> list[tuple[dict[str, str], float]]:
    """(labels, first firing time) of every firing episode in ALERTS."""
    q = quote('ALERTS{alertstate="firing"}')
    data = http_json(f"{prom}/api/v1/query_range?query={q}&start={start}&end={end}&step=1")
    out = []
    for series in data["data"]["result"]:
        last = -1e18
        for ts, _ in series["values"]:
            if float(ts) - last > 1.5:
                out.append((series["metric"], float(ts)))
            last = float(ts)
    return out


def score(ts: list[Trace], fired: list[tuple[dict[str, str], float]], static: bool) -> dict[str, Any]:
    by_job = {tr.job: tr for tr in ts}
    per_class: dict[str, dict[str, Any]] = {}
    tp = fp = 0
    false_alerts: dict[str, int] = {}
    for tr in ts:
        onset = tr.run_start + tr.onset
        mine = [(m, at) for m, at in fired if by_job.get(m.get("training_job", "")) is tr]
        mine = [(m, at) for m, at in mine if (m.get("rules") == "static") == static]
        detecting = FAULTS[tr.kind][2 if static else 1] if tr.fault else set()
        hits = [at - onset for m, at in mine if m["alertname"] in detecting and at >= onset]
        for m, at in mine:
            true = m["alertname"] in detecting and at >= onset
            if not true and m.get("severity") in ("P0", "P1", "P2"):
                fp += 1
                false_alerts[f"{m['alertname']} on {tr.kind}"] = (
                    false_alerts.get(f"{m['alertname']} on {tr.kind}", 0) + 1
                )
        c = per_class.setdefault(tr.kind, {"traces": 0, "detected": 0, "delays_s": [], "false_positives": 0})
        c["traces"] += 1
        c["false_positives"] += sum(1 for m, at in mine if not (m["alertname"] in detecting and at >= onset)
                                    and m.get("severity") in ("P0", "P1", "P2"))  # fmt: skip
        if tr.fault and hits:
            c["detected"] += 1
            c["delays_s"].append(round(min(hits), 1))
            tp += 1
    for k, c in per_class.items():
        if k in FAULTS:
            c["priority"] = FAULTS[k][0]
            c["recall"] = c["detected"] / c["traces"]
            c["median_delay_s"] = statistics.median(c["delays_s"]) if c["delays_s"] else None
    p0_delays = [
        d for k, c in per_class.items() if k in FAULTS and FAULTS[k][0] == "P0" for d in c["delays_s"]
    ]
    p0 = [c for k, c in per_class.items() if k in FAULTS and FAULTS[k][0] == "P0"]
    return {
        "classes": per_class,
        "true_positives": tp,
        "false_positives": fp,
        "precision": tp / (tp + fp) if tp + fp else 0.0,
        "recall": tp / sum(1 for tr in ts if tr.fault),
        "recall_p0": sum(c["detected"] for c in p0) / sum(c["traces"] for c in p0),
        "median_p0_delay_s": statistics.median(p0_delays) if p0_delays else None,
        "false_alerts": dict(sorted(false_alerts.items())),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3, help="traces per class (default 3)")
    ap.add_argument("--quick", action="store_true",
                    help="development run: 1 s scrapes, one seed, no stall class, results not written")  # fmt: skip
    ap.add_argument("-o", "--output", default=str(ROOT / "bench/results/detection.json"))
    args = ap.parse_args()
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        raise SystemExit("prometheus is needed (scripts/bootstrap.sh installs it)")
    interval = "1s" if args.quick else "15s"
    onset = 20.0 if args.quick else 60.0
    tail = 60.0 if args.quick else 360.0  # the stall threshold is 300 s
    ts = traces(1 if args.quick else args.seeds, args.quick, onset)
    run_s = onset + 15 + tail
    wall0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tg-detect-") as tmp:
        d = Path(tmp)
        files = render_prometheus(load_documents([("traces.yaml", monitors(ts, interval))]))
        (d / "rules.yml").write_text(json.dumps(files["rules.yml"]))
        (d / "static.yml").write_text(json.dumps(static_rules()))
        targets = Targets()
        identities = {"ksm": {"namespace": "kube-system"}}
        lock = threading.Lock()
        for tr in ts:
            identities[tr.node] = {
                "namespace": NS,
                "training_job": tr.job,
                "node": tr.node,
                "pod": f"{tr.job}-0",
            }
            targets.render[tr.node] = tr.exposition

        def kube_state(now: float) -> str:
            return "".join(
                line("kube_node_status_condition", {"node": tr.node, "condition": "Ready", "status": "true"},
                     1 if tr.ready(now - tr.run_start) else 0)
                for tr in ts
            )  # fmt: skip

        targets.render["ksm"] = kube_state
        with serve_targets(targets):
            port = free_port()
            config = {
                "global": {"scrape_interval": interval, "evaluation_interval": interval},
                "rule_files": [str(d / "rules.yml"), str(d / "static.yml")],
                "scrape_configs": [scrape_config(targets, identities, interval)],
            }
            proc = start(prometheus_cmd(prometheus, d, port, config), d / "prometheus.log")
            prom = f"http://127.0.0.1:{port}"
            try:
                wait_http(f"{prom}/-/ready", timeout=60, proc=proc)
                t0 = time.time()
                for tr in ts:
                    tr.run_start = t0
                while (t := time.time() - t0) < run_s:
                    with lock:
                        for tr in ts:
                            targets.set_down(tr.node, not tr.exporter_up(t))
                    time.sleep(0.25)
                fired = firings(prom, t0, time.time())
            finally:
                stop([proc])
    result = {
        "catalogue": score(ts, fired, static=False),
        "static": score(ts, fired, static=True),
        "targets": "recall 100% on P0 classes, precision >= 95% overall, median P0 detection delay < 30 s",
        "conditions": {
            "scrape_and_evaluation_interval": interval,
            "traces_per_class": 1 if args.quick else args.seeds,
            "onset_s": f"{onset} + uniform(0, 15) per trace",
            "run_s": run_s,
            "wall_s": round(time.monotonic() - wall0, 1),
            "catalogue": "rules from trainguard render --format prometheus, one monitor per trace, default "
            "settings (for, thresholds, 1 h baselines)",
            "static": {n: e for n, _, e in STATIC_RULES},
            "false_positive": "any P0-P2 alert firing on a trace that is not one of its class's detecting "
            "alerts after onset",
            "cpus": os.cpu_count(),
            "load_average_1_5_15m_at_end": [round(x, 2) for x in os.getloadavg()],
            "machine": platform.platform(),
            "python": platform.python_version(),
        },
    }
    print_table(result)
    if not args.quick:
        Path(args.output).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.output}")


def print_table(r: dict[str, Any]) -> None:
    cat, sta = r["catalogue"], r["static"]
    print(f"{'class':17} {'prio':4} {'n':>2}  {'catalogue recall':>16} {'delay p50':>9} {'FP':>3}   "
          f"{'static recall':>13} {'delay p50':>9} {'FP':>3}")  # fmt: skip
    for k, c in cat["classes"].items():
        s = sta["classes"][k]

        def fmt(x: dict[str, Any]) -> str:
            if "recall" not in x:
                return f"{'-':>16} {'-':>9} {x['false_positives']:>3}"
            delay = "-" if x["median_delay_s"] is None else f"{x['median_delay_s']:.0f}s"
            return f"{x['recall']:>16.0%} {delay:>9} {x['false_positives']:>3}"

        print(f"{k:17} {c.get('priority', 'ok'):4} {c['traces']:>2}  {fmt(c)}   {fmt(s)}")
    for name, x in (("catalogue", cat), ("static", sta)):
        print(f"{name}: precision {x['precision']:.1%}, recall {x['recall']:.1%} (P0 {x['recall_p0']:.0%}), "
              f"median P0 delay {x['median_p0_delay_s']}s; false: {x['false_alerts']}")  # fmt: skip


if __name__ == "__main__":
    main()
