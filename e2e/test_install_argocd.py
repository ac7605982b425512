"""docs/argocd.md's steps on a local control plane of its own, with the files its commands name: argocd-cm's
health checks (examples/argocd/argocd-cm.yaml), the chart's Application (application.yaml), then the
monitors' Application (monitors.yaml), each taken through what Argo CD does with it (e2e/argocd.py):

1. the repo-server's render: `helm template` with the Application's values and the cluster's API and
   Kubernetes versions, so the chart's `auto` certificates resolve as they would under Argo CD;
2. two more renders, later and in processes of their own, byte-identical to the first (GitOps sees any
   random or dated object as a change on every refresh);
3. the sync: the waves in gitops-engine's order, client-side apply as argocd-controller, each wave
   Healthy before the next;
4. health: Argo CD's checks of the chart's kinds, argocd-cm's Lua for the monitor and policy, which the
   operator (run from the synced Deployment's arguments under its ServiceAccount) makes Ready;
5. the OutOfSync check: a server-side apply dry run of a fresh render, and the desired fields compared
   with the live ones, differ from the live objects in nothing but the Application's ignoreDifferences.

What is not real: Argo CD does not run (its Go module does not build here, see e2e/argocd.py), so its
controller's loop, its cache, Git and Redis are not exercised, only the steps above as its code takes
them; the operator's pods are Running on a fake kubelet and the operator itself is one local process;
cert-manager is not run: its mode (test_cert_manager_mode_*) has stand-in CRDs that accept any spec,
no Certificate is issued (the sync is not waited on there), and the cainjector's write is the test's.

A control plane of its own (about 8 s): the chart's cluster-wide objects have fixed names."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import argocd
from e2e.argocd import ClusterInfo, Kubectl
from e2e.cluster import REPO, Cluster
from e2e.controlplane.local import LocalControlPlane, local_control_plane, prometheus_operator_crds
from e2e.monitors import indexed_job
from tests.processes import free_port, stop, wait_for

pytestmark = pytest.mark.e2e

PAGE = REPO / "docs" / "argocd.md"
SECTION = "## The steps"
ARGOCD_CM_KEYS = {"resource.customizations.health.trainguard.io_TrainingJobMonitor",
                  "resource.customizations.health.trainguard.io_AlertPolicy"}  # fmt: skip


def commands(page: Path, section: str) -> list[str]:
    text = page.read_text()
    block = re.search(r"```sh\n(.*?)```", text[text.index(section) :], re.S)
    assert block, f"{page}: no sh block under {section!r}"
    return [ln.strip() for ln in block.group(1).splitlines() if ln.strip() and not ln.strip().startswith("#")]


@dataclass(frozen=True)
class Steps:
    """What the page's commands hand Argo CD, in their order."""

    argocd_cm: dict[str, Any]
    applications: list[dict[str, Any]]


def page_steps() -> Steps:
    cm = None
    apps = []
    for cmd in commands(PAGE, SECTION):
        args = shlex.split(cmd)
        if args[:5] == ["kubectl", "-n", "argocd", "patch", "configmap"]:
            cm = yaml.safe_load((REPO / args[args.index("--patch-file") + 1]).read_text())
        elif args[:2] == ["kubectl", "apply"]:
            apps.append(yaml.safe_load((REPO / args[args.index("-f") + 1]).read_text()))
    assert cm is not None, f"{PAGE}: no `kubectl -n argocd patch configmap argocd-cm` step"
    return Steps(cm, apps)


def test_the_page_hands_argo_cd_the_health_checks_then_trainguard_then_the_monitors() -> None:
    steps = page_steps()
    assert set(steps.argocd_cm["data"]) == ARGOCD_CM_KEYS
    assert [(a["kind"], a["metadata"]["name"]) for a in steps.applications] == [
        ("Application", "trainguard"),
        ("Application", "trainguard-monitors"),
    ]
    assert steps.applications[0]["spec"]["source"]["path"] == "charts/trainguard"


# ---- the control plane ------------------------------------------------------------------------------


@dataclass
class Synced:
    plane: LocalControlPlane
    kubectl: Kubectl
    info: ClusterInfo
    steps: Steps
    renders: list[str] = field(default_factory=list)
    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Each Application's desired objects, by its name."""
    waves: list[tuple[str, int, list[tuple[str, argocd.Health]]]] = field(default_factory=list)
    """(application, wave, [(object, its health when the sync moved on)]) in the order synced."""
    seconds: dict[str, float] = field(default_factory=dict)


def workload_resolved(kubectl: Kubectl) -> dict[str, Any]:
    """The quickstart monitor's WorkloadResolved condition ({} before the operator wrote one)."""
    monitor = kubectl.json("get", "trainingjobmonitors.trainguard.io", "llama-pretrain", "-n", "ml")
    conditions = (monitor.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "WorkloadResolved"), {})


def established(kubectl: Kubectl) -> None:
    """Every CRD established (a CRD just created has no status yet, which `kubectl wait` fails on)."""
    wait = ("wait", "--for", "condition=established", "--timeout", "30s", "crd", "--all")
    wait_for("the CRDs established", lambda: kubectl.run(*wait, check=False).returncode == 0, timeout=60)


def kind_name(obj: dict[str, Any]) -> str:
    ns = obj["metadata"].get("namespace")
    return f"{obj['kind']} {ns + '/' if ns else ''}{obj['metadata']['name']}"


def create_namespace(kubectl: Kubectl, app: dict[str, Any]) -> None:
    """The CreateNamespace=true sync option: the destination namespace, unless it exists."""
    if "CreateNamespace=true" in app["spec"]["syncPolicy"].get("syncOptions", []):
        ns = app["spec"]["destination"]["namespace"]
        if kubectl.run("get", "namespace", ns, check=False).returncode != 0:
            kubectl.run("create", "namespace", ns)


def sync(s: Synced, app: dict[str, Any], objs: list[dict[str, Any]], overrides: argocd.LuaChecks) -> None:
    """CreateNamespace=true, then each wave applied and waited on until every object in it is Healthy (or
    has no health), as sync_context.go does before the next wave; Degraded fails the sync."""
    create_namespace(s.kubectl, app)
    for number, wave in argocd.sync_waves(objs):
        argocd.apply(s.kubectl, wave)

        def settled(wave: list[dict[str, Any]] = wave) -> list[tuple[str, argocd.Health]] | None:
            states = []
            for obj in wave:
                current = argocd.live(s.kubectl, obj)
                assert current is not None, f"{kind_name(obj)} is missing after its apply"
                state = argocd.health(current, overrides)
                if state is not None and state[0] not in ("Healthy", "Degraded"):
                    return None
                states.append((kind_name(obj), state))
            return states

        states = wait_for(f"{app['metadata']['name']}'s wave {number} Healthy", settled, timeout=120)
        degraded = [(name, state) for name, state in states if state and state[0] == "Degraded"]
        assert not degraded, f"the sync fails at {app['metadata']['name']}'s wave {number}: {degraded}"
        s.waves.append((app["metadata"]["name"], number, states))


@contextlib.contextmanager
def operator_from_deployment(s: Synced, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The synced Deployment's container as a local process: its command, arguments and env, its listening
    ports moved to free ones (one process of this machine among others), as its ServiceAccount."""
    ns = s.steps.applications[0]["spec"]["destination"]["namespace"]
    deploy = s.kubectl.json("get", "deployment", "trainguard-operator", "-n", ns)
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    moved = {"--liveness": f"http://127.0.0.1:{free_port()}/healthz", "--metrics-addr": f"127.0.0.1:{free_port()}",
             "--webhook-port": str(free_port()), "--receiver-port": str(free_port())}  # fmt: skip
    args = [a for a in container["args"] if a.split("=", 1)[0] not in moved]
    args += [f"{k}={v}" for k, v in moved.items()]
    pods = s.kubectl.json("get", "pods", "-n", ns, "-l", "app.kubernetes.io/component=operator")["items"]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    env["POD_NAME"] = pods[0]["metadata"]["name"]  # its fieldRef, as the kubelet resolves it
    cluster = Cluster(s.plane.kubeconfig, workdir)
    env["KUBECONFIG"] = str(cluster.operator_kubeconfig())
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    log = (workdir / "operator.log").open("ab")
    proc = subprocess.Popen([*container["command"], *args], env=os.environ | env, stdout=log,
                            stderr=subprocess.STDOUT, cwd=workdir)  # fmt: skip
    try:
        yield proc
    finally:
        stop([proc])


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synced]:
    if os.environ.get("TRAINGUARD_E2E_KUBECONFIG"):
        pytest.skip("the Argo CD page's test starts a control plane of its own (cluster-wide names)")
    workdir = tmp_path_factory.mktemp("argocd")
    steps = page_steps()
    overrides = argocd.lua_checks(steps.argocd_cm)
    with local_control_plane(nodes=1, pod_network=249) as plane:
        kubectl = Kubectl(plane.bin / "kubectl", plane.kubeconfig)
        # before you start: prometheus-operator's CRDs, as kube-prometheus-stack installs them
        kubectl.run(
            "apply", "--server-side", *(x for p in prometheus_operator_crds() for x in ("-f", str(p)))
        )
        established(kubectl)
        s = Synced(plane, kubectl, argocd.cluster_info(kubectl), steps)
        chart_app, monitors_app = steps.applications
        t0 = time.monotonic()
        s.renders.append(argocd.render(plane.bin / "helm", chart_app, s.info))
        s.seconds["render"] = time.monotonic() - t0
        for _ in range(2):  # a later refresh: another second, another process, another values file
            time.sleep(1.1)
            s.renders.append(argocd.render(plane.bin / "helm", chart_app, argocd.cluster_info(kubectl)))
        s.objects["trainguard"] = argocd.desired(chart_app, s.renders[0], s.info)
        t0 = time.monotonic()
        sync(s, chart_app, s.objects["trainguard"], overrides)
        s.seconds["sync trainguard"] = time.monotonic() - t0
        with operator_from_deployment(s, workdir) as proc:
            t0 = time.monotonic()
            Cluster(plane.kubeconfig, workdir).namespace("ml")
            # the monitors' CRDs came with trainguard: discovery now serves them
            s.info = argocd.cluster_info(kubectl)
            s.objects["trainguard-monitors"] = argocd.desired(
                monitors_app, argocd.directory_render(monitors_app), s.info
            )
            try:
                sync(s, monitors_app, s.objects["trainguard-monitors"], overrides)
            except AssertionError as exc:
                tail = (workdir / "operator.log").read_text(errors="replace")[-4000:]
                raise AssertionError(f"{exc}\noperator exited: {proc.poll()}\n{tail}") from None
            s.seconds["sync trainguard-monitors"] = time.monotonic() - t0
            # synced before the Job it watches, which the user's pipeline submits later, outside Argo CD:
            # the monitor waits for it (WorkloadResolved False, WorkloadNotFound), Healthy, not Degraded
            resolved = workload_resolved(kubectl)
            assert (resolved.get("status"), resolved.get("reason")) == ("False", "WorkloadNotFound"), resolved
            kubectl.run("apply", "-f", "-", stdin=json.dumps(indexed_job("ml")))
            wait_for("the monitor's Job found", lambda: workload_resolved(kubectl).get("status") == "True",
                     timeout=60)  # fmt: skip
            yield s


def test_the_repo_server_renders_with_the_clusters_versions_so_auto_certificates_are_self_managed(
    synced: Synced,
) -> None:
    info = synced.info
    assert info.kube_version == "1.36.3"
    assert {"apps/v1", "apps/v1/Deployment", "monitoring.coreos.com/v1/PrometheusRule"} <= set(
        info.api_versions
    )
    assert not any(v.startswith("cert-manager.io/") for v in info.api_versions)
    kinds = {o["kind"] for o in synced.objects["trainguard"]}
    # no cert-manager on this cluster: `auto` resolved to selfManaged, as helm install would
    assert not kinds & {"Certificate", "Issuer", "MutatingWebhookConfiguration"}, kinds
    (deploy,) = [o for o in synced.objects["trainguard"] if o["kind"] == "Deployment"]
    assert "--self-managed-certs" in deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"CustomResourceDefinition", "ServiceMonitor", "PrometheusRule"} <= kinds  # --include-crds, values


def test_a_refresh_renders_the_same_bytes_later_and_in_another_process(synced: Synced) -> None:
    first, *later = synced.renders
    assert len(later) == 2
    for text in later:
        assert text == first


def test_the_sync_applies_crds_then_rbac_then_the_operator_each_wave_healthy_first(synced: Synced) -> None:
    waves = {(app, n): dict(states) for app, n, states in synced.waves}
    assert [(app, n) for app, n, _ in synced.waves] == [
        ("trainguard", -1), ("trainguard", 0), ("trainguard", 1), ("trainguard", 2), ("trainguard-monitors", 0),
    ]  # fmt: skip
    first = waves[("trainguard", -1)]
    assert all(k.startswith("CustomResourceDefinition ") for k in first)
    assert set(first.values()) == {("Healthy", "CRD is healthy")}
    assert all(k.startswith("ConfigMap ") for k in waves[("trainguard", 0)])  # the dashboards
    assert {k.split()[0] for k in waves[("trainguard", 1)]} >= {
        "ServiceAccount",
        "ClusterRole",
        "RoleBinding",
    }
    operator = waves[("trainguard", 2)]
    assert operator["Deployment trainguard-system/trainguard-operator"] == ("Healthy", "")
    assert operator["PodDisruptionBudget trainguard-system/trainguard-operator"][0] == "Healthy"
    order = [k.split()[0] for k in operator]
    assert order.index("PodDisruptionBudget") < order.index("Service") < order.index("Deployment")


def test_the_monitor_and_policy_are_healthy_by_argocd_cms_check_once_the_operator_reconciled(
    synced: Synced,
) -> None:
    (wave,) = [dict(states) for app, _, states in synced.waves if app == "trainguard-monitors"]
    assert set(wave) == {"AlertPolicy ml/default", "TrainingJobMonitor ml/llama-pretrain"}
    assert wave["AlertPolicy ml/default"][0] == "Healthy"  # type: ignore[index]
    assert wave["TrainingJobMonitor ml/llama-pretrain"] == ("Healthy", "rules and routes are in place")
    # what the operator rendered for the monitor is its, not the Application's: no tracking annotation
    rule = synced.kubectl.json("get", "prometheusrule", "trainguard-llama-pretrain", "-n", "ml")
    assert argocd.TRACKING not in (rule["metadata"].get("annotations") or {})
    assert "app.kubernetes.io/instance" not in (rule["metadata"].get("labels") or {})


def test_what_the_operator_writes_for_its_certificates_is_not_tracked(synced: Synced) -> None:
    """Without cert-manager the operator writes the webhook's Secret and configuration: Argo CD must
    neither show them as extra nor prune them (prune: true), by annotation or by label tracking."""
    secret = synced.kubectl.json(
        "get", "secret", "trainguard-operator-webhook-tls", "-n", "trainguard-system"
    )
    webhook = synced.kubectl.json("get", "mutatingwebhookconfiguration", "trainguard-sidecar-injector")
    for obj in (secret, webhook):
        assert argocd.TRACKING not in (obj["metadata"].get("annotations") or {}), obj["metadata"]
        assert (obj["metadata"].get("labels") or {}).get("app.kubernetes.io/instance") != "trainguard"


def test_after_the_apiservers_defaults_nothing_is_out_of_sync(synced: Synced) -> None:
    """A fresh render against the live objects: the server-side diff (a dry-run apply as argocd-controller)
    and every desired field compared with the live one show nothing the Application does not ignore."""
    chart_app, monitors_app = synced.steps.applications
    fresh = {
        "trainguard": (chart_app, argocd.desired(chart_app, argocd.render(synced.plane.bin / "helm", chart_app,
                                                                           synced.info), synced.info)),
        "trainguard-monitors": (monitors_app, argocd.desired(monitors_app, argocd.directory_render(monitors_app),
                                                             synced.info)),
    }  # fmt: skip
    drift: dict[str, list[argocd.Path_]] = {}
    compared = 0
    for app, objs in fresh.values():
        for obj in objs:
            patterns = argocd.ignore_patterns(app, obj)
            current = argocd.live(synced.kubectl, obj)
            assert current is not None
            paths = [*argocd.server_side_diff(synced.kubectl, obj), *argocd.differences(obj, current)]
            if found := [p for p in paths if not argocd.ignored(p, patterns)]:
                drift[kind_name(obj)] = found
            compared += 1
    assert compared == len(synced.objects["trainguard"]) + len(synced.objects["trainguard-monitors"])
    assert not drift, drift
    # and both comparisons see a change that is not in Git: a Deployment scaled by hand
    (deploy,) = [o for o in fresh["trainguard"][1] if o["kind"] == "Deployment"]
    synced.kubectl.run(
        "scale", "deployment", "trainguard-operator", "-n", "trainguard-system", "--replicas=1"
    )
    try:
        scaled = argocd.live(synced.kubectl, deploy)
        assert ("spec", "replicas") in argocd.server_side_diff(synced.kubectl, deploy)
        assert ("spec", "replicas") in list(argocd.differences(deploy, scaled))
    finally:
        argocd.apply(synced.kubectl, [deploy])  # selfHeal


# ---- cert-manager mode -----------------------------------------------------------------------------


def stand_in_crd(kind: str) -> dict[str, Any]:
    """cert-manager.io/v1 served with any spec: enough for discovery (the chart's `auto`) and for the
    apiserver to accept the chart's Issuers and Certificates; nothing issues them."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.lower()}s.cert-manager.io"},
        "spec": {
            "group": "cert-manager.io",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": f"{kind.lower()}s", "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }  # fmt: skip


def test_cert_manager_mode_renders_the_same_bytes_and_the_injected_ca_bundle_is_no_drift() -> None:
    """On a cluster that serves cert-manager.io/v1, `auto` renders cert-manager's Issuers and Certificates
    and the webhook configuration whose caBundle cainjector fills. The renders are byte-identical, and
    after the cainjector's write (made here, as its field manager) the comparison shows nothing that
    ignoreDifferences does not cover, and a re-sync leaves the caBundle in place. The waves are applied
    without waiting on health: no cert-manager issues the Certificates, so they would stay Progressing."""
    if os.environ.get("TRAINGUARD_E2E_KUBECONFIG"):
        pytest.skip("a control plane of its own (cluster-wide names)")
    chart_app = page_steps().applications[0]
    with local_control_plane(nodes=0, pod_network=248) as plane:
        kubectl = Kubectl(plane.bin / "kubectl", plane.kubeconfig)
        kubectl.run(
            "apply", "--server-side", *(x for p in prometheus_operator_crds() for x in ("-f", str(p)))
        )
        argocd.apply(kubectl, [stand_in_crd("Issuer"), stand_in_crd("Certificate")])
        established(kubectl)
        info = argocd.cluster_info(kubectl)
        assert "cert-manager.io/v1/Certificate" in info.api_versions
        renders = [argocd.render(plane.bin / "helm", chart_app, info)]
        for _ in range(2):
            time.sleep(1.1)
            renders.append(argocd.render(plane.bin / "helm", chart_app, info))
        assert renders[1] == renders[0] and renders[2] == renders[0]
        objs = argocd.desired(chart_app, renders[0], info)
        assert {"Issuer", "Certificate", "MutatingWebhookConfiguration"} <= {o["kind"] for o in objs}
        create_namespace(kubectl, chart_app)
        for number, wave in argocd.sync_waves(objs):
            argocd.apply(kubectl, wave)
            if number < 0:
                established(kubectl)
        (webhook,) = [o for o in objs if o["kind"] == "MutatingWebhookConfiguration"]
        bundle = base64.b64encode((plane.workdir / "ca.crt").read_bytes()).decode()
        kubectl.run("patch", "mutatingwebhookconfiguration", webhook["metadata"]["name"], "--type=json",
                    "--field-manager", "cert-manager-cainjector", "-p",
                    json.dumps([{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle}]))  # fmt: skip
        patterns = argocd.ignore_patterns(chart_app, webhook)
        assert argocd.ignored(("webhooks", 0, "clientConfig", "caBundle"), patterns)
        for obj in objs:
            current = argocd.live(kubectl, obj)
            assert current is not None, kind_name(obj)
            paths = [*argocd.server_side_diff(kubectl, obj), *argocd.differences(obj, current)]
            drift = [p for p in paths if not argocd.ignored(p, argocd.ignore_patterns(chart_app, obj))]
            assert not drift, (kind_name(obj), drift)
        argocd.apply(kubectl, [webhook])  # a re-sync
        after = argocd.live(kubectl, webhook)
        assert after is not None
        assert after["webhooks"][0]["clientConfig"]["caBundle"] == bundle
