"""A tenant's metrics cannot pose as another tenant's job (issue 21): a real Prometheus scrapes with the
scrape config the rendered PodMonitors become, so every series' namespace, pod, node and training_job are
its target's, whatever the pod exposes.

The tenant (research/bert-finetune) runs a pod that exposes a fatal XID labelled as ml/llama-pretrain's
pod on node gpu-c, and an exporter_info that claims a pod of ml/llama-dcgm (gpuBackend dcgm) on gpu-c,
so dcgm-exporter's series of that pod would join to that job. Without target labels, llama-pretrain's
and llama-dcgm's GPUCriticalXid would fire on gpu-c, and the operator would cordon it. The honest pods of
ml fire their own alerts in the same Prometheus, so the rules are known to work.

The rendered PrometheusRules and PodMonitors are applied to the cluster and become Prometheus'
configuration through the real prometheus-operator (e2e/prometheus_operator.py); Prometheus finds the pods
with the kubernetes_sd_configs it writes and runs the PodMonitors' relabelings and metricRelabelings
itself. The pods are objects in the apiserver, bound to nodes of their own that no kubelet serves, with
the status a kubelet would post (Running, the pod IP where each exporter is served from); dcgm-exporter is
a scrape job of the Prometheus object's additionalScrapeConfigs, with honor_labels.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from e2e.cluster import Cluster
from e2e.pipeline import Monitoring
from tests.processes import http_json, serve_text, wait_for
from trainguard.api import load_documents
from trainguard.clients.prometheus import prometheus_client
from trainguard.remediation.alert_history import AlertHistory
from trainguard.render import render_kubernetes
from trainguard.render.kubernetes import METRICS_PORT_NAME

pytestmark = pytest.mark.e2e

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


def pod(ns: str, name: str, app: str, node: str, port: int) -> dict[str, Any]:
    """A pod bound to `node`, its exporter's container port `port`; no sidecar is injected."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": ns, "name": name, "labels": {"app": app, "trainguard.io/inject": "disabled"}},
        "spec": {"nodeName": node, "containers": [
            {"name": "trainguard-exporter", "image": "registry.invalid/exporter:1",
             "ports": [{"name": METRICS_PORT_NAME, "containerPort": port}]},
        ]},
    }  # fmt: skip


def running(cluster: Cluster, obj: dict[str, Any], ip: str) -> None:
    """The status the kubelet would post once the pod runs."""
    meta = obj["metadata"]
    cluster.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": {
        "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
    }})  # fmt: skip


@pytest.fixture(scope="module")
def prometheus(cluster: Cluster) -> Iterator[str]:
    docs = load_documents([("monitors.yaml", DOCS)])
    rendered = [o for o in render_kubernetes(docs) if o["kind"] in ("PrometheusRule", "PodMonitor")]
    for ns in ("ml", "research"):
        cluster.namespace(ns)
    nodes = ("gpu-t", "gpu-a", "gpu-b")
    with ExitStack() as stack:
        tenant, pretrain, dcgm_pod, exporter = (
            stack.enter_context(serve_text(t)) for t in (TENANT, HONEST_PRETRAIN, HONEST_DCGM, DCGM_EXPORTER)
        )
        pods = [
            (pod("research", "bert-0", "bert-finetune", "gpu-t", int(tenant.rsplit(":", 1)[1])), tenant),
            (pod("ml", "llama-1", "llama-pretrain", "gpu-a", int(pretrain.rsplit(":", 1)[1])), pretrain),
            (pod("ml", "llama-dcgm-1", "llama-dcgm", "gpu-b", int(dcgm_pod.rsplit(":", 1)[1])), dcgm_pod),
        ]
        scrape = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tenants-scrape", "namespace": "monitoring"},
                  "stringData": {"dcgm.yaml": yaml.safe_dump([{"job_name": "dcgm-exporter", "honor_labels": True,
                                                                "static_configs": [{"targets": [exporter]}]}])}}  # fmt: skip
        try:
            for name in nodes:  # nodes no kubelet serves: the pods bound to them are left as they are
                cluster.core.create_node(
                    {"metadata": {"name": name, "labels": {"e2e.trainguard.io/tenants": "true"}}}
                )
            cluster.apply(rendered)
            for obj, address in pods:
                cluster.apply([obj])
                running(cluster, obj, address.rsplit(":", 1)[0])
            mon = stack.enter_context(Monitoring(cluster, "tenants", objects=(scrape,), prometheus_spec={
                "additionalScrapeConfigs": {"name": "tenants-scrape", "key": "dcgm.yaml"}}))  # fmt: skip
            yield mon.prometheus
        finally:
            for obj, _ in pods:
                with suppress(ApiException):
                    cluster.core.delete_namespaced_pod(obj["metadata"]["name"], obj["metadata"]["namespace"],
                                                       grace_period_seconds=0)  # fmt: skip
            for obj in rendered:
                cluster.delete(obj)
            for name in nodes:
                with suppress(ApiException):
                    cluster.core.delete_node(name)


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
    own = wait_for(
        "the tenant's XID firing for its own job",
        lambda: firing(prometheus, "GPUCriticalXid", namespace="research", training_job="bert-finetune"),
        timeout=10,
    )
    assert {(a["pod"], a["node"]) for a in own} == {("bert-0", "gpu-t")}, own


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
