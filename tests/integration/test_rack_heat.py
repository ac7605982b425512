"""RackThermalEvent through a real Prometheus: two nodes of one rack, each with its own real exporter
(simulated GPUs, fault injection on), and kube-state-metrics' kube_node_labels served by a stand-in
(kube-state-metrics needs an apiserver; the series is exactly what it exports for a node whose rack
label is allowed with --metric-labels-allowlist). Four GPUs overheat on two nodes: one alert for the
rack, not one per GPU; four hot GPUs on one node are that node's, not the rack's."""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_api_client import PrometheusConnect

from tests.processes import free_port, http_json, serve_text, start, stop, wait_http
from trainguard.api import load_documents
from trainguard.catalog import ALERTS_BY_NAME
from trainguard.remediation.signals import parse_rfc3339
from trainguard.render import dump_yaml, render_prometheus

pytestmark = pytest.mark.tools

DOCS = """
apiVersion: trainguard.io/v1alpha1
kind: TrainingJobMonitor
metadata: {name: llama-pretrain, namespace: ml}
spec:
  selector: {matchLabels: {app: llama-pretrain}}
  exporter: {gpuBackend: simulated, scrapeInterval: 1s}
  topology: {rackLabel: example.com/rack}
  policyRefs: [{name: fast}]
---
apiVersion: trainguard.io/v1alpha1
kind: AlertPolicy
metadata: {name: fast, namespace: ml}
spec:
  alerts:
    - {name: RackThermalEvent, for: 0s}
"""
NODES = {"gpu-node-1": "rack-a", "gpu-node-2": "rack-a"}
CELSIUS = next(p.default for p in ALERTS_BY_NAME["RackThermalEvent"].params if p.name == "celsius")
KSM = "".join(
    f'kube_node_labels{{node="{node}",label_example_com_rack="{rack}"}} 1\n' for node, rack in NODES.items()
)


@pytest.fixture(scope="module")
def racks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus is not installed (.ci/run installs it)")
    d = tmp_path_factory.mktemp("racks")
    (d / "rules.yml").write_text(
        dump_yaml(render_prometheus(load_documents([("m.yaml", DOCS)]))["rules.yml"])
    )

    served = contextlib.ExitStack()
    ksm = served.enter_context(serve_text(KSM))
    ports = {node: free_port() for node in NODES}
    prom_port = free_port()
    targets = [{"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": "ml", "training_job": "llama-pretrain",
                "node": node, "pod": f"llama-{i}"}} for i, (node, port) in enumerate(ports.items())]  # fmt: skip
    (d / "prometheus.yml").write_text(dump_yaml({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(d / "rules.yml")],
        "scrape_configs": [
            # a static target, so no label can come from Kubernetes discovery: the exporter's own identity (the same
            # values as the target's) is honoured here; the PodMonitor sets it from the target and drops the pod's
            # (tests/integration/test_tenant_cannot_pose.py)
            {"job_name": "trainguard", "honor_labels": True, "static_configs": targets},
            # kube-state-metrics labels the objects it reports (their namespace, node): honoured, as dcgm-exporter's
            {"job_name": "kube-state-metrics", "honor_labels": True,
             "static_configs": [{"targets": [ksm]}]},
        ],
    }))  # fmt: skip
    procs = [
        start([sys.executable, "-m", "trainguard.cli", "exporter", "--backend", "simulated", "--gpus", "4",
               "--enable-fault-injection", "--listen", f"127.0.0.1:{port}", "--poll-interval", "0.5",
               "--namespace", "ml", "--training-job", "llama-pretrain", "--node", node, "--pod", f"llama-{i}"],
              d / f"exporter-{node}.log")
        for i, (node, port) in enumerate(ports.items())
    ]  # fmt: skip
    procs.append(start([prometheus, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'data'}",
                        f"--web.listen-address=127.0.0.1:{prom_port}"], d / "prometheus.log"))  # fmt: skip
    try:
        for port, proc in zip(ports.values(), procs, strict=False):
            wait_http(f"http://127.0.0.1:{port}/healthz", proc=proc)
        wait_http(f"http://127.0.0.1:{prom_port}/-/ready", proc=procs[-1], timeout=30)
        yield {"prometheus": f"http://127.0.0.1:{prom_port}",
               "exporters": {node: f"http://127.0.0.1:{port}" for node, port in ports.items()}}  # fmt: skip
    finally:
        stop(procs)
        served.close()


def rack_alerts(prom: str) -> list[dict[str, str]]:
    result = PrometheusConnect(prom, disable_ssl=True).custom_query(
        'ALERTS{alertname="RackThermalEvent", alertstate="firing"}'
    )
    return [a["metric"] for a in result]


def heat(racks: dict[str, Any], where: dict[str, list[int]]) -> None:
    for node, url in racks["exporters"].items():
        http_json(f"{url}/v1/faults", method="DELETE")
        for gpu in where.get(node, []):
            http_json(f"{url}/v1/faults", {"fault": "thermal", "gpu": gpu})


def hot_by_node(prom: str) -> dict[str, int]:
    """Hot GPUs per node, as the rule counts them, in what Prometheus has scraped now."""
    result = PrometheusConnect(prom, disable_ssl=True).custom_query(
        f"count by (node) (DCGM_FI_DEV_GPU_TEMP > {CELSIUS:g})"
    )
    return {r["metric"]["node"]: int(float(r["value"][1])) for r in result}


def evaluated(prom: str) -> float:
    """When the group holding RackThermalEvent was last evaluated (unix seconds)."""
    groups = http_json(f"{prom}/api/v1/rules")["data"]["groups"]
    (group,) = [g for g in groups if any(r["name"] == "RackThermalEvent" for r in g["rules"])]
    return parse_rfc3339(group["lastEvaluation"])


def test_four_hot_gpus_on_one_node_are_not_a_rack_event(racks: dict[str, Any]) -> None:
    prom = racks["prometheus"]
    heat(racks, {"gpu-node-1": [0, 1, 2, 3]})
    # no alert means something only once the rule has run on this heat: four hot GPUs scraped on gpu-node-1
    # and none elsewhere (a test before may have heated gpu-node-2), then an evaluation after that
    deadline = time.monotonic() + 30
    while (hot := hot_by_node(prom)) != {"gpu-node-1": 4}:
        assert time.monotonic() < deadline, f"Prometheus never saw the four hot GPUs alone: {hot}"
        time.sleep(0.5)
    seen = time.time()
    while evaluated(prom) <= seen:
        assert time.monotonic() < deadline, "the rules were not evaluated since"
        time.sleep(0.5)
    assert rack_alerts(prom) == []


def test_four_hot_gpus_on_two_nodes_of_a_rack_raise_one_alert_for_the_rack(racks: dict[str, Any]) -> None:
    heat(racks, {"gpu-node-1": [0, 1], "gpu-node-2": [2, 3]})
    deadline = time.monotonic() + 20
    found: list[dict[str, str]] = []
    while not found and time.monotonic() < deadline:
        found = rack_alerts(racks["prometheus"])
        time.sleep(0.5)
    heat(racks, {})
    assert [(a["rack"], a["severity"], a.get("node"), a.get("gpu")) for a in found] == [
        ("rack-a", "P1", None, None)
    ]
