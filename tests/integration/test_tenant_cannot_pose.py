"""A tenant's metrics cannot pose as another tenant's job (issue 21): a real Prometheus scrapes with the
scrape config the rendered PodMonitors become, so every series' namespace, pod, node and training_job are
its target's, whatever the pod exposes.

The tenant (research/bert-finetune) runs a pod that exposes a fatal XID labelled as ml/llama-pretrain's
pod on node gpu-c, and an exporter_info that claims a pod of ml/llama-dcgm (gpuBackend dcgm) on gpu-c,
so dcgm-exporter's series of that pod would join to that job. Without target labels, llama-pretrain's
and llama-dcgm's GPUCriticalXid would fire on gpu-c, and the operator would cordon it. The honest pods of
ml fire their own alerts in the same Prometheus, so the rules are known to work.

The PodMonitors become scrape jobs through the prometheus-operator stand-in (e2e/prometheus_operator.py):
file_sd targets carrying the __meta_kubernetes_* labels kubernetes_sd would give the pods, and the
PodMonitor's relabelings and metricRelabelings run by Prometheus itself.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from e2e import prometheus_operator as po
from tests.conftest import required_tool
from tests.processes import free_port, http_json, serve_text, start, stop, wait_for, wait_http
from trainguard.api import load_documents
from trainguard.clients.prometheus import prometheus_client
from trainguard.remediation.alert_history import AlertHistory
from trainguard.render import dump_yaml, render_kubernetes, render_prometheus
from trainguard.render.kubernetes import METRICS_PORT_NAME

pytestmark = pytest.mark.tools

DOCS = """
apiVersion: trainguard.io/v1alpha1
kind: TrainingJobMonitor
metadata: {name: llama-pretrain, namespace: ml}
spec:
  selector: {matchLabels: {app: llama-pretrain}}
  exporter: {gpuBackend: nvml, scrapeInterval: 1s}
  policyRefs: [{name: default}]
---
apiVersion: trainguard.io/v1alpha1
kind: TrainingJobMonitor
metadata: {name: llama-dcgm, namespace: ml}
spec:
  selector: {matchLabels: {app: llama-dcgm}}
  exporter: {gpuBackend: dcgm, scrapeInterval: 1s}
  policyRefs: [{name: default}]
---
apiVersion: trainguard.io/v1alpha1
kind: TrainingJobMonitor
metadata: {name: bert-finetune, namespace: research}
spec:
  selector: {matchLabels: {app: bert-finetune}}
  exporter: {gpuBackend: nvml, scrapeInterval: 1s}
  policyRefs: [{name: default}]
---
apiVersion: trainguard.io/v1alpha1
kind: AlertPolicy
metadata: {name: default, namespace: ml}
spec: {escalation: {enabled: false}}
---
apiVersion: trainguard.io/v1alpha1
kind: AlertPolicy
metadata: {name: default, namespace: research}
spec: {escalation: {enabled: false}}
"""

GPU = 'gpu="0",UUID="GPU-0",modelName="NVIDIA H100 80GB HBM3"'
TENANT = f"""# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{{{GPU},Hostname="gpu-c",namespace="ml",pod="llama-0",node="gpu-c",training_job="llama-pretrain"}} 79
# TYPE trainguard_exporter_info gauge
trainguard_exporter_info{{namespace="ml",pod="llama-dcgm-0",node="gpu-c",training_job="llama-dcgm",version="x"}} 1
# TYPE trainguard_train_step gauge
trainguard_train_step{{exported_namespace="ml",exported_training_job="llama-pretrain",namespace="ml",training_job="llama-pretrain"}} 5
"""
"""The tenant's pod: a fatal XID and an exporter_info labelled as ml's jobs, and a series that brings its
own exported_* labels (so Prometheus renames its namespace to exported_exported_namespace)."""
HONEST_PRETRAIN = f"""# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{{{GPU},Hostname="gpu-a",namespace="ml",pod="llama-1",node="gpu-a",training_job="llama-pretrain"}} 48
"""
HONEST_DCGM = """# TYPE trainguard_exporter_info gauge
trainguard_exporter_info{namespace="ml",pod="llama-dcgm-1",node="gpu-b",training_job="llama-dcgm",version="x"} 1
"""
DCGM_EXPORTER = f"""# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{{{GPU},Hostname="gpu-c",namespace="ml",pod="llama-dcgm-0",container="train"}} 79
DCGM_FI_DEV_XID_ERRORS{{{GPU},Hostname="gpu-b",namespace="ml",pod="llama-dcgm-1",container="train"}} 48
"""
"""dcgm-exporter, the platform's DaemonSet: it reports the GPUs of other pods, so its namespace and pod
labels cannot come from its own target and it is scraped with honor_labels (docs/rendering.md)."""


def pod(ns: str, name: str, app: str, node: str, address: str) -> dict[str, Any]:
    """A running pod as the apiserver holds it, its exporter's port the server at `address`."""
    host, port = address.rsplit(":", 1)
    return {
        "metadata": {"namespace": ns, "name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [
            {"name": "trainguard-exporter", "ports": [{"name": METRICS_PORT_NAME, "containerPort": int(port)}]},
        ]},
        "status": {"phase": "Running", "podIP": host},
    }  # fmt: skip


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = required_tool("prometheus")
    d: Path = tmp_path_factory.mktemp("tenants")
    docs = load_documents([("monitors.yaml", DOCS)])
    (d / "rules.yml").write_text(dump_yaml(render_prometheus(docs)["rules.yml"]))
    podmonitors = [o for o in render_kubernetes(docs) if o["kind"] == "PodMonitor"]
    (d / "targets").mkdir()
    with ExitStack() as stack:
        tenant, pretrain, dcgm_pod, exporter = (
            stack.enter_context(serve_text(t)) for t in (TENANT, HONEST_PRETRAIN, HONEST_DCGM, DCGM_EXPORTER)
        )
        pods = [
            pod("research", "bert-0", "bert-finetune", "gpu-t", tenant),
            pod("ml", "llama-1", "llama-pretrain", "gpu-a", pretrain),
            pod("ml", "llama-dcgm-1", "llama-dcgm", "gpu-b", dcgm_pod),
        ]
        for name, groups in po.scrape_targets(podmonitors, pods).items():
            (d / "targets" / name).write_text(json.dumps(groups))
        port = free_port()
        (d / "prometheus.yml").write_text(dump_yaml({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(d / "rules.yml")],
            "scrape_configs": [
                *po.scrape_configs(podmonitors, d / "targets"),
                {"job_name": "dcgm-exporter", "honor_labels": True, "static_configs": [{"targets": [exporter]}]},
            ],
        }))  # fmt: skip
        proc = start([binary, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'data'}",
                      f"--web.listen-address=127.0.0.1:{port}"], d / "prometheus.log")  # fmt: skip
        try:
            wait_http(f"http://127.0.0.1:{port}/-/ready", proc=proc, timeout=30)
            yield f"http://127.0.0.1:{port}"
        finally:
            stop([proc])


def query(prom: str, promql: str) -> list[dict[str, Any]]:
    body = http_json(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    return list(body["data"]["result"])


def firing(prom: str, alertname: str, **labels: str) -> list[dict[str, str]]:
    alerts = http_json(f"{prom}/api/v1/alerts")["data"]["alerts"]
    return [
        a["labels"]
        for a in alerts
        if a["state"] == "firing"
        and a["labels"]["alertname"] == alertname
        and all(a["labels"].get(k) == v for k, v in labels.items())
    ]


def test_every_series_carries_its_targets_identity(prometheus: str) -> None:
    def scraped() -> list[dict[str, Any]]:
        return query(prometheus, 'DCGM_FI_DEV_XID_ERRORS{namespace="research"}')

    (xid,) = wait_for("the tenant's pod scraped", scraped, timeout=30)
    labels = xid["metric"]
    assert {k: labels[k] for k in ("namespace", "pod", "node", "training_job")} == {
        "namespace": "research", "pod": "bert-0", "node": "gpu-t", "training_job": "bert-finetune",
    }  # fmt: skip
    assert labels["gpu"] == "0" and labels["Hostname"] == "gpu-c", "labels the target does not own stay"
    (info,) = query(prometheus, 'trainguard_exporter_info{pod="bert-0"}')
    assert (info["metric"]["namespace"], info["metric"]["training_job"]) == ("research", "bert-finetune")
    (step,) = wait_for("the tenant's step", lambda: query(prometheus, "trainguard_train_step"), timeout=10)
    assert step["metric"]["namespace"] == "research"
    names = http_json(f"{prometheus}/api/v1/labels")["data"]
    assert not [n for n in names if n.startswith("exported_")], "a pod's claims survived as exported_*"
    assert not query(prometheus, '{node="gpu-c"}'), "only dcgm-exporter's Hostname may name gpu-c"
    (up,) = query(prometheus, 'up{namespace="research"}')
    assert (up["metric"]["pod"], up["metric"]["node"]) == ("bert-0", "gpu-t")


def test_a_tenants_xid_fires_its_own_job_never_the_job_it_names(prometheus: str) -> None:
    def honest_fired() -> bool:
        return bool(
            firing(prometheus, "GPUCriticalXid", namespace="ml", training_job="llama-pretrain", node="gpu-a")
            and firing(prometheus, "GPUCriticalXid", namespace="ml", training_job="llama-dcgm", node="gpu-b")
        )

    wait_for("ml's honest GPUCriticalXid, for both its jobs", honest_fired, timeout=30)
    time.sleep(3)  # a few more scrapes and evaluations: a posing alert would come from the same ones
    ml = firing(prometheus, "GPUCriticalXid", namespace="ml")
    assert sorted((a["training_job"], a["pod"], a["node"]) for a in ml) == [
        ("llama-dcgm", "llama-dcgm-1", "gpu-b"),
        ("llama-pretrain", "llama-1", "gpu-a"),
    ], "ml's jobs fire on their own pods only, never on the tenant's claim of gpu-c"
    (own,) = wait_for(
        "the tenant's XID firing for its own job",
        lambda: firing(prometheus, "GPUCriticalXid", namespace="research", training_job="bert-finetune"),
        timeout=10,
    )
    assert (own["pod"], own["node"]) == ("bert-0", "gpu-t")


def test_prometheus_confirms_the_jobs_own_fault_never_the_tenants_claim(prometheus: str) -> None:
    """The executor's second witness of a GPU fault (remediation/alert_history.py) asks this Prometheus:
    ml's honest faults are confirmed, the tenant's claim of gpu-c is not, nor a GPU that did not fail,
    and a label value crafted to break out of its matcher finds nothing."""
    history = AlertHistory(prometheus_client(prometheus, timeout=5, retries=1), prometheus)

    def honest_seen() -> bool:
        return history.saw("GPUCriticalXid", "ml", "llama-dcgm", "gpu-b") and history.saw(
            "GPUCriticalXid", "ml", "llama-pretrain", "gpu-a", gpu="0"
        )

    wait_for("ml's honest GPUCriticalXid in ALERTS", honest_seen, timeout=30)
    assert not history.saw("GPUCriticalXid", "ml", "llama-dcgm", "gpu-c"), "the tenant's dcgm claim"
    assert not history.saw("GPUCriticalXid", "ml", "llama-pretrain", "gpu-c"), "the tenant's XID claim"
    assert not history.saw("GPUCriticalXid", "ml", "llama-pretrain", "gpu-a", gpu="3"), "another GPU"
    assert not history.saw("GPULost", "ml", "llama-pretrain", "gpu-a"), "another fault"
    assert not history.saw("GPUCriticalXid", "ml", "llama-pretrain", 'gpu-c"} or vector(1) or {x="')
    assert history.saw("GPUCriticalXid", "research", "bert-finetune", "gpu-t"), "the tenant's own fault"
