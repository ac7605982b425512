"""OTLP export for real: `trainguard exporter --otlp-endpoint` pushes to a real VictoriaMetrics single
node through its OTLP endpoint (/opentelemetry/v1/metrics), no Prometheus anywhere, and the contract
series are read back from VictoriaMetrics' Prometheus API under the names and labels a scrape of the
same exporter's /metrics has; the catalogue's rule expressions evaluate there.

The exporter runs as in production, as a process (simulated GPUs, fault injection on), pushing every
second. VictoriaMetrics keeps OTLP names as they are (no -opentelemetry.usePrometheusNaming, which would
append _total to dcgm-exporter's counters) and promotes the resource attributes to labels (its default);
-opentelemetry.promoteScopeMetadata=false keeps the scope's name and version off the series.
VictoriaMetrics is built by `make victoria-metrics`; without it the test skips, or fails under
TRAINGUARD_REQUIRE_TOOLS=1 as in CI.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.exposition import scrape
from tests.integration.test_longterm_storage import DOCS, IDENTITY, logs, vm_query
from tests.processes import free_port, http_json, start, stop, victoria_metrics, wait_http
from trainguard.api import load_documents
from trainguard.catalog import METRICS, MetricType
from trainguard.render import render_prometheus

pytestmark = pytest.mark.tools

TOKEN = "s3cret-otlp-token-value"
RESOURCE = {
    "service.name": "trainguard-exporter",
    "service.version": "0.1.0",
    "service.instance.id": "ml/llama-0",
    "k8s.namespace.name": "ml",
    "k8s.pod.name": "llama-0",
    "k8s.node.name": "gpu-node-1",
    "trainguard.training_job": "llama-pretrain",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    vm = victoria_metrics()
    d = tmp_path_factory.mktemp("otlp")
    exp_port, vm_port = free_port(), free_port()
    vm_url = f"http://127.0.0.1:{vm_port}"
    procs = [
        # latencyOffset: by default VictoriaMetrics hides the last 30s from queries, for late samples
        start([vm, f"-storageDataPath={d / 'vm-data'}", f"-httpListenAddr=127.0.0.1:{vm_port}",
               "-search.latencyOffset=1s", "-opentelemetry.promoteScopeMetadata=false"], d / "victoria-metrics.log"),
        start([sys.executable, "-m", "trainguard.cli", "exporter", "--backend", "simulated", "--gpus", "2",
               "--enable-fault-injection", "--sdk-tcp", "--listen", f"127.0.0.1:{exp_port}", "--poll-interval", "0.5",
               "--otlp-endpoint", f"{vm_url}/opentelemetry/v1/metrics", "--otlp-interval", "1",
               "--otlp-header", f"X-Scope-Token={TOKEN}",
               *[x for k, v in IDENTITY.items() for x in (f"--{k.replace('_', '-')}", v)]],
              d / "exporter.log"),
    ]  # fmt: skip
    try:
        wait_http(f"{vm_url}/health", proc=procs[0])
        wait_http(f"http://127.0.0.1:{exp_port}/healthz", proc=procs[1])
        exporter = f"http://127.0.0.1:{exp_port}"
        http_json(f"{exporter}/v1/faults", {"fault": "thermal", "gpu": 1})
        http_json(f"{exporter}/v1/faults", {"fault": "collective-slow"})
        yield {"vm": vm_url, "exporter": exporter, "dir": d, "procs": procs}
    finally:
        stop(procs)


def eventually(probe: Callable[[], Any], what: str, d: Path, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := probe():
            return result
        time.sleep(1)
    pytest.fail(f"{what} within {timeout:g}s\n{logs(d)}")


def test_the_contract_series_arrive_with_the_labels_a_scrape_has(stack: dict[str, Any]) -> None:
    """Every series of the exporter's /metrics is in VictoriaMetrics under the same name with the same
    labels (identity included), plus the resource's attributes; names outside the scrape's are none."""
    vm = stack["vm"]

    def same_names() -> tuple[Any, set[str]] | None:
        """A scrape and the store's names, once they name the same series (a rate such as the disks'
        appears from the second host read on)."""
        scraped = scrape(stack["exporter"])
        wanted = {name for name in scraped if not name.endswith("_created")}
        stored = set(http_json(f"{vm}/api/v1/label/__name__/values")["data"])
        return (scraped, stored) if stored == wanted else None

    scraped, stored = eventually(same_names, "the store's names never matched a scrape's", stack["dir"])
    wanted = stored

    def key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
        """Labels to compare: an empty label is no label (in Prometheus as in the store), and `le` is
        compared as the number it is (the store writes 1, prometheus_client 1.0, as Prometheus 3 does)."""
        return tuple(sorted((k, repr(float(v)) if k == "le" else v) for k, v in labels.items() if v))

    for name in sorted(wanted):
        series = eventually(lambda n=name: vm_query(vm, n), f"{name} was not queryable", stack["dir"])
        got = sorted(key({k: v for k, v in s["metric"].items() if k != "__name__"}) for s in series)
        expected = sorted(key({**labels, **RESOURCE}) for labels, _ in scraped[name])
        assert got == expected, name
    # the catalogue's every exporter-side family, of each type, is among them
    for m in METRICS:
        sample = m.name + ("_bucket" if m.type == MetricType.HISTOGRAM else "")
        if sample in scraped:
            assert sample in stored, m.name
    for name in ("trainguard_train_oom_total", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_TEMP",
                 "trainguard_train_collective_seconds_bucket", "trainguard_exporter_info"):  # fmt: skip
        assert name in stored, name
    for series in vm_query(vm, "DCGM_FI_DEV_GPU_TEMP"):
        labels = series["metric"]
        assert {k: labels[k] for k in IDENTITY} == IDENTITY, labels


def test_a_counter_increases_in_the_store(stack: dict[str, Any]) -> None:
    vm, d = stack["vm"], stack["dir"]
    eventually(lambda: vm_query(vm, "trainguard_train_oom_total"), "no OOM counter arrived", d)
    before = float(vm_query(vm, "trainguard_train_oom_total")[0]["value"][1])
    http_json(f"{stack['exporter']}/v1/report", {"events": [{"type": "oom", "device": 0, "message": "CUDA out of memory"}]})  # fmt: skip
    after = eventually(
        lambda: [
            v for s in vm_query(vm, "trainguard_train_oom_total") if (v := float(s["value"][1])) > before
        ],
        "the OOM counter did not increase in VictoriaMetrics",
        d,
    )
    assert after == [before + 1]


def _rule(doc: dict[str, Any], key: str, name: str) -> str:
    for group in doc["groups"]:
        for rule in group["rules"]:
            if rule.get(key) == name:
                return str(rule["expr"])
    raise AssertionError(f"no {key} {name} in the rendered rules")


def test_the_catalogue_rules_evaluate_over_the_otlp_fed_data(stack: dict[str, Any]) -> None:
    """The rendered rules' PromQL, as Prometheus would run it, on VictoriaMetrics: a counter rule
    (GPUOutOfMemory: increase of the OOM counter), a gauge rule (GPUThermalThrottling, the thermal
    fault on GPU 1) and a histogram record (p99 collective latency, the collective-slow fault)."""
    vm, d = stack["vm"], stack["dir"]
    rules = render_prometheus(load_documents([("monitor.yaml", DOCS)]))["rules.yml"]
    eventually(lambda: vm_query(vm, "trainguard_train_oom_total"), "no OOM counter arrived", d)
    time.sleep(2)  # a few pushes at the old value, so the increase is inside the window
    http_json(f"{stack['exporter']}/v1/report", {"events": [{"type": "oom", "device": 0, "message": "CUDA out of memory"}]})  # fmt: skip

    oom = eventually(
        lambda: vm_query(vm, _rule(rules, "alert", "GPUOutOfMemory")), "GPUOutOfMemory never held", d
    )
    assert {k: oom[0]["metric"][k] for k in IDENTITY} == IDENTITY, oom

    hot = eventually(
        lambda: vm_query(vm, _rule(rules, "alert", "GPUThermalThrottling")), "no GPU over 85C", d
    )
    assert [s["metric"]["gpu"] for s in hot] == ["1"], hot

    p99_expr = _rule(rules, "record", "trainguard:train_collective_seconds:p99")
    p99 = eventually(lambda: vm_query(vm, p99_expr), "no p99 collective latency", d)
    (series,) = p99
    assert series["metric"] == {"namespace": "ml", "training_job": "llama-pretrain"}, series
    # every observation is the slow fault's 2 s: the p99 lies in the bucket that holds 2 s
    assert 1.0 < float(series["value"][1]) <= 2.5, series


def test_header_values_are_never_logged(stack: dict[str, Any]) -> None:
    log = (stack["dir"] / "exporter.log").read_text()
    assert "pushing metrics over OTLP to http://127.0.0.1" in log and "X-Scope-Token" in log, log[-2000:]
    assert TOKEN not in log
