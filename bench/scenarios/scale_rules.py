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

The distributed variant (at --rule-distributed points) is the shared group on Thanos, the engine
docs/distributed.md chooses: three Receive nodes in one hashring with replication factor 2, a Query over
them and a Ruler through it (e2e/thanos.py), fed by a Prometheus that scrapes the same targets and
remote-writes them to one Receive node. Its CPU is read per tier, the Ruler with Query (what evaluation
costs), the Receive nodes and the scraper.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from bench.scenarios.live import Targets, line, prometheus_cmd, scrape_config, serve_targets

from tests.exposition import scrape
from tests.processes import free_port, start, stop, wait_http
from trainguard.api import load_documents
from trainguard.render.policy import effective_policy
from trainguard.render.shared import exposition, shared_group, shared_groups

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
    rule_sum_s: float | None
    """prometheus_rule_group_last_rule_duration_sum_seconds summed (Prometheus 3): above the groups' own
    durations when rules of a group ran concurrently."""
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
            "rule_eval_sum_ms": None if self.rule_sum_s is None else round(1000 * self.rule_sum_s, 1),
        }  # fmt: skip


def _unix(rfc3339: Any) -> float:
    """A lastEvaluation time (RFC 3339, nanoseconds) in Unix seconds; 0 for none."""
    if not rfc3339 or str(rfc3339).startswith("0001-"):
        return 0.0
    text = re.sub(r"(\.\d{6})\d+", r"\1", str(rfc3339)).replace("Z", "+00:00")
    return datetime.fromisoformat(text).timestamp()


def _query(url: str, q: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?query={urllib.parse.quote(q)}", timeout=30) as resp:
        return list(json.loads(resp.read())["data"]["result"])


def _count(url: str, q: str) -> int | None:
    """A count query's value; None when the store does not answer within _query's timeout (a Thanos
    Query counting 500,000 series on two saturated cores), so that the figures read before survive."""
    try:
        got = _query(url, q)
    except (TimeoutError, urllib.error.URLError) as exc:
        log(f"rules: {q} not answered ({exc}): left out")
        return None
    return int(float(got[0]["value"][1])) if got else 0


@contextlib.contextmanager
def prometheus(rule_groups: list[dict[str, Any]], render: dict[str, Callable[[float], str]], workdir: Path,
               interval: str, *, remote_write: str = "", binary: str | None = None,
               flags: tuple[str, ...] = ()) -> Iterator[tuple[str, float]]:  # fmt: skip
    binary = binary or shutil.which("prometheus")
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
        config: dict[str, Any] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(workdir / "rules.yml")], "scrape_configs": [scrape_config(targets, identities, interval)]}  # fmt: skip
        if remote_write:  # the distributed engine's scraper: what it scrapes goes to a Receive node
            config["remote_write"] = [{"url": remote_write}]
        port = free_port()
        t0 = time.monotonic()
        proc = start([*prometheus_cmd(binary, workdir, port, config), *flags], workdir / "prometheus.log")
        url = f"http://127.0.0.1:{port}"
        try:
            wait_http(f"{url}/-/ready", timeout=300, proc=proc)
            yield url, time.monotonic() - t0
        finally:
            stop([proc])


def slowest_rules(url: str, top: int = 8) -> dict[str, float]:
    """The rules that took longest in their group's last evaluation (/api/v1/rules), in ms: where a
    shared group's time goes."""
    with urllib.request.urlopen(f"{url}/api/v1/rules", timeout=60) as resp:
        groups = json.loads(resp.read())["data"]["groups"]
    rules = [(float(r.get("evaluationTime") or 0), str(r["name"])) for g in groups for r in g["rules"]]
    out: dict[str, float] = {}
    for seconds, name in sorted(rules, reverse=True):
        if len(out) == top:
            break
        out[name] = round(1000 * (out.get(name, 0) / 1000 + seconds), 1)  # a record name may repeat
    return out


def all_scraped(url: str, targets: int, deadline: float) -> None:
    """Wait until the Prometheus at `url` has every target up (by the monotonic `deadline`)."""
    while time.monotonic() < deadline:
        got = _query(url, "count(up == 1)")
        if got and int(float(got[0]["value"][1])) >= targets:
            return
        time.sleep(1)
    raise RuntimeError(f"Prometheus at {url} did not scrape {targets} targets")


def measure(url: str, load_s: float, targets: int, interval_s: float, rounds: int) -> Reading:
    """Wait for every target's first scrape and for every group to finish an evaluation over it (one
    group may take longer than the interval), then read the groups' last durations once per round."""
    deadline = time.monotonic() + 4 * interval_s + 120
    all_scraped(url, targets, deadline)
    time.sleep(interval_s + 1)
    # a group evaluated since: its last evaluation began after the scrapes above (ALERTS would not tell
    # a group that has not finished from a group whose alerts are pending)
    scraped = time.time() - interval_s - 1
    while time.monotonic() < deadline + 300:
        with urllib.request.urlopen(f"{url}/api/v1/rules", timeout=60) as resp:
            groups = json.loads(resp.read())["data"]["groups"]
        if all(_unix(g.get("lastEvaluation")) > scraped and g.get("evaluationTime") for g in groups):
            break
        time.sleep(1)
    samples: list[dict[str, float]] = []
    cpu: list[float] = []
    rule_sums: list[float] = []
    for r in range(rounds):
        s = scrape(url)
        samples.append({lbl["rule_group"]: v for lbl, v in s["prometheus_rule_group_last_duration_seconds"]})
        cpu.append(s["process_cpu_seconds_total"][0][1])
        if "prometheus_rule_group_last_rule_duration_sum_seconds" in s:
            rule_sums.append(sum(v for _, v in s["prometheus_rule_group_last_rule_duration_sum_seconds"]))
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
        rule_sum_s=statistics.mean(rule_sums) if rule_sums else None,
        missed=sum(v for _, v in s["prometheus_rule_group_iterations_missed_total"]),
        rss_bytes=s["process_resident_memory_bytes"][0][1],
        load_s=load_s,
    )


def _cpu_rss(urls: list[str]) -> tuple[float, float]:
    """Summed process CPU seconds and resident bytes of the processes at `urls` (their /metrics)."""
    cpu = rss = 0.0
    for url in urls:
        s = scrape(url)
        cpu += s["process_cpu_seconds_total"][0][1]
        rss += s["process_resident_memory_bytes"][0][1]
    return cpu, rss


def measure_distributed(thanos: Any, scraper: str, targets: int, *, n: int, interval_s: float, rounds: int) -> dict[str, Any]:  # fmt: skip
    """The shared group on Thanos: the scraper Prometheus remote-writes every target to Receive, the Ruler
    evaluates through Query. Waits for every target's scrape and for Query to show the jobs' alerts (the
    synthetic data fires one per job), then reads the Ruler's group duration and each tier's CPU per
    round: the Ruler and Query (evaluation), the Receive nodes (ingest and storage), the scraper."""
    deadline = time.monotonic() + 4 * interval_s + 300
    all_scraped(scraper, targets, deadline)
    alerts = 0
    while time.monotonic() < deadline:
        got = _query(thanos.query, "count(ALERTS)")
        alerts = int(float(got[0]["value"][1])) if got else 0
        if alerts >= n:
            break
        time.sleep(interval_s / 3)
    eval_urls = [thanos.rule, thanos.query]
    receive_urls = [r.http for r in thanos.receivers]
    durations: list[float] = []
    slowest: list[float] = []
    marks = []
    for r in range(rounds + 1):
        s = scrape(thanos.rule)
        if r:
            groups = [v for lbl, v in s["prometheus_rule_group_last_duration_seconds"]
                      if lbl.get("rule_group", "").find("warmup") < 0]  # fmt: skip
            durations.append(sum(groups))
            slowest.append(max(groups, default=0.0))
        marks.append((_cpu_rss(eval_urls), _cpu_rss(receive_urls), _cpu_rss([scraper])))
        if r < rounds:
            time.sleep(interval_s)
    (e0, _), (r0, _), (s0, _) = marks[0]
    (e1, erss), (r1, rrss), (s1, srss) = marks[-1]
    return {
        "series": _count(thanos.query, 'count({__name__=~".+"})') if alerts else 0,
        "eval_sum_ms": round(1000 * statistics.mean(durations), 1),
        "group_max_ms": round(1000 * statistics.mean(slowest), 1),
        "ruler_query_cpu_s_per_round": round((e1 - e0) / rounds, 2),
        "receive_cpu_s_per_round": round((r1 - r0) / rounds, 2),
        "scraper_cpu_s_per_round": round((s1 - s0) / rounds, 2),
        "rss_mib": {"ruler_query": round(erss / 2**20), "receive": round(rrss / 2**20), "scraper": round(srss / 2**20)},
        "alert_series": alerts, "receivers": len(receive_urls),
    }  # fmt: skip


class _Sink(BaseHTTPRequestHandler):
    """The Ruler's Alertmanager: takes every post (what it sends is not what is measured)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


def distributed(shared: list[dict[str, Any]], render: dict[str, Callable[[float], str]], workdir: Path, *,
                interval: str, n: int, rounds: int) -> dict[str, Any]:  # fmt: skip
    """The shared group (or its split groups) evaluated by Thanos (e2e/thanos.py: 3 Receive nodes,
    replication factor 2, Query, Ruler), the series remote-written by a Prometheus that scrapes the same
    targets and evaluates nothing."""
    from e2e.thanos import thanos_binary, thanos_stack  # noqa: PLC0415 - only this variant needs Thanos

    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    # as every PrometheusRule group (docs/distributed.md)
    groups = [{**g, "partial_response_strategy": "warn"} for g in shared]
    (workdir / "rules.yml").write_text(json.dumps({"groups": groups}))
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    try:
        am = f"http://127.0.0.1:{sink.server_address[1]}"
        with thanos_stack(
            thanos_binary(), workdir, workdir / "rules.yml", am, eval_interval=interval
        ) as thanos:
            write = thanos.receivers[0].write_url
            with prometheus([], render, workdir / "scraper", interval, remote_write=write) as (url, _):
                return measure_distributed(
                    thanos, url, len(render), n=n, interval_s=float(interval.rstrip("s")), rounds=rounds
                )
    finally:
        sink.shutdown()


CONCURRENT_VARIANTS = ("shared-3", "shared-3-concurrent")
"""The shared group on Prometheus 3, as it evaluates a group (one rule after the other), then with its
concurrent-rule-eval feature: the rules that no other rule of the group reads (the alerts) run in
parallel, up to --rules.max-concurrent-evals of them, once the recordings they read are done."""


SPLIT = "shared-split"
"""The shared group's rules in several groups (--shared-rule-groups, render/rule_split.py) on the same
Prometheus 2.42, which evaluates groups in parallel and the rules of a group one after the other."""
DISTRIBUTED, DISTRIBUTED_SPLIT = "distributed", "distributed-split"
"""The shared group on Thanos, and at the points where the split runs too, its split groups there."""


def run(points: list[int], *, pods: int, gpus: int, nodes: int, rounds: int,
        shared_only: tuple[int, ...] = (), distributed_at: tuple[int, ...] = (),
        concurrent_at: tuple[int, ...] = (), prometheus3: str | None = None,
        split_at: tuple[int, ...] = (), split_parts: int = 4) -> dict[str, Any]:  # fmt: skip
    """Per point: Prometheus with N per-monitor groups, then with the one shared group, same series. At the
    `shared_only` points only the shared group runs (N per-monitor groups would not fit this machine); at
    the `split_at` points the shared group in `split_parts` groups too (SPLIT); at the `distributed_at`
    points the shared group runs on Thanos too (`distributed`, and split where `split_at` has the
    point too); at the `concurrent_at` points on the
    `prometheus3` binary too, without and with concurrent rule evaluation."""
    with tempfile.TemporaryDirectory(prefix="tg-scale-rules-") as tmp:
        d = Path(tmp)
        most = max((p for p in points if p not in shared_only), default=1)
        log(f"rules: rendering (CLI) and expanding {most} monitors' groups")
        all_groups = groups(most, d)
        shared = shared_group()
        interval = all_groups[0].get("interval", "15s")
        interval_s = float(interval.rstrip("s"))
        names = metric_names(all_groups[0])
        out: dict[str, Any] = {
            "interval": interval, "rules_per_monitor_group": len(all_groups[0]["rules"]),
            "rules_in_shared_group": len(shared["rules"]), "metric_names": len(names), "points": [],
            "split_parts": split_parts,
        }  # fmt: skip
        for n in points:
            row: dict[str, Any] = {"monitors": n}
            variants: tuple[str, ...] = ("shared",) if n in shared_only else ("per-monitor", "shared")
            if n in split_at:
                variants += (SPLIT,)
            if n in concurrent_at:
                variants += CONCURRENT_VARIANTS
            if n in distributed_at:
                variants += (DISTRIBUTED, DISTRIBUTED_SPLIT) if n in split_at else (DISTRIBUTED,)
            for variant in variants:
                bodies = {
                    str(i): job_exposition(i, names, pods=pods, gpus=gpus, nodes=nodes) for i in range(n)
                }
                render: dict[str, Callable[[float], str]] = {
                    k: (lambda _t, b=b: b) for k, b in bodies.items()
                }
                ksm = cluster_exposition(n, pods, nodes)
                render["ksm"] = lambda _t, body=ksm: body
                if variant != "per-monitor":
                    operator = published(n)
                    render["operator"] = lambda _t, body=operator: body
                if variant in (DISTRIBUTED, DISTRIBUTED_SPLIT):
                    log(f"rules: {n} monitors, {variant}: starting Thanos and its scraper")
                    on = shared_groups(parts=split_parts) if variant == DISTRIBUTED_SPLIT else [shared]
                    row[variant] = distributed(
                        on, render, d / f"{variant}-{n}", interval=interval, n=n, rounds=rounds
                    )
                    log(f"rules: {n} monitors, {variant}: {json.dumps(row[variant])}")
                    continue
                rule_groups = (all_groups[:n] if variant == "per-monitor"
                               else shared_groups(parts=split_parts) if variant == SPLIT else [shared])  # fmt: skip
                binary, flags = None, ()
                if variant in CONCURRENT_VARIANTS:
                    if prometheus3 is None:
                        raise SystemExit("--rule-concurrent needs Prometheus 3 (`make upstream-tools`)")
                    binary = prometheus3
                    if variant == "shared-3-concurrent":
                        flags = ("--enable-feature=concurrent-rule-eval",
                                 f"--rules.max-concurrent-evals={os.cpu_count() or 1}")  # fmt: skip
                log(f"rules: {n} monitors, {variant}: {len(rule_groups)} groups, starting Prometheus")
                workdir = d / f"{variant}-{n}"
                started = prometheus(rule_groups, render, workdir, interval, binary=binary, flags=flags)
                with started as (url, load_s):
                    reading = measure(url, load_s, len(render), interval_s, rounds)
                    recorded = _query(url, 'count({__name__=~"trainguard:.+"})')
                    alerts = _query(url, "count(ALERTS)")
                    slowest = slowest_rules(url) if variant.startswith("shared") else []
                row[variant] = {
                    **reading.summary(),
                    "recorded_series": int(float(recorded[0]["value"][1])) if recorded else 0,
                    "alert_series": int(float(alerts[0]["value"][1])) if alerts else 0,
                }
                if slowest:
                    row[variant]["slowest_rules_ms"] = slowest
                log(f"rules: {n} monitors, {variant}: {json.dumps(row[variant])}")
            out["points"].append(row)
        return out
