"""Prometheus rule-evaluation cost as monitors grow: the per-monitor groups `trainguard render --format
prometheus` produces, next to one shared group with per-job thresholds as series, in a real Prometheus
scraping synthetic series for N jobs.

Rendering 500 monitors through the CLI takes minutes on this machine (about 0.1 s of CPU each), and
every monitor of the benchmark has the same spec, so the CLI renders three of them (two namespaces)
and the other groups are that output with the namespace and job name substituted; `groups()` checks
the substitution reproduces the two rendered groups it did not start from, byte for byte.

The shared variant is the real one (render/shared.py, `--rule-form shared`): one group for every job,
whose every per-monitor number is a series joined on (namespace, training_job), and one more target,
standing for the operator, that serves those series for all N monitors as the operator's collector does
(controller/rule_settings.py).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from bench.scenarios.live import Targets, line, prometheus_cmd, scrape_config, serve_targets

from tests.exposition import scrape
from tests.processes import free_port, start, stop, wait_http
from trainguard.api import load_documents
from trainguard.render.policy import effective_policy
from trainguard.render.shared import exposition, shared_group

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
TEMPLATE_NS, TEMPLATE_JOB = "scale-000", "job-0000"
MONITORS_PER_NAMESPACE = 10
GPU_PREFIXES = ("DCGM_", "trainguard_gpu_")
NODE_SERIES = ("kube_node_status_condition", "kube_node_labels")


def log(message: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def identity(i: int) -> tuple[str, str]:
    """Monitor i lives in namespace scale-<i // 10> and is named job-<i>."""
    return f"scale-{i // MONITORS_PER_NAMESPACE:03d}", f"job-{i:04d}"


def monitor_documents(indices: list[int], gpus_per_pod: int = 8) -> list[dict[str, Any]]:
    """The quickstart monitor and its AlertPolicy, once per index: selector app=<job>, no workloadRef
    (the benchmark's pods are bare), one policy per namespace."""
    monitor, policy = [d for d in yaml.safe_load_all(QUICKSTART.read_text()) if d]
    docs: list[dict[str, Any]] = []
    namespaces: set[str] = set()
    for i in indices:
        ns, name = identity(i)
        if ns not in namespaces:
            namespaces.add(ns)
            docs.append({**policy, "metadata": {"name": "default", "namespace": ns}})
        spec = {k: v for k, v in monitor["spec"].items() if k != "workloadRef"}
        spec["selector"] = {"matchLabels": {"app": name}}
        spec["gpusPerPod"] = gpus_per_pod
        docs.append({**monitor, "metadata": {"name": name, "namespace": ns}, "spec": spec})
    return docs


def _substitute(text: str, i: int) -> str:
    ns, name = identity(i)
    return text.replace(TEMPLATE_NS, ns).replace(TEMPLATE_JOB, name)


def groups(n: int, workdir: Path) -> list[dict[str, Any]]:
    """N per-monitor rule groups: three rendered by the CLI, the rest by substitution (checked)."""
    sample = [0, 1, MONITORS_PER_NAMESPACE]
    src = workdir / "monitors.yaml"
    src.write_text(yaml.safe_dump_all(monitor_documents(sample)))
    out = workdir / "rendered"
    subprocess.run(
        [sys.executable, "-m", "trainguard.cli", "render", "-f", str(src), "--format", "prometheus", "--out-dir", str(out)],
        check=True, capture_output=True, cwd=ROOT,
    )  # fmt: skip
    rendered = {g["name"]: g for g in yaml.safe_load((out / "rules.yml").read_text())["groups"]}
    template = json.dumps(rendered[f"trainguard.{TEMPLATE_NS}.{TEMPLATE_JOB}"])
    for i in sample[1:]:
        ns, name = identity(i)
        if json.loads(_substitute(template, i)) != rendered[f"trainguard.{ns}.{name}"]:
            raise RuntimeError(f"the rendered group of {ns}/{name} is not the template's substitution")
    return [json.loads(_substitute(template, i)) for i in range(n)]


def published(n: int) -> str:
    """What the operator serves for N monitors (render/shared.py's series), as one scrape."""
    docs = load_documents([("monitors.yaml", yaml.safe_dump_all(monitor_documents(list(range(n)))))])
    return exposition([(m, effective_policy(m, docs.policies_for(m))) for m in docs.monitors])


def metric_names(group: dict[str, Any]) -> list[str]:
    names: set[str] = set()
    for rule in group["rules"]:
        names.update(m.group(1) for m in re.finditer(r"([A-Za-z_][A-Za-z0-9_:]*)\s*\{", rule["expr"]))
        names.update(re.findall(r"\bkube_[a-z_]+", rule["expr"]))
    return sorted(n for n in names if ":" not in n and n not in ("up", "ALERTS", "by", "on"))


def job_exposition(i: int, names: list[str], *, pods: int, gpus: int, nodes: int) -> str:
    """What the exporters of job i's pods would expose, as one scrape: healthy, constant values."""
    ns, job = identity(i)
    now = time.time()
    values = {"DCGM_FI_DEV_FB_USED": 40000.0, "DCGM_FI_DEV_FB_FREE": 40000.0, "DCGM_FI_DEV_GPU_TEMP": 60.0,
              "DCGM_FI_DEV_GPU_UTIL": 95.0, "DCGM_FI_DEV_POWER_USAGE": 500.0, "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": 700.0,
              "DCGM_FI_DEV_MEMORY_TEMP": 60.0, "trainguard_train_step": 5000.0, "trainguard_train_loss": 2.5,
              "trainguard_train_grad_norm": 1.0, "trainguard_train_tokens_per_second_per_gpu": 3000.0,
              "trainguard_train_last_step_timestamp_seconds": now, "trainguard_train_start_timestamp_seconds": now - 3600,
              "trainguard_checkpoint_last_success_timestamp_seconds": now,
              "trainguard_checkpoint_filesystem_avail_bytes": 1e13, "trainguard_exporter_gpus_assigned": gpus}  # fmt: skip
    bases = [
        {
            "namespace": ns,
            "training_job": job,
            "pod": f"{job}-{p}",
            "node": f"gpu-node-{(i * pods + p) % nodes}",
        }
        for p in range(pods)
    ]
    out: list[str] = []
    for name in names:  # one family at a time, as the text format wants
        if name.startswith("kube_"):
            continue
        v = values.get(name, 0.0)
        for p, base in enumerate(bases):
            if name.startswith(GPU_PREFIXES):
                out += [
                    line(name, {**base, "gpu": str(g), "UUID": f"GPU-{i}-{p}-{g}"}, v) for g in range(gpus)
                ]
            elif name.endswith("_bucket"):
                out += [line(name, {**base, "le": le}, 10.0) for le in ("0.01", "0.1", "1", "+Inf")]
            elif name == "trainguard_checkpoint_last_success_timestamp_seconds":
                out += [line(name, {**base, "kind": k}, v) for k in ("full", "incremental")]
            else:
                out.append(line(name, base, v))
    return "".join(out)


def cluster_exposition(n: int, pods: int, nodes: int) -> str:
    """kube-state-metrics' share: every node Ready with its rack label, every pod Running."""
    out = []
    for k in range(nodes):
        node = f"gpu-node-{k}"
        out.append(
            line("kube_node_status_condition", {"node": node, "condition": "Ready", "status": "true"}, 1)
        )
        out.append(
            line(
                "kube_node_labels", {"node": node, "label_topology_kubernetes_io_zone": f"rack-{k // 16}"}, 1
            )
        )
    for i in range(n):
        ns, job = identity(i)
        out += [line("kube_pod_status_phase", {"namespace": ns, "pod": f"{job}-{p}", "phase": "Running"}, 1)
                for p in range(pods)]  # fmt: skip
    return "".join(out)


@dataclass
class Reading:
    groups: int
    rules: int
    series: int
    durations_s: list[float]
    """prometheus_rule_group_last_duration_seconds of every group, averaged over the rounds read."""
    cpu_s_per_round: float
    missed: float
    rss_bytes: float
    load_s: float

    def summary(self) -> dict[str, Any]:
        d = self.durations_s
        return {
            "groups": self.groups, "rules": self.rules, "series": self.series,
            "eval_sum_ms": round(1000 * sum(d), 1), "group_p50_ms": round(1000 * statistics.median(d), 2),
            "group_max_ms": round(1000 * max(d), 2), "prometheus_cpu_s_per_round": round(self.cpu_s_per_round, 2),
            "iterations_missed": self.missed, "prometheus_rss_mib": round(self.rss_bytes / 2**20),
            "start_to_ready_s": round(self.load_s, 1),
        }  # fmt: skip


def _query(url: str, q: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?query={urllib.parse.quote(q)}", timeout=30) as resp:
        return list(json.loads(resp.read())["data"]["result"])


@contextlib.contextmanager
def prometheus(rule_groups: list[dict[str, Any]], render: dict[str, Callable[[float], str]], workdir: Path,
               interval: str) -> Iterator[tuple[str, float]]:  # fmt: skip
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("prometheus is needed (scripts/bootstrap.sh installs it)")
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    (workdir / "rules.yml").write_text(json.dumps({"groups": rule_groups}))
    targets = Targets(render=render)
    with serve_targets(targets):
        # kube-state-metrics and the operator: an `up` of their own each, with no training_job
        identities = {k: ({"namespace": identity(int(k))[0], "training_job": identity(int(k))[1]} if k.isdigit()
                          else {"component": k}) for k in render}  # fmt: skip
        config = {"global": {"scrape_interval": interval, "evaluation_interval": interval},
                  "rule_files": [str(workdir / "rules.yml")], "scrape_configs": [scrape_config(targets, identities, interval)]}  # fmt: skip
        port = free_port()
        t0 = time.monotonic()
        proc = start(prometheus_cmd(binary, workdir, port, config), workdir / "prometheus.log")
        url = f"http://127.0.0.1:{port}"
        try:
            wait_http(f"{url}/-/ready", timeout=300, proc=proc)
            yield url, time.monotonic() - t0
        finally:
            stop([proc])


def measure(url: str, load_s: float, targets: int, interval_s: float, rounds: int) -> Reading:
    """Wait for every target's first scrape and one full round of evaluation over it, then read the
    groups' last durations once per round."""
    deadline = time.monotonic() + 4 * interval_s + 120
    while time.monotonic() < deadline:
        got = _query(url, "count(up == 1)")
        if got and int(float(got[0]["value"][1])) >= targets:
            break
        time.sleep(1)
    else:
        raise RuntimeError(f"Prometheus at {url} did not scrape {targets} targets")
    time.sleep(interval_s + 1)
    samples: list[dict[str, float]] = []
    cpu: list[float] = []
    for r in range(rounds):
        s = scrape(url)
        samples.append({lbl["rule_group"]: v for lbl, v in s["prometheus_rule_group_last_duration_seconds"]})
        cpu.append(s["process_cpu_seconds_total"][0][1])
        if r + 1 < rounds:
            time.sleep(interval_s)
    s = scrape(url)
    per_group = {g: statistics.mean(x[g] for x in samples) for g in samples[-1]}
    return Reading(
        groups=len(per_group),
        rules=int(sum(v for _, v in s["prometheus_rule_group_rules"])),
        series=int(s["prometheus_tsdb_head_series"][0][1]),
        durations_s=list(per_group.values()),
        cpu_s_per_round=(cpu[-1] - cpu[0]) / max(1, rounds - 1),
        missed=sum(v for _, v in s["prometheus_rule_group_iterations_missed_total"]),
        rss_bytes=s["process_resident_memory_bytes"][0][1],
        load_s=load_s,
    )


def run(points: list[int], *, pods: int, gpus: int, nodes: int, rounds: int) -> dict[str, Any]:
    """Per point: Prometheus with N per-monitor groups, then with the one shared group, same series."""
    with tempfile.TemporaryDirectory(prefix="tg-scale-rules-") as tmp:
        d = Path(tmp)
        log(f"rules: rendering (CLI) and expanding {max(points)} monitors' groups")
        all_groups = groups(max(points), d)
        shared = shared_group()
        interval = all_groups[0].get("interval", "15s")
        interval_s = float(interval.rstrip("s"))
        names = metric_names(all_groups[0])
        out: dict[str, Any] = {
            "interval": interval, "rules_per_monitor_group": len(all_groups[0]["rules"]),
            "rules_in_shared_group": len(shared["rules"]), "metric_names": len(names), "points": [],
        }  # fmt: skip
        for n in points:
            row: dict[str, Any] = {"monitors": n}
            for variant in ("per-monitor", "shared"):
                bodies = {
                    str(i): job_exposition(i, names, pods=pods, gpus=gpus, nodes=nodes) for i in range(n)
                }
                render: dict[str, Callable[[float], str]] = {
                    k: (lambda _t, b=b: b) for k, b in bodies.items()
                }
                ksm = cluster_exposition(n, pods, nodes)
                render["ksm"] = lambda _t, body=ksm: body
                if variant == "shared":
                    operator = published(n)
                    render["operator"] = lambda _t, body=operator: body
                rule_groups = all_groups[:n] if variant == "per-monitor" else [shared]
                log(f"rules: {n} monitors, {variant}: {len(rule_groups)} groups, starting Prometheus")
                with prometheus(rule_groups, render, d / f"{variant}-{n}", interval) as (url, load_s):
                    reading = measure(url, load_s, len(render), interval_s, rounds)
                    recorded = _query(url, 'count({__name__=~"trainguard:.+"})')
                    alerts = _query(url, "count(ALERTS)")
                row[variant] = {
                    **reading.summary(),
                    "recorded_series": int(float(recorded[0]["value"][1])) if recorded else 0,
                    "alert_series": int(float(alerts[0]["value"][1])) if alerts else 0,
                }
                log(f"rules: {n} monitors, {variant}: {json.dumps(row[variant])}")
            out["points"].append(row)
        return out
