"""Every injected fault drives its catalogue alert through a real Prometheus.

A real exporter (simulated GPUs, fault injection on) is scraped every second by a real Prometheus
that evaluates the rules `trainguard render` produces, while examples/train_tiny.py trains through
the SDK. Thresholds are the catalogue's; only `for` is shortened and the baseline window is one
minute, so the whole run takes about two minutes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_api_client import PrometheusConnect

from tests.processes import free_port, http_json, wait_http
from trainguard.api import load_documents
from trainguard.render import dump_yaml, render_prometheus

pytestmark = pytest.mark.tools
ROOT = Path(__file__).resolve().parents[2]

# fault -> the alerts it must raise (a DBE is also reported as XID 48, and XID 79 takes the GPU off
# the bus, hence two for ecc-dbe and xid-79)
FAULTS: list[tuple[str, set[str]]] = [
    ("throughput-drop", {"TrainingThroughputDrop"}),
    ("grad-explosion", {"GradientExplosion"}),
    ("oom-risk", {"GPUMemoryCritical"}),
    ("memory-hang", {"GPUMemoryHang"}),
    ("thermal", {"GPUThermalThrottling"}),
    ("xid-79", {"GPUCriticalXid", "GPULost"}),  # XID 79: the GPU fell off the bus
    ("ecc-dbe", {"GPUDoubleBitECCError", "GPUCriticalXid"}),
    ("nan-loss", {"TrainingLossNonFinite"}),
    ("packet-loss", {"NetworkPacketLossHigh"}),
    ("swap-pressure", {"HostSwapPressure"}),
    ("disk-latency", {"DiskWriteLatencyHigh"}),
    ("stall", {"TrainingJobStalled"}),
]

MONITOR = """
apiVersion: trainguard.io/v1alpha1
kind: TrainingJobMonitor
metadata: {name: llama-pretrain, namespace: ml}
spec:
  selector: {matchLabels: {app: llama-pretrain}}
  exporter: {gpuBackend: simulated, scrapeInterval: 1s}
  baseline: {warmupSteps: 0, window: 1m, offset: 10s, sigma: 3}
  checkpoint: {timeout: 5s}
  policyRefs: [{name: fast}]
---
apiVersion: trainguard.io/v1alpha1
kind: AlertPolicy
metadata: {name: fast, namespace: ml}
spec:
  escalation: {enabled: false}
  alerts:
"""


def policy_text() -> str:
    names = sorted({a for _, alerts in FAULTS for a in alerts})
    lines = [f"    - {{name: {n}, for: 0s}}" for n in names if n != "TrainingJobStalled"]
    lines.append("    - {name: TrainingJobStalled, for: 0s, threshold: 5}")
    return MONITOR + "\n".join(lines) + "\n"


def start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=ROOT)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus is not installed (.ci/run installs it)")
    d = tmp_path_factory.mktemp("prom")
    files = render_prometheus(load_documents([("monitor.yaml", policy_text())]))
    (d / "rules.yml").write_text(dump_yaml(files["rules.yml"]))
    exp_port, prom_port = free_port(), free_port()
    identity = {"namespace": "ml", "training_job": "llama-pretrain", "node": "gpu-node-1", "pod": "llama-0"}
    (d / "prometheus.yml").write_text(dump_yaml({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(d / "rules.yml")],
        "scrape_configs": [{"job_name": "trainguard", "honor_labels": True,
                            "static_configs": [{"targets": [f"127.0.0.1:{exp_port}"], "labels": identity}]}],
    }))  # fmt: skip
    procs = [
        start([sys.executable, "-m", "trainguard.cli", "exporter", "--backend", "simulated", "--gpus", "2",
               "--enable-fault-injection", "--sdk-tcp", "--listen", f"127.0.0.1:{exp_port}", "--poll-interval", "0.5",
               "--stall-after", "5", *[x for k, v in identity.items() for x in (f"--{k.replace('_', '-')}", v)]],
              d / "exporter.log"),
        start([prometheus, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'data'}",
               f"--web.listen-address=127.0.0.1:{prom_port}"], d / "prometheus.log"),
    ]  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{exp_port}/healthz", proc=procs[0])
        procs.append(start([sys.executable, "examples/train_tiny.py", "--steps", "100000000", "--step-delay", "0.02",
                            "--endpoint", f"http://127.0.0.1:{exp_port}", "--checkpoint-dir", str(d / "ckpt")],
                           d / "trainer.log"))  # fmt: skip
        wait_http(f"http://127.0.0.1:{prom_port}/-/ready", proc=procs[1], timeout=30)
        yield {
            "exporter": f"http://127.0.0.1:{exp_port}",
            "prometheus": f"http://127.0.0.1:{prom_port}",
            "dir": d,
        }
    finally:
        stop(procs)


def firing(prom: str) -> set[tuple[str, str]]:
    """Firing alerts as Prometheus records them (its ALERTS series), read with prometheus-api-client."""
    result = PrometheusConnect(prom, disable_ssl=True).custom_query('ALERTS{alertstate="firing"}')
    return {(a["metric"]["alertname"], a["metric"]["severity"]) for a in result}


def test_faults_drive_their_alerts_and_nothing_fires_without_them(stack: dict[str, Any]) -> None:
    prom, exp = stack["prometheus"], stack["exporter"]
    # a baseline of one minute, ending ten seconds back, then quiet: nothing above P3
    time.sleep(75)
    up = PrometheusConnect(prom, disable_ssl=True).get_current_metric_value("up")
    assert up and up[0]["value"][1] == "1", up
    loud = {a for a in firing(prom) if a[1] != "P3"}
    assert not loud, f"alerts fired without any fault: {loud}"
    missed = []
    for fault, expected in FAULTS:
        http_json(f"{exp}/v1/faults", {"fault": fault, "gpu": 1})
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline:
            names = {name for name, _ in firing(prom)}
            if expected <= names:
                break
            time.sleep(0.5)
        else:
            missed.append((fault, expected, sorted(firing(prom))))
        http_json(f"{exp}/v1/faults", method="DELETE")
    logs = "\n".join(p.read_text()[-2000:] for p in stack["dir"].glob("*.log"))
    assert not missed, f"faults whose alert did not fire: {missed}\n{logs}"
