"""Every panel of the generated dashboards shows data against a real Prometheus.

Two real exporters (simulated GPUs, fault injection on) are scraped every second by a real Prometheus
that evaluates the rules `trainguard render` produces. Pod llama-0 on gpu-node-1 runs
examples/train_tiny.py through the SDK; pod llama-1 on gpu-node-2 is a mixed-precision rank driven
from this test through the SDK's Reporter, because train_tiny (pure Python, fp64) has no loss scale and
no allocator to report. kube-state-metrics needs an apiserver, so a stand-in serves the series it
exports for two Ready nodes, one of which carries the operator's cordon taint (what the cluster shows
after a remediation; the operator itself is not run here: its goodput series, which the job dashboard
reads too, are served from its own collector (controller/metrics.py) over the job's monitor).

Each panel's query is sent as Grafana sends it (template variables substituted with the values the
dashboard's own variable queries return) and must return at least one series: first with no fault,
where only the panels listed in NEEDS_A_FAULT may be empty, then with those faults injected; and the
slow-GPU row must single out the GPU a pcie-downtrain and an hw-slowdown slow.
The long-term aggregates (aggregates.yml, the cost records the Cost dashboard reads among them) run
every 5 seconds instead of 5 minutes, render's own --aggregate-interval, so that they have data in time.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.processes import free_port, http_json, serve_text, start, stop, wait_http
from trainguard.api import load_documents
from trainguard.catalog.kubernetes import FAULTY_TAINT
from trainguard.controller.metrics import GoodputCollector
from trainguard.exporter.faults import KINDS
from trainguard.render import dump_yaml, render_prometheus
from trainguard.render.dashboards import panel_queries, render_dashboards, variable_queries
from trainguard.sdk import Reporter

pytestmark = pytest.mark.tools

DOCS = """
apiVersion: trainguard.io/v1alpha1
kind: TrainingJobMonitor
metadata: {name: llama-pretrain, namespace: ml}
spec:
  selector: {matchLabels: {app: llama-pretrain}}
  exporter: {gpuBackend: simulated, scrapeInterval: 1s}
  baseline: {warmupSteps: 0, window: 1m, offset: 10s, sigma: 3}
  checkpoint: {timeout: 5s}
  policyRefs: [{name: fast}]
  costLabels: {team: ml-infra, model: llama-70b}
---
apiVersion: trainguard.io/v1alpha1
kind: AlertPolicy
metadata: {name: fast, namespace: ml}
spec:
  escalation: {enabled: false}
  alerts:
    - {name: GPUPowerCapped, for: 0s}
"""
NODES = {"gpu-node-1": "llama-0", "gpu-node-2": "llama-1"}
KSM = "".join(
    f'kube_node_status_condition{{node="{n}",condition="Ready",status="{s}"}} {int(s == "true")}\n'
    for n in NODES
    for s in ("true", "false", "unknown")
) + (
    f'kube_node_spec_taint{{node="gpu-node-2",key="{FAULTY_TAINT}",value="GPUCriticalXid",effect="NoSchedule"}} 1\n'
)

NEEDS_A_FAULT: dict[str, tuple[str, str]] = {
    "Packet loss (worst interface)": (
        "packet-loss",
        "the exporter reports loss only for interfaces with traffic between two polls; the test host's are idle",
    ),
    "Firing alerts by severity": ("power-limit", "no alert fires on a healthy job; power-limit fires the P3"),
    "Firing alerts": ("power-limit", "as above"),
    "Active alerts": ("power-limit", "as above"),
    "P0 alerts (what the operator acts on)": ("oom", "a P0 needs a P0 fault: oom fires GPUOutOfMemory"),
}
"""Panels that are empty on a healthy job, the fault that fills each, and why."""


def operator_goodput() -> str:
    """What the leader's GoodputCollector exports for the job's monitor, created an hour ago, no records."""
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3600))
    body = {
        "metadata": {"namespace": "ml", "name": "llama-pretrain", "creationTimestamp": created},
        "status": {},
    }
    registry = CollectorRegistry()
    registry.register(GoodputCollector(lambda: [body], leader=lambda: True))
    return generate_latest(registry).decode()


FAULTS = sorted({fault for fault, _ in NEEDS_A_FAULT.values()})


def mixed_precision_rank(endpoint: str, stop_event: threading.Event) -> None:
    """Rank 1 of the job: steps with a loss scale that a grad scaler halves now and then, and the
    allocator's fragmentation, reported through the SDK."""
    reporter = Reporter(endpoint=endpoint)
    step, scale = 0, 65536.0
    while not stop_event.is_set():
        step += 1
        if step % 50 == 0:
            scale /= 2
        reporter.log_step(step, loss=2.0 / step**0.5, grad_norm=1.0, tokens=4096, loss_scale=scale)
        reporter.log_fragmentation(gpu=0, ratio=0.05 + (step % 10) / 100)
        stop_event.wait(0.05)
    reporter.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus is not installed (.ci/run installs it)")
    d = tmp_path_factory.mktemp("dashboards")
    files = render_prometheus(load_documents([("m.yaml", DOCS)]), aggregate_interval="5s")
    for name in ("rules.yml", "aggregates.yml"):
        (d / name).write_text(dump_yaml(files[name]))
    served = contextlib.ExitStack()
    ksm = served.enter_context(serve_text(KSM))
    operator = served.enter_context(serve_text(operator_goodput()))
    ports = {node: free_port() for node in NODES}
    prom_port = free_port()
    targets = [
        {"targets": [f"127.0.0.1:{ports[node]}"],
         "labels": {"namespace": "ml", "training_job": "llama-pretrain", "node": node, "pod": pod}}
        for node, pod in NODES.items()
    ]  # fmt: skip
    (d / "prometheus.yml").write_text(dump_yaml({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(d / "rules.yml"), str(d / "aggregates.yml")],
        "scrape_configs": [
            # a static target, so no label can come from Kubernetes discovery: the exporter's own identity (the same
            # values as the target's) is honoured here; the PodMonitor sets it from the target and drops the pod's
            # (tests/integration/test_tenant_cannot_pose.py)
            {"job_name": "trainguard", "honor_labels": True, "static_configs": targets},
            # kube-state-metrics labels the objects it reports (their namespace, node): honoured, as dcgm-exporter's
            {"job_name": "kube-state-metrics", "honor_labels": True,
             "static_configs": [{"targets": [ksm]}]},
            # the operator's goodput: its ServiceMonitor honours their labels (namespace is the job's)
            {"job_name": "trainguard-operator", "honor_labels": True, "static_configs": [{"targets": [operator]}]},
        ],
    }))  # fmt: skip
    procs = [
        start([sys.executable, "-m", "trainguard.cli", "exporter", "--backend", "simulated", "--gpus", "2",
               "--enable-fault-injection", "--sdk-tcp", "--listen", f"127.0.0.1:{ports[node]}",
               "--poll-interval", "0.5", "--namespace", "ml", "--training-job", "llama-pretrain",
               "--node", node, "--pod", pod], d / f"exporter-{pod}.log")
        for node, pod in NODES.items()
    ]  # fmt: skip
    procs.append(
        start([prometheus, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'data'}",
               f"--web.listen-address=127.0.0.1:{prom_port}"], d / "prometheus.log")
    )  # fmt: skip
    done = threading.Event()
    rank: threading.Thread | None = None
    try:
        for proc, node in zip(procs, NODES, strict=False):
            wait_http(f"http://127.0.0.1:{ports[node]}/healthz", proc=proc)
        procs.append(start([sys.executable, "examples/train_tiny.py", "--steps", "100000000", "--step-delay", "0.02",
                            "--endpoint", f"http://127.0.0.1:{ports['gpu-node-1']}",
                            "--checkpoint-dir", str(d / "ckpt")], d / "trainer.log"))  # fmt: skip
        rank = threading.Thread(
            target=mixed_precision_rank, args=(f"http://127.0.0.1:{ports['gpu-node-2']}", done), daemon=True
        )
        rank.start()
        wait_http(f"http://127.0.0.1:{prom_port}/-/ready", proc=procs[2], timeout=30)
        yield {
            "prometheus": f"http://127.0.0.1:{prom_port}",
            "exporters": [f"http://127.0.0.1:{p}" for p in ports.values()],
            "dir": d,
        }
    finally:
        done.set()
        if rank is not None:
            rank.join(timeout=5)
        stop(procs)
        served.close()


def query(prom: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prom}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    answer = http_json(url)
    assert answer["status"] == "success", answer
    result = answer["data"]["result"]
    return result if isinstance(result, list) else [result]


def label_values(prom: str, selector: str, label: str) -> list[str]:
    url = f"{prom}/api/v1/label/{label}/values?{urllib.parse.urlencode({'match[]': selector})}"
    return list(http_json(url)["data"])


def variable_values(prom: str, board: dict[str, Any], fixed: dict[str, str]) -> dict[str, list[str]]:
    """Each query variable's values as Grafana would list them, in the dashboard's order (a later
    variable's query may use an earlier one)."""
    values: dict[str, list[str]] = {}
    for name, q in variable_queries(board):
        selector, label = q.removeprefix("label_values(").removesuffix(")").rsplit(", ", 1)
        for var, chosen in fixed.items():
            selector = selector.replace(f"${var}", chosen)
        values[name] = label_values(prom, selector, label)
        if values[name]:
            fixed = fixed | {name: values[name][0]}
    return values


def empty_panels(prom: str) -> tuple[dict[str, list[str]], list[str]]:
    """(variable values, the 'board / panel: query' of every query that returned nothing)."""
    empty: list[str] = []
    seen: dict[str, list[str]] = {}
    for name, text in render_dashboards().items():
        board = json.loads(text)
        values = variable_values(prom, board, {"sigma": "3", "cost_label": "team"})
        seen |= values
        # a repeated row runs once per value of its variable: every node must show data
        runs = [{"namespace": ns, "training_job": job, "node": node, "sigma": "3", "cost_label": "team"}
                for ns in values.get("namespace", ["-"]) for job in values.get("training_job", ["-"])
                for node in values.get("node", ["-"])]  # fmt: skip
        for title, expr in panel_queries(board):
            for run in runs:
                q = expr.replace("$__rate_interval", "1m").replace("$__range", "1h")
                for var, value in run.items():
                    q = q.replace(f"${var}", value)
                if not query(prom, q):
                    empty.append(f"{name} / {title}: {q}")
    return seen, empty


def panel_of(line: str) -> str:
    """The panel title of an empty_panels line."""
    return line.split(" / ", 1)[1].split(": ", 1)[0]


def test_every_panel_shows_data(stack: dict[str, Any]) -> None:
    prom = stack["prometheus"]
    # long enough for the baseline (window 1m, offset 10s) to have samples, and the p99's rate window
    deadline = time.monotonic() + 90
    values: dict[str, list[str]] = {}
    empty: list[str] = []
    while time.monotonic() < deadline:
        values, empty = empty_panels(prom)
        if all(values.values()) and {panel_of(p) for p in empty} <= set(NEEDS_A_FAULT):
            break
        time.sleep(3)
    logs = "\n".join(p.read_text()[-1500:] for p in stack["dir"].glob("*.log"))
    assert values == {"node": sorted(NODES), "namespace": ["ml"], "training_job": ["llama-pretrain"]}, values
    unexplained = [p for p in empty if panel_of(p) not in NEEDS_A_FAULT]
    assert not unexplained, f"panels without data on a healthy job: {unexplained}\n{logs}"

    def severities() -> set[str]:
        firing = query(prom, 'count by (severity) (ALERTS{alertstate="firing"})')
        return {r["metric"]["severity"] for r in firing}

    for fault in FAULTS:
        for exporter in stack["exporters"]:
            http_json(f"{exporter}/v1/faults", {"fault": fault, "gpu": 1})
    try:
        # the panels fill as the faults are scraped, and a panel of firing alerts fills with the first alert
        # to fire: the P0 and the P3 are waited for with them, not read once after
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            _, empty = empty_panels(prom)
            fired = severities()
            if not empty and {"P0", "P3"} <= fired:
                break
            time.sleep(2)
        assert not empty, f"panels without data with {FAULTS} injected: {empty}\n{logs}"
        assert {"P0", "P3"} <= fired, fired
    finally:
        for exporter in stack["exporters"]:
            http_json(f"{exporter}/v1/faults", method="DELETE")


def test_every_fault_listed_is_a_real_fault_kind() -> None:
    assert set(FAULTS) <= set(KINDS)


def test_the_cost_panels_charge_the_job_to_its_cost_labels(stack: dict[str, Any]) -> None:
    """The Cost dashboard's queries, as Grafana sends them, attribute the job's GPUs to the team and
    model of its monitor's costLabels: 2 simulated GPUs on each of 2 pods."""
    prom = stack["prometheus"]
    board = json.loads(render_dashboards()["cost.json"])
    queries = {t: e.replace("$__range", "1h") for t, e in panel_queries(board)}
    deadline = time.monotonic() + 120
    by_team: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        by_team = query(prom, queries["GPU-hours by $cost_label"].replace("$cost_label", "team"))
        if by_team:
            break
        time.sleep(2)
    assert [r["metric"] for r in by_team] == [{"team": "ml-infra"}], by_team
    assert float(by_team[0]["value"][1]) > 0, by_team
    by_model = query(prom, queries["GPU-hours by $cost_label"].replace("$cost_label", "model"))
    assert [r["metric"] for r in by_model] == [{"model": "llama-70b"}], by_model
    held = query(prom, queries["GPUs held by namespace"])
    # 4 GPUs once a whole window has passed; fewer while the first window fills
    assert [r["metric"] for r in held] == [{"namespace": "ml"}] and 0 < float(held[0]["value"][1]) <= 4, held
    (peak,) = query(prom, queries["Peak GPU memory by job"])
    assert peak["metric"] == {"namespace": "ml", "training_job": "llama-pretrain"}, peak
    assert float(peak["value"][1]) > 0, peak


def test_the_slow_gpu_panels_show_a_link_trained_down_and_a_clock_held_low(stack: dict[str, Any]) -> None:
    """The job dashboard's slow-GPU row, as Grafana sends its queries, names the GPU a fault slows: its
    link at half its lanes (pcie-downtrain), its clock 30% down with hw_slowdown held (hw-slowdown), and
    every other GPU of the job at full link and at the job's median clock."""
    prom = stack["prometheus"]
    board = json.loads(render_dashboards()["training-job.json"])
    job = {"$namespace": "ml", "$training_job": "llama-pretrain"}
    queries: dict[str, str] = {}
    for title, expr in panel_queries(board):
        sent = expr
        for var, value in job.items():
            sent = sent.replace(var, value)
        queries.setdefault(title, sent)
    exporter, slow = stack["exporters"][0], "llama-0/1"  # GPU 1 of llama-0's exporter

    def per_gpu(title: str) -> dict[str, float]:
        return {
            f"{r['metric']['pod']}/{r['metric']['gpu']}": float(r["value"][1])
            for r in query(prom, queries[title])
        }

    def seen() -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        held = {
            r["metric"]["reason"]: float(r["value"][1])
            for r in query(prom, queries["Clock throttle reasons held"])
        }
        return per_gpu("PCIe link bandwidth share"), per_gpu("SM clock / job median"), held

    def shown(link: dict[str, float], clock: dict[str, float], held: dict[str, float]) -> bool:
        others = [k for k in link if k != slow]
        return (
            len(link) == len(clock) == 4
            and link[slow] == 0.5 and all(link[k] == 1 for k in others)
            and clock[slow] <= 0.75 and all(clock[k] > 0.9 for k in others)
            and held.get("hw_slowdown") == 1 and held.get("hw_power_brake") == 0
        )  # fmt: skip

    for fault in ("pcie-downtrain", "hw-slowdown"):
        http_json(f"{exporter}/v1/faults", {"fault": fault, "gpu": 1})
    try:
        deadline = time.monotonic() + 30
        state = seen()
        while not shown(*state) and time.monotonic() < deadline:
            time.sleep(1)
            state = seen()
        assert shown(*state), state
    finally:
        http_json(f"{exporter}/v1/faults", method="DELETE")
