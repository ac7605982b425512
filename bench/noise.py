#!/usr/bin/env python3
"""Alert noise: incidents replayed through a real Prometheus and a real Alertmanager.

Five incidents run side by side, each under its own TrainingJobMonitor (namespace ml), fed by
synthetic scrape targets (bench/scenarios/live.py; one target per node, plus kube-state-metrics):

- node-failure:  a 64-GPU job on 8 nodes; one node goes NotReady and its exporter stops answering,
                 the other 7 pods stop stepping and their GPUs go idle;
- rack-thermal:  4 nodes of one rack heat up one after another (GPU and HBM temperature 88 C);
- flapping-link: one node's packet loss toggles above the threshold (short blips, then longer ones);
- maintenance:   a rolling drain of 4 nodes inside the policy's maintenance window;
- quiet-hours:   at night (the policy's quiet hours cover the run), a slow dataloader, one hot GPU,
                 and a GPU OOM, which is on the night allowlist.

Two stacks scrape the same targets in the same run:
- trainguard: the rules and routes `trainguard render --format prometheus` produces;
- naive:      the same rule expressions with `for: 0s`, Alertmanager's group_by ['...'] on every route,
              send_resolved on every receiver (Alertmanager's default), no inhibit_rules, no quiet
              hours and no maintenance windows.

Time is compressed by --scale (default 12): every `for`, every group_wait/group_interval/
repeat_interval and the stall threshold are divided by it; scrape and evaluation run every second.
Raw alerts are the firing episodes in Prometheus's ALERTS series; notifications are the webhook
posts each receiver got (a local sink). Compression = 1 - notifications / raw alerts.

    python bench/noise.py [--scale 12] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

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

from tests.processes import free_port, http_json, start, stop, wait_http  # noqa: E402
from tests.render.notification_sink import Sink, serve  # noqa: E402
from trainguard.api import load_documents  # noqa: E402
from trainguard.api.common import duration_seconds  # noqa: E402
from trainguard.catalog.alerts import ALERTS  # noqa: E402
from trainguard.render import render_prometheus  # noqa: E402

NS = "ml"
RECEIVERS = ("phone", "im", "email", "ticket")
ROLES = {"phone": ["phone", "sms"], "im": ["im"], "email": ["email"], "ticket": ["ticket"]}
SEVERITY_TIMING = {  # the catalogue's defaults, before scaling
    "P0": ("5s", "1m", "30m"),
    "P1": ("30s", "5m", "2h"),
    "P2": ("1m", "10m", "12h"),
    "P3": ("5m", "30m", "24h"),
}
SEVERITY_RECEIVERS = {"P0": ["phone", "im"], "P1": ["im"], "P2": ["email", "ticket"], "P3": []}


@dataclass
class Gpu:
    temp: float = 65.0
    mem_temp: float = 70.0
    util: float = 95.0
    mem_ratio: float = 0.75


@dataclass
class Node:
    name: str
    pod: str
    rack: str
    gpus: list[Gpu] = field(default_factory=lambda: [Gpu() for _ in range(8)])
    ready: bool = True
    exporter_up: bool = True
    stepping: bool = True
    step: int = 1000
    last_step_ts: float = field(default_factory=time.time)
    packet_loss: float = 0.0
    dataloader_wait: float = 0.05
    oom_total: int = 0


@dataclass
class Scenario:
    name: str
    job: str
    policy: str
    nodes: list[Node]
    timeline: Callable[[Scenario, float], None]
    """Sets the nodes' state at t seconds after the start of the run."""
    expect: list[tuple[str, set[str]]]
    """(receiver, alert names): the incident must reach the receiver with one of these alerts."""
    must_not: list[tuple[str, set[str]]] = field(default_factory=list)
    """(receiver, alert names) that must not be notified (maintenance, quiet hours)."""


FAULT_AT = 15.0
FAULT_END = 105.0


def node_failure(s: Scenario, t: float) -> None:
    bad = s.nodes[2]
    on = FAULT_AT <= t < FAULT_END
    bad.ready = bad.exporter_up = not on
    for n in s.nodes:
        n.stepping = not on
        for g in n.gpus:
            g.util = 0.0 if on else 95.0


def rack_thermal(s: Scenario, t: float) -> None:
    for i, n in enumerate(s.nodes):
        hot = FAULT_AT + 10 * i <= t < FAULT_END
        for g in n.gpus:
            g.temp = 88.0 if hot else 65.0
            g.mem_temp = 88.0 if hot else 70.0


def flapping_link(s: Scenario, t: float) -> None:
    x = t - FAULT_AT
    if x < 0 or t >= FAULT_END:
        on = False
    elif x < 30:
        on = x % 5 < 2  # blips of 2 s every 5 s
    else:
        on = (x - 30) % 20 < 12  # 12 s on, 8 s off
    s.nodes[1].packet_loss = 0.003 if on else 0.0


def rolling_maintenance(s: Scenario, t: float) -> None:
    for i, n in enumerate(s.nodes):
        drained = FAULT_AT + 22 * i <= t < FAULT_AT + 22 * i + 18
        n.ready = n.exporter_up = not drained


def quiet_night(s: Scenario, t: float) -> None:
    slow = FAULT_AT <= t < FAULT_END
    for n in s.nodes:
        n.dataloader_wait = 0.4 if slow else 0.05
    s.nodes[0].gpus[3].temp = 88.0 if FAULT_AT <= t < FAULT_END else 65.0
    if t >= 60 and s.nodes[1].oom_total == 0:
        s.nodes[1].oom_total = 1


def scenarios() -> list[Scenario]:
    def nodes(prefix: str, job: str, n: int, rack: str) -> list[Node]:
        return [Node(f"{prefix}{i + 1}", f"{job}-{i}", rack) for i in range(n)]

    return [
        Scenario("node-failure", "llama-64", "standard", nodes("gpu-a", "llama-64", 8, "rack-a"), node_failure,
                 expect=[("phone", {"GPUNodeDown"})]),
        Scenario("rack-thermal", "gpt-rack", "standard", nodes("gpu-b", "gpt-rack", 4, "rack-b"), rack_thermal,
                 expect=[("im", {"RackThermalEvent", "GPUThermalThrottling", "GPUMemoryTemperatureHigh"})]),
        Scenario("flapping-link", "bert-flap", "standard", nodes("gpu-c", "bert-flap", 2, "rack-c"), flapping_link,
                 expect=[("im", {"NetworkPacketLossHigh"})]),
        Scenario("maintenance", "t5-maint", "maint", nodes("gpu-d", "t5-maint", 4, "rack-d"), rolling_maintenance,
                 expect=[], must_not=[(r, set()) for r in RECEIVERS]),
        Scenario("quiet-hours", "vit-night", "night", nodes("gpu-e", "vit-night", 2, "rack-e"), quiet_night,
                 expect=[("phone", {"GPUOutOfMemory"})], must_not=[("im", {"GPUThermalThrottling"})]),
    ]  # fmt: skip


def scaled(d: str, scale: float) -> str:
    return f"{max(1, round(duration_seconds(d) / scale))}s"


def documents(sink: Sink, scen: list[Scenario], scale: float, naive: bool) -> str:
    """The monitors and policies, as a user would write them (timings scaled)."""
    now = datetime.now(UTC)
    docs = []
    for s in scen:
        docs.append({
            "apiVersion": "trainguard.io/v1alpha1", "kind": "TrainingJobMonitor",
            "metadata": {"name": s.job, "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": s.job}}, "gpusPerPod": 8,
                     "exporter": {"gpuBackend": "simulated", "scrapeInterval": "1s"},
                     "policyRefs": [{"name": s.policy}]},
        })  # fmt: skip
    for name in ("standard", "maint", "night"):
        alerts: list[dict[str, Any]] = [
            {"name": a.name, "for": "0s" if naive else scaled(a.for_, scale)}
            for a in ALERTS
            if a.name != "TrainingJobStalled"
        ]
        alerts.append({"name": "TrainingJobStalled", "for": "0s", "threshold": round(300 / scale)})
        spec: dict[str, Any] = {
            "receivers": [
                {"name": r, "type": "webhook", "roles": ROLES[r], "url": sink.receiver_url(r)}
                # naive: Alertmanager's default, every receiver told of every resolution
                | ({"sendResolved": True} if naive else {})
                for r in RECEIVERS
            ],
            "routes": [
                {
                    "severity": sev,
                    "receivers": SEVERITY_RECEIVERS[sev],
                    **{
                        k: scaled(v, scale)
                        for k, v in zip(("groupWait", "groupInterval", "repeatInterval"), t, strict=True)
                    },
                }
                for sev, t in SEVERITY_TIMING.items()
            ],
            "escalation": {"enabled": False},
            "alerts": alerts,
        }
        if naive:
            spec["inhibition"] = {"nodeDown": False, "jobP0": False, "supersede": False}
        elif name == "night":
            spec["quietHours"] = {
                "enabled": True,
                "timezone": "UTC",
                "start": (now - timedelta(hours=1)).strftime("%H:%M"),
                "end": (now + timedelta(hours=2)).strftime("%H:%M"),
            }
        elif name == "maint":
            nodes = [n.name for s in scen if s.policy == "maint" for n in s.nodes]
            spec["maintenanceWindows"] = [{
                "name": "rolling-drain", "nodes": nodes,
                "start": (now - timedelta(minutes=10)).isoformat(), "end": (now + timedelta(hours=1)).isoformat(),
            }]  # fmt: skip
        docs.append({
            "apiVersion": "trainguard.io/v1alpha1", "kind": "AlertPolicy",
            "metadata": {"name": name, "namespace": NS}, "spec": spec,
        })  # fmt: skip
    return "\n---\n".join(json.dumps(d) for d in docs)


def naive_routes(route: dict[str, Any]) -> None:
    """group_by ['...'] on every route: one notification per alert."""
    route["group_by"] = ["..."]
    for child in route.get("routes", []):
        naive_routes(child)


def render(sink: Sink, scen: list[Scenario], scale: float, naive: bool) -> dict[str, dict[str, Any]]:
    files = render_prometheus(load_documents([("bench.yaml", documents(sink, scen, scale, naive))]))
    if naive:
        am = files["alertmanager.yml"]
        naive_routes(am["route"])
        am.pop("inhibit_rules", None)
    return files


def exposition(node: Node, job: str, now: float) -> str:
    out = []
    pod = {"namespace": NS, "training_job": job, "node": node.name, "pod": node.pod}
    if node.stepping:
        node.step += 1
        node.last_step_ts = now
    out += [
        line("trainguard_train_step", pod, node.step),
        line("trainguard_train_last_step_timestamp_seconds", pod, node.last_step_ts),
        line("trainguard_train_start_timestamp_seconds", pod, now - 86400),
        line("trainguard_train_loss", pod, 2.1),
        line("trainguard_train_grad_norm", pod, 0.8),
        line("trainguard_train_dataloader_wait_ratio", pod, node.dataloader_wait),
        line("trainguard_network_packet_loss_ratio", pod, node.packet_loss),
        line("trainguard_host_disk_write_latency_seconds", pod, 0.01),
        line("trainguard_train_oom_total", pod, node.oom_total),
        line("trainguard_checkpoint_last_success_timestamp_seconds", {**pod, "kind": "full"}, now - 120),
        line(
            "trainguard_checkpoint_last_success_timestamp_seconds", {**pod, "kind": "incremental"}, now - 20
        ),
        line("trainguard_train_nonfinite_loss_total", pod, 0),
        line("trainguard_exporter_gpus_assigned", pod, len(node.gpus)),
    ]
    for i, g in enumerate(node.gpus):
        lab = {**pod, "gpu": str(i)}
        used = 80e9 * g.mem_ratio
        out += [
            line("DCGM_FI_DEV_GPU_TEMP", lab, g.temp),
            line("DCGM_FI_DEV_MEMORY_TEMP", lab, g.mem_temp),
            line("DCGM_FI_DEV_GPU_UTIL", lab, g.util),
            line("DCGM_FI_DEV_FB_USED", lab, used),
            line("DCGM_FI_DEV_FB_FREE", lab, 80e9 - used),
            line("DCGM_FI_DEV_XID_ERRORS", lab, 0),
            line("DCGM_FI_DEV_POWER_USAGE", lab, 500),
            line("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", lab, 700),
            line("trainguard_gpu_lost", lab, 0),
        ]
    return "".join(out)


def kube_state(scen: list[Scenario]) -> str:
    out = []
    for s in scen:
        for n in s.nodes:
            out.append(line("kube_node_status_condition",
                            {"node": n.name, "condition": "Ready", "status": "true"}, 1 if n.ready else 0))  # fmt: skip
            out.append(
                line("kube_node_labels", {"node": n.name, "label_topology_kubernetes_io_zone": n.rack}, 1)
            )
    return "".join(out)


def episodes(prom: str, start: float, end: float) -> list[dict[str, str]]:
    """One entry per firing episode of every alert series (a gap of more than 2 s starts a new one)."""
    q = 'ALERTS{alertstate="firing"}'
    data = http_json(f"{prom}/api/v1/query_range?query={quote(q)}&start={start}&end={end}&step=1")
    out = []
    for series in data["data"]["result"]:
        last = -1e18
        for ts, _ in series["values"]:
            if float(ts) - last > 2:
                out.append(series["metric"])
            last = float(ts)
    return out


def scrape_failures(prom: str, run_s: float) -> int:
    """Scrapes that failed on targets no scenario takes down (the machine was too slow to answer in
    time): each can resolve and re-raise alerts, so the run reports them."""
    healthy = "|".join(
        s.job for s in scenarios() if s.name in ("rack-thermal", "flapping-link", "quiet-hours")
    )
    q = f'sum(count_over_time((up{{training_job=~"{healthy}"}} == 0)[{int(run_s)}s:1s]))'
    res = http_json(f"{prom}/api/v1/query?query={quote(q)}")["data"]["result"]
    return int(float(res[0]["value"][1])) if res else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=12.0, help="time compression (default 12)")
    ap.add_argument("--quick", action="store_true", help="a development run: print, do not write the results")
    ap.add_argument("-o", "--output", default=str(ROOT / "bench/results/noise.json"))
    args = ap.parse_args()
    prometheus = shutil.which("prometheus")
    am_bin = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if prometheus is None or am_bin is None:
        raise SystemExit("prometheus and alertmanager are needed (scripts/bootstrap.sh installs them)")
    scen = scenarios()
    run_s = FAULT_END + 45
    t_wall0 = time.monotonic()
    procs = []
    with tempfile.TemporaryDirectory(prefix="tg-noise-") as tmp, serve() as sink_tg, serve() as sink_naive:
        targets = Targets()
        identities: dict[str, dict[str, str]] = {"ksm": {"namespace": "kube-system"}}
        lock = threading.Lock()
        for s in scen:
            for n in s.nodes:
                identities[n.name] = {"namespace": NS, "training_job": s.job, "node": n.name, "pod": n.pod}

                def render_node(now: float, n: Node = n, job: str = s.job) -> str:
                    with lock:
                        return exposition(n, job, now)

                targets.render[n.name] = render_node
        targets.render["ksm"] = lambda now: kube_state(scen)
        with serve_targets(targets):
            urls = {}
            for stack, sink in (("trainguard", sink_tg), ("naive", sink_naive)):
                d = Path(tmp) / stack
                d.mkdir()
                files = render(sink, scen, args.scale, naive=stack == "naive")
                (d / "rules.yml").write_text(json.dumps(files["rules.yml"]))
                am_port, prom_port = free_port(), free_port()
                procs.append(
                    start(alertmanager_cmd(am_bin, d, am_port, files["alertmanager.yml"]), d / "am.log")
                )
                config = {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(d / "rules.yml")],
                    "alerting": {
                        "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]
                    },
                    "scrape_configs": [scrape_config(targets, identities, "1s")],
                }
                procs.append(start(prometheus_cmd(prometheus, d, prom_port, config), d / "prometheus.log"))
                urls[stack] = (f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{am_port}")
            try:
                for prom, am in urls.values():
                    wait_http(f"{am}/-/ready", timeout=30)
                    wait_http(f"{prom}/-/ready", timeout=30)
                t0 = time.time()
                while (t := time.time() - t0) < run_s:
                    with lock:
                        for s in scen:
                            s.timeline(s, t)
                            for n in s.nodes:
                                targets.set_down(n.name, not n.exporter_up)
                    time.sleep(0.25)
                raw = {stack: episodes(prom, t0, time.time()) for stack, (prom, _) in urls.items()}
                failed = scrape_failures(urls["trainguard"][0], run_s)
            finally:
                stop(procs)
                logs = "".join((p / n).read_text()[-1500:] for p in Path(tmp).iterdir() if p.is_dir()
                               for n in ("am.log",) if (p / n).exists())  # fmt: skip
    result = summarise(scen, raw, {"trainguard": sink_tg, "naive": sink_naive})
    result["conditions"] = {
        "time_scale": args.scale,
        "scrape_and_evaluation_interval_s": 1,
        "run_s": run_s,
        "wall_s": round(time.monotonic() - t_wall0, 1),
        "incidents": {s.name: f"{s.job}: {len(s.nodes)} nodes x 8 GPUs" for s in scen},
        "trainguard": "rules and routes from trainguard render --format prometheus; every for, group_wait, "
        "group_interval, repeat_interval and the stall threshold divided by time_scale",
        "naive": "the same expressions with for: 0s; group_by ['...'] on every route; send_resolved on every "
        "receiver; no inhibit_rules, quiet hours or maintenance windows",
        "normal_gpu_memory_ratio": 0.75,
        "failed_scrapes_of_healthy_targets": failed,
        "cpus": os.cpu_count(),
        "load_average_1_5_15m_at_end": [round(x, 2) for x in os.getloadavg()],
        "machine": platform.platform(),
        "python": platform.python_version(),
    }
    print_table(result)
    if not result["all_incidents_notified"]:
        print(logs[-3000:], file=sys.stderr)
    if not args.quick:
        Path(args.output).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.output}")


def summarise(
    scen: list[Scenario], raw: dict[str, list[dict[str, str]]], sinks: dict[str, Sink]
) -> dict[str, Any]:
    by_job = {s.job: s for s in scen}
    out: dict[str, Any] = {"stacks": {}}
    ok_all = True
    for stack, sink in sinks.items():
        notes = sink.notifications()
        per: dict[str, Any] = {}
        for s in scen:
            mine = [n for n in notes if n.alerts and n.alerts[0]["labels"].get("training_job") == s.job]
            r = [a for a in raw[stack] if a.get("training_job") == s.job]
            firing = {(n.receiver, a["labels"]["alertname"]) for n in mine for a in n.alerts
                      if a.get("status") == "firing"}  # fmt: skip
            notified = all(any((rec, a) in firing for a in names) for rec, names in s.expect)
            silent = all(
                not any(rec == fr and (not names or a in names) for fr, a in firing)
                for rec, names in s.must_not
            )
            per[s.name] = {
                "raw_alerts": len(r),
                "raw_alerts_p0_p2": sum(1 for a in r if a.get("severity") != "P3"),
                "raw_by_alert": _count(a["alertname"] for a in r),
                "notifications": len(mine),
                "firing_notifications": sum(1 for n in mine if n.status == "firing"),
                "notifications_by_receiver": _count(n.receiver for n in mine),
                "incident_notified": notified,
                "muted_as_expected": silent,
                "notification_log": [
                    f"{n.receiver} {n.status} "
                    + ",".join(sorted({a["labels"]["alertname"] for a in n.alerts}))
                    for n in mine
                ],
            }
            if stack == "trainguard":
                ok_all = ok_all and notified and silent
        raw_n = sum(p["raw_alerts"] for p in per.values())
        raw_np3 = sum(p["raw_alerts_p0_p2"] for p in per.values())
        sent = sum(p["notifications"] for p in per.values())
        sent_firing = sum(p["firing_notifications"] for p in per.values())
        out["stacks"][stack] = {
            "scenarios": per,
            "raw_alerts": raw_n,
            "raw_alerts_p0_p2": raw_np3,
            "notifications": sent,
            "notifications_by_receiver": _count(n.receiver for n in notes if n.alerts and n.alerts[0]["labels"].get("training_job") in by_job),
            "compression": 1 - sent / raw_n if raw_n else 0.0,
            "compression_p0_p2": 1 - sent / raw_np3 if raw_np3 else 0.0,
            "firing_notifications": sent_firing,
            "compression_firing_only": 1 - sent_firing / raw_n if raw_n else 0.0,
        }  # fmt: skip
    naive_raw = out["stacks"]["naive"]["raw_alerts"]
    out["compression_vs_naive_raw"] = (
        1 - out["stacks"]["trainguard"]["notifications"] / naive_raw if naive_raw else 0.0
    )
    out["all_incidents_notified"] = ok_all
    out["target"] = "compression >= 95% with every incident notified at least once to the right receiver"
    return out


def _count(items: Any) -> dict[str, int]:
    c: dict[str, int] = {}
    for i in items:
        c[i] = c.get(i, 0) + 1
    return dict(sorted(c.items()))


def print_table(r: dict[str, Any]) -> None:
    tg, nv = r["stacks"]["trainguard"], r["stacks"]["naive"]
    print(
        f"{'incident':15} {'naive raw':>9} {'naive sent':>10} {'tg raw':>7} {'tg sent':>8}  tg per receiver            notified  muted-ok"
    )
    for name, p in tg["scenarios"].items():
        q = nv["scenarios"][name]
        rec = " ".join(f"{k}={v}" for k, v in p["notifications_by_receiver"].items()) or "-"
        print(f"{name:15} {q['raw_alerts']:>9} {q['notifications']:>10} {p['raw_alerts']:>7} {p['notifications']:>8}  "
              f"{rec:26} {p['incident_notified']!s:8}  {p['muted_as_expected']}")  # fmt: skip
    print(
        f"{'total':15} {nv['raw_alerts']:>9} {nv['notifications']:>10} {tg['raw_alerts']:>7} {tg['notifications']:>8}"
    )
    print(f"compression: trainguard {tg['compression']:.1%} (P0-P2 raw only: {tg['compression_p0_p2']:.1%}), "
          f"naive {nv['compression']:.1%}; trainguard notifications vs naive raw alerts {r['compression_vs_naive_raw']:.1%}")  # fmt: skip
    print(f"firing notifications only: trainguard {tg['firing_notifications']} ({tg['compression_firing_only']:.1%}), "
          f"naive {nv['firing_notifications']} ({nv['compression_firing_only']:.1%})")  # fmt: skip
    print(
        f"every incident notified to the right receiver, maintenance and night muted: {r['all_incidents_notified']}"
    )


if __name__ == "__main__":
    main()
