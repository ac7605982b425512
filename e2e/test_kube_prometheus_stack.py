"""trainguard next to a kube-prometheus-stack, out of the box: docs/helm.md's "Next to kube-prometheus-stack"
followed as written, one `helm install` of charts/trainguard with nothing else, into a cluster whose
prometheus-operator (the real one, e2e/prometheus_operator.py) runs a Prometheus and an Alertmanager
configured as kube-prometheus-stack's chart configures them with its default values. The operator is the
chart's Deployment: each of its pods run from what the apiserver holds (its command, args, env, volumes,
its ServiceAccount's bound token) by e2e/kubelet.py, so it has exactly the chart's RBAC. A trainguard
alert reaches its receiver, with no edit.

kube-prometheus-stack 88.5 (whose prometheus-operator is v0.93.1, the one run here), default values:
- its Prometheus selects PrometheusRules, PodMonitors and ServiceMonitors labelled
  `release: <release name>` in every namespace (`*SelectorNilUsesHelmValues: true`, namespace selectors
  `{}`); the release here is named kube-prometheus-stack, as its README installs it;
- its Alertmanager selects every AlertmanagerConfig in every namespace (`alertmanagerConfigSelector: {}`,
  `alertmanagerConfigNamespaceSelector: {}`), with no `alertmanagerConfigMatcherStrategy` (so
  OnNamespace: each config's routes get its namespace's matcher);
- its Alertmanager's base configuration (`alertmanager.config`): route by namespace to "null", the Watchdog
  route, and the severity inhibitions (critical over warning|info, warning over info, each with equal
  namespace and alertname, and InfoInhibitor's two).

A control plane of its own (about 10 s): the release's cluster-wide objects (ClusterRoles, the peering,
the webhook configuration) would clash with the session cluster's deploy/ ones, and its operator must
be the only one acting. Its pod network, 127.(230 + worker % 20).x.y, is apart from the session's.
What is not real is e2e/kubelet.py's list (no container runtime: the image's Python environment is the
harness's venv; no kube-proxy or cluster DNS), and Prometheus and Alertmanager are local processes
(e2e/pipeline.py): the sidecars and Alertmanager cannot reach the operator's receiver at its Service's
name, which no alert of this test needs.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from e2e.audit import OPERATOR_USER
from e2e.cluster import REPO, Cluster, load_all, new_workdir
from e2e.controlplane.local import local_control_plane, prometheus_operator_crds
from e2e.docpages import commands
from e2e.kubelet import Kubelet, PodRun
from e2e.kubeproxy import KubeProxy
from e2e.pipeline import Monitoring, Sink, diagnostics, inject, start
from tests.processes import http_json, wait_for

pytestmark = pytest.mark.e2e

PAGE = REPO / "docs" / "helm.md"
SECTION = "## Next to kube-prometheus-stack"
NAMESPACE = "trainguard-system"
"""The release's namespace, as the page installs it."""
DEPLOYMENT = "trainguard-operator"
RELEASE = "kube-prometheus-stack"
SELECTED = {"matchLabels": {"release": RELEASE}}
PROMETHEUS_SPEC = {
    "ruleSelector": SELECTED, "ruleNamespaceSelector": {},
    "podMonitorSelector": SELECTED, "podMonitorNamespaceSelector": {},
    "serviceMonitorSelector": SELECTED, "serviceMonitorNamespaceSelector": {},
}  # fmt: skip
ALERTMANAGER_SPEC = {"alertmanagerConfigSelector": {}, "alertmanagerConfigNamespaceSelector": {}}
BASE_CONFIG = {
    "global": {"resolve_timeout": "5m"},
    "inhibit_rules": [
        {"source_matchers": ["severity = critical"], "target_matchers": ["severity =~ warning|info"],
         "equal": ["namespace", "alertname"]},
        {"source_matchers": ["severity = warning"], "target_matchers": ["severity = info"],
         "equal": ["namespace", "alertname"]},
        {"source_matchers": ["alertname = InfoInhibitor"], "target_matchers": ["severity = info"],
         "equal": ["namespace"]},
        {"target_matchers": ["alertname = InfoInhibitor"]},
    ],
    "route": {"group_by": ["namespace"], "group_wait": "30s", "group_interval": "5m", "repeat_interval": "12h",
              "receiver": "null", "routes": [{"receiver": "null", "matchers": ['alertname = "Watchdog"']}]},
    "receivers": [{"name": "null"}],
    "templates": ["/etc/alertmanager/config/*.tmpl"],
}  # fmt: skip
"""kube-prometheus-stack's default `alertmanager.config`, which its chart writes into the Secret
alertmanager-<name> that prometheus-operator reads as the Alertmanager's base configuration."""


def test_the_page_installs_with_one_helm_install() -> None:
    (line,) = commands(PAGE, SECTION)
    assert line.startswith("helm install trainguard charts/trainguard"), line


@dataclass
class Stack:
    cluster: Cluster
    mon: Monitoring
    sink: Sink
    operators: list[PodRun]
    audit_log: Path

    def apiserver_log(self) -> str:
        """The apiserver's lines about admission webhooks (how it called the operator's)."""
        log = self.audit_log.parent / "kube-apiserver.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        return "\n".join([ln for ln in lines if "webhook" in ln.lower()][-20:])

    @property
    def pipeline(self) -> tuple[Cluster, Monitoring, Sink]:
        return self.cluster, self.mon, self.sink

    def operator_logs(self) -> str:
        return "\n".join(r.logs() for r in self.operators)


def helm_install(plane_bin: Path, kubeconfig: Path, workdir: Path) -> None:
    """The page's command, run from the repository root with the control plane's helm and kubeconfig."""
    (line,) = commands(PAGE, SECTION)
    env = os.environ | {
        "KUBECONFIG": str(kubeconfig), "PATH": f"{plane_bin}{os.pathsep}{os.environ['PATH']}",
        # the user's helm repositories and caches are not the test's
        **{f"HELM_{k}_HOME": str(workdir / f"helm-{k.lower()}") for k in ("CONFIG", "DATA", "CACHE")},
    }  # fmt: skip
    done = subprocess.run(shlex.split(line), cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
                          check=False)  # fmt: skip
    assert done.returncode == 0, f"{line}:\n{done.stdout}{done.stderr}"


def run_deployment(kubelet: Kubelet, apps: client.AppsV1Api, timeout: float = 90) -> list[PodRun]:
    """The Deployment's pods, once the fake kubelet marked each Running, run by `kubelet` and ready (their
    startup and readiness probes pass). An Unsupported pod fails at once."""
    deploy = apps.read_namespaced_deployment(DEPLOYMENT, NAMESPACE)
    selector = ",".join(f"{k}={v}" for k, v in deploy.spec.selector.match_labels.items())
    deadline = time.monotonic() + timeout
    while len(runs := kubelet.sync(NAMESPACE, selector)) < deploy.spec.replicas:
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(runs)} of the Deployment's {deploy.spec.replicas} pods Running")
        time.sleep(0.5)
    kubelet.wait_ready(runs, timeout=timeout)
    return runs


@pytest.fixture(scope="module")
def kps() -> Iterator[Stack]:
    if os.environ.get("TRAINGUARD_E2E_KUBECONFIG"):
        pytest.skip("the chart's test starts a control plane of its own (the release's cluster-wide names)")
    if os.geteuid() != 0:
        why = (
            "e2e/kubelet.py mounts the pod's volumes in a mount namespace, which needs root (CI runs as root)"
        )
        if os.environ.get("TRAINGUARD_REQUIRE_TOOLS"):
            pytest.fail(why)
        pytest.skip(why)
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    workdir = new_workdir()
    net = 230 + worker % 20
    try:
        with local_control_plane(nodes=3, pod_network=net, service_cidr=f"127.{net}.128.0/17") as plane:
            cluster = Cluster(plane.kubeconfig, workdir, audit_log=plane.audit_log)
            # kube-prometheus-stack's CRDs are there before trainguard's release, as on its cluster
            crds = [load_all(p)[0] for p in prometheus_operator_crds()]
            cluster.apply(crds)
            cluster.wait_crds(c["metadata"]["name"] for c in crds)
            base = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "alertmanager-kps", "namespace": "monitoring"},
                    "stringData": {"alertmanager.yaml": yaml.safe_dump(BASE_CONFIG)}}  # fmt: skip
            try:
                with (
                    KubeProxy(cluster.api, ("127.0.0.1", plane.api_port)),
                    Kubelet(cluster.api, workdir) as kubelet,
                    Sink().serve() as sink,
                    Monitoring(cluster, "kps", prometheus_spec=PROMETHEUS_SPEC, alertmanager_spec=ALERTMANAGER_SPEC,
                               objects=(base,)) as mon,
                ):  # fmt: skip
                    helm_install(plane.bin, plane.kubeconfig, workdir)
                    runs = run_deployment(kubelet, client.AppsV1Api(cluster.api))
                    yield Stack(cluster, mon, sink, runs, plane.audit_log)
            finally:
                # after Monitoring, whose exit deletes its objects through it
                cluster.stop_prometheus_operator()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def rule_groups(mon: Monitoring) -> set[str]:
    body = http_json(f"{mon.prometheus}/api/v1/rules")
    return {g["name"] for g in body["data"]["groups"]}


def test_the_operator_is_the_charts_deployment_with_its_default_object_labels(kps: Stack) -> None:
    (container,) = kps.cluster.core.read_namespaced_pod(kps.operators[0].name, NAMESPACE).spec.containers
    assert container.command == ["trainguard", "operator"]
    assert "--object-labels=release=kube-prometheus-stack" in container.args
    assert len(kps.operators) == 2, "the chart's two replicas"
    # its output is the pod's log, through the apiserver and the fake kubelet, as `kubectl logs` reads it
    log = kps.cluster.core.read_namespaced_pod_log(kps.operators[0].name, NAMESPACE, container="operator")
    assert "trainguard operator starting" in log, log[-2000:]


def test_a_trainguard_alert_reaches_its_receiver_through_kube_prometheus_stacks_defaults(
    kps: Stack, tmp_path: Path
) -> None:
    cluster, mon, sink = kps.pipeline
    ns = cluster.namespace("ml")
    # the chart's own PrometheusRule, which helm installed with the release label, is selected; a copy
    # without the label is not, so the selector is in force
    own = cluster.get("monitoring.coreos.com/v1", "PrometheusRule", NAMESPACE, DEPLOYMENT)
    assert own is not None, "helm installed the chart's PrometheusRule"
    assert own["metadata"]["labels"]["release"] == RELEASE
    unlabelled = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
                  "metadata": {"name": "unselected", "namespace": ns,
                               "labels": {k: v for k, v in own["metadata"]["labels"].items() if k != "release"}},
                  "spec": {"groups": [{**own["spec"]["groups"][0], "name": "not-selected"}]}}  # fmt: skip
    cluster.apply([unlabelled])
    try:
        pods = start(kps.pipeline, ns, tmp_path, {"actions": {"nodeFault": "Notify"}}, completions=1, gpus=4)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{kps.operator_logs()}\n{kps.apiserver_log()}") from None
    with pods:
        try:
            (pod,) = pods.running()
            inject(pod, "thermal")
            got = wait_for("GPUThermalThrottling (P1) at the im receiver",
                           lambda: sink.received("im", "GPUThermalThrottling", namespace=ns), timeout=60)  # fmt: skip
            assert got[0]["labels"]["training_job"] == "llama-pretrain"
            # the objects the Deployment's operator applied carry the chart's default labels
            rule = cluster.get("monitoring.coreos.com/v1", "PrometheusRule", ns, "trainguard-llama-pretrain")
            assert rule is not None and rule["metadata"]["labels"]["release"] == RELEASE
            groups = rule_groups(mon)
            assert "trainguard-operator" in groups, groups
            assert "not-selected" not in groups, "a PrometheusRule without the release label was loaded"
            # what kube-prometheus-stack's Alertmanager routes it through: its own base config, with the
            # monitor's AlertmanagerConfig under it, matched on the namespace (OnNamespace)
            with urllib.request.urlopen(f"{mon.alertmanager}/api/v2/status", timeout=5) as resp:
                running = yaml.safe_load(yaml.safe_load(resp.read())["config"]["original"])
            routes = running["route"]["routes"]
            assert any(f'namespace="{ns}"' in r.get("matchers", []) for r in routes), routes
            kept = [r.get("source_matchers") for r in running.get("inhibit_rules") or []]
            assert ['severity="critical"'] in kept, "kube-prometheus-stack's base configuration is in force"
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\n{diagnostics(cluster, mon, pods, ns, sink)}\n{kps.operator_logs()}"
            ) from None


def test_the_operator_called_the_apiserver_as_the_charts_service_account_from_its_pods(kps: Stack) -> None:
    """The apiserver's audit log (the operator ServiceAccount's LIST requests): every one authenticated as
    the chart's ServiceAccount, with a token bound to one of the Deployment's pods (what the kubelet
    projects), so the chart's RBAC is what let the operator do all of the above."""
    events = [json.loads(line) for line in kps.audit_log.read_text().splitlines()]
    mine = [e for e in events if (e.get("user") or {}).get("username") == OPERATOR_USER]
    assert mine, "no request of the operator's ServiceAccount was audited"
    pods = {r.name for r in kps.operators}
    by_pod = {
        p
        for e in mine
        for p in (e["user"].get("extra") or {}).get("authentication.kubernetes.io/pod-name", [])
    }
    assert by_pod and by_pod <= pods, (by_pod, pods)
    refused = [
        (e["verb"], e["objectRef"]) for e in mine if (e.get("responseStatus") or {}).get("code") == 403
    ]
    assert not refused, f"the chart's RBAC refused the operator: {refused}"
    # and nothing else it asked for (the audit policy records its LISTs only) was forbidden
    forbidden = [ln for ln in kps.operator_logs().splitlines() if "forbidden" in ln.lower()]
    assert not forbidden, "\n".join(forbidden)
