"""Long-term storage for real: Prometheus remote-writes only the aggregates and the alert history
into a real VictoriaMetrics, and they are read back from VictoriaMetrics' Prometheus API.

A real exporter (simulated GPUs, fault injection on) is scraped every second by a real Prometheus
that loads the files `trainguard render --format prometheus` writes: rules.yml, aggregates.yml and
remote_write.yml, the last merged into prometheus.yml as it is. examples/train_tiny.py trains
through the SDK. The only change from production is the aggregate group's interval, 5s instead of
5m, through render's own parameter (`--aggregate-interval`); the aggregates' window stays 5 minutes.
The monitor sets costLabels, so the cost records arrive stamped with its team and model.

VictoriaMetrics single node is built from its Go module by `e2e/controlplane/build.sh
victoria-metrics` (`make victoria-metrics`); without it the test skips, or fails under
TRAINGUARD_REQUIRE_TOOLS=1 as in CI.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.processes import free_port, http_json, start, stop, victoria_metrics, wait_http
from trainguard.api import load_documents
from trainguard.render import dump_yaml, render_prometheus
from trainguard.render.longterm import (
    ALERT_COUNT,
    ALERT_HISTORY,
    COST_RECORDS,
    GPU_HOURS,
    NODE_AGGREGATES,
    PEAK_MEMORY,
    aggregate_names,
    long_term_names,
)

pytestmark = pytest.mark.tools
ROOT = Path(__file__).resolve().parents[2]

DOCS = """
apiVersion: trainguard.io/v1alpha1
kind: TrainingJobMonitor
metadata: {name: llama-pretrain, namespace: ml}
spec:
  selector: {matchLabels: {app: llama-pretrain}}
  exporter: {gpuBackend: simulated, scrapeInterval: 1s}
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
    - {name: GPUThermalThrottling, for: 0s}
"""
IDENTITY = {"namespace": "ml", "training_job": "llama-pretrain", "node": "gpu-node-1", "pod": "llama-0"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    vm = victoria_metrics()
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        if os.environ.get("TRAINGUARD_REQUIRE_TOOLS"):
            pytest.fail("prometheus is required (TRAINGUARD_REQUIRE_TOOLS is set) but not on PATH")
        pytest.skip("prometheus is not installed (.ci/run installs it)")
    d = tmp_path_factory.mktemp("longterm")
    exp_port, prom_port, vm_port = free_port(), free_port(), free_port()
    vm_url = f"http://127.0.0.1:{vm_port}"
    files = render_prometheus(
        load_documents([("monitor.yaml", DOCS)]),
        aggregate_interval="5s",
        remote_write_url=f"{vm_url}/api/v1/write",
    )
    for name in ("rules.yml", "aggregates.yml"):
        (d / name).write_text(dump_yaml(files[name]))
    (d / "prometheus.yml").write_text(dump_yaml({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(d / "rules.yml"), str(d / "aggregates.yml")],
        # a static target, so no label can come from Kubernetes discovery: the exporter's own identity (the same
        # values as the target's) is honoured here; the PodMonitor sets it from the target and drops the pod's
        # (tests/integration/test_tenant_cannot_pose.py)
        "scrape_configs": [{"job_name": "trainguard", "honor_labels": True,
                            "static_configs": [{"targets": [f"127.0.0.1:{exp_port}"], "labels": IDENTITY}]}],
        **files["remote_write.yml"],
    }))  # fmt: skip
    procs = [
        # latencyOffset: by default VictoriaMetrics hides the last 30s from queries, for late samples
        start([vm, f"-storageDataPath={d / 'vm-data'}", f"-httpListenAddr=127.0.0.1:{vm_port}",
               "-retentionPeriod=6", "-search.latencyOffset=1s"], d / "victoria-metrics.log"),
        start([sys.executable, "-m", "trainguard.cli", "exporter", "--backend", "simulated", "--gpus", "2",
               "--enable-fault-injection", "--sdk-tcp", "--listen", f"127.0.0.1:{exp_port}", "--poll-interval", "0.5",
               *[x for k, v in IDENTITY.items() for x in (f"--{k.replace('_', '-')}", v)]],
              d / "exporter.log"),
    ]  # fmt: skip
    try:
        wait_http(f"{vm_url}/health", proc=procs[0])
        wait_http(f"http://127.0.0.1:{exp_port}/healthz", proc=procs[1])
        procs.append(start([prometheus, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'data'}",
                            f"--web.listen-address=127.0.0.1:{prom_port}"], d / "prometheus.log"))  # fmt: skip
        procs.append(start([sys.executable, "examples/train_tiny.py", "--steps", "100000000", "--step-delay", "0.02",
                            "--endpoint", f"http://127.0.0.1:{exp_port}", "--checkpoint-dir", str(d / "ckpt")],
                           d / "trainer.log"))  # fmt: skip
        wait_http(f"http://127.0.0.1:{prom_port}/-/ready", proc=procs[2], timeout=30)
        # an alert to find in the long-term store's history
        http_json(f"http://127.0.0.1:{exp_port}/v1/faults", {"fault": "thermal", "gpu": 1})
        yield {"vm": vm_url, "prometheus": f"http://127.0.0.1:{prom_port}", "dir": d}
    finally:
        stop(procs)


def vm_query(vm: str, query: str) -> list[dict[str, Any]]:
    """An instant query against VictoriaMetrics' Prometheus-compatible API."""
    result: list[dict[str, Any]] = http_json(f"{vm}/api/v1/query?{urllib.parse.urlencode({'query': query})}")[
        "data"
    ]["result"]
    return result


def logs(d: Path) -> str:
    return "\n".join(f"== {p.name}\n{p.read_text()[-1500:]}" for p in sorted(d.glob("*.log")))


def test_the_aggregates_and_the_alert_history_arrive_in_victoria_metrics(stack: dict[str, Any]) -> None:
    vm = stack["vm"]
    # the thermal fault's own alert and its count, not just any: an alert that fires without a fault (a P3)
    # can bring ALERTS and the count's first series before the throttling's
    throttling = ('ALERTS{alertname="GPUThermalThrottling",alertstate="firing"}',
                  f'{ALERT_COUNT}{{alertname="GPUThermalThrottling"}}')  # fmt: skip
    # each job's goodput as its rules record it (the operator's goodput counters are its own target's,
    # not this stack's)
    goodput = ("trainguard:job_lost:ratio", "trainguard:job_lost_all:ratio", "trainguard:job_ettr:ratio")
    wanted = (*aggregate_names(), *goodput, *ALERT_HISTORY, *throttling)
    found: dict[str, list[dict[str, Any]]] = {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = {name: vm_query(vm, name) for name in wanted}
        if all(found.values()):
            break
        time.sleep(2)
    missing = [name for name, series in found.items() if not series]
    assert not missing, f"never arrived in VictoriaMetrics: {missing}\n{logs(stack['dir'])}"
    for name in aggregate_names():
        for series in found[name]:
            labels = series["metric"]
            assert (labels["namespace"], labels["training_job"]) == ("ml", "llama-pretrain"), (name, labels)
    for agg in NODE_AGGREGATES:
        assert {s["metric"]["node"] for s in found[agg.record]} == {"gpu-node-1"}, agg.record
    # the thermal fault raised its alert, and the history and the count say so
    counts = found[throttling[1]]
    assert float(counts[0]["value"][1]) >= 1, counts
    temp = vm_query(vm, "node:DCGM_FI_DEV_GPU_TEMP:max5m")
    assert 20 < float(temp[0]["value"][1]) < 130, temp


def test_the_aggregates_agree_with_what_prometheus_computes_from_raw_data(stack: dict[str, Any]) -> None:
    """The store holds the recorded values, not some transformation of them: a step counter that
    only grows reads the same maximum in both, within the few seconds between evaluations."""
    vm, prom = stack["vm"], stack["prometheus"]
    deadline = time.monotonic() + 60
    while not vm_query(vm, "job:trainguard_train_step:max5m") and time.monotonic() < deadline:
        time.sleep(2)
    stored = float(vm_query(vm, "job:trainguard_train_step:max5m")[0]["value"][1])
    raw = float(
        vm_query(prom, 'max(max_over_time(trainguard_train_step{training_job="llama-pretrain"}[5m]))')[0][
            "value"
        ][1]
    )
    assert 0 < stored <= raw, (stored, raw)
    rate = float(vm_query(vm, "job:trainguard_train_step:rate5m")[0]["value"][1])
    assert rate > 0, rate


def test_no_raw_series_reaches_the_long_term_store(stack: dict[str, Any]) -> None:
    vm = stack["vm"]
    deadline = time.monotonic() + 60
    while not vm_query(vm, "node:DCGM_FI_DEV_GPU_TEMP:max5m") and time.monotonic() < deadline:
        time.sleep(2)
    names = set(http_json(f"{vm}/api/v1/label/__name__/values")["data"])
    assert names, "nothing arrived at all"
    shipped = {*long_term_names(), *ALERT_HISTORY}
    assert names <= shipped, names - shipped
    for raw in ("DCGM_FI_DEV_GPU_TEMP", "trainguard_train_step", "up", "trainguard:train_step:max"):
        assert not vm_query(vm, raw), raw


def test_the_cost_records_arrive_with_the_monitors_cost_labels(stack: dict[str, Any]) -> None:
    """GPU-hours and peak memory reach the long-term store stamped with team and model, so a month's
    charge-back can be summed there by either: 2 simulated GPUs held for at most one 5-minute window
    each record, and a framebuffer in use."""
    vm = stack["vm"]
    deadline = time.monotonic() + 120
    while not all(vm_query(vm, name) for name in COST_RECORDS) and time.monotonic() < deadline:
        time.sleep(2)
    for name in COST_RECORDS:
        (series,) = vm_query(vm, name)
        assert series["metric"] == {
            "__name__": name,
            "namespace": "ml",
            "training_job": "llama-pretrain",
            "team": "ml-infra",
            "model": "llama-70b",
        }, series
    hours = float(vm_query(vm, GPU_HOURS)[0]["value"][1])
    assert 0 < hours <= 2 * 5 / 60 + 1e-9, hours
    (by_team,) = vm_query(vm, f"sum by (team) (sum_over_time({GPU_HOURS}[1h]))")
    assert by_team["metric"] == {"team": "ml-infra"} and float(by_team["value"][1]) > 0, by_team
    peak = float(vm_query(vm, PEAK_MEMORY.record)[0]["value"][1])
    raw = float(
        vm_query(
            stack["prometheus"], 'max(max_over_time(DCGM_FI_DEV_FB_USED{training_job="llama-pretrain"}[10m]))'
        )[0]["value"][1]
    )
    assert 0 < peak <= raw, (peak, raw)
