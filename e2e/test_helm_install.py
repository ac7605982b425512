"""`helm install` of charts/trainguard into a real apiserver, then what the operator's ServiceAccount
may do, asked with SelfSubjectAccessReviews under that ServiceAccount's own token: everything the
deploy/ RBAC of its values grants (certificates from a Secret: RBAC_FILES; the e2e operator runs with
these and rbac-webhook-tls.yaml), and a
list of things it must not do, the self-managed certificates' Secret among them. The release's
Secret-write policy and NetworkPolicy are accepted by the apiserver, and the policy is in force for
the release's ServiceAccount.

A control plane of its own (about 8 s to start) rather than the session's: the session cluster
already holds deploy/rbac.yaml's objects under the same cluster-wide names, which a release cannot
take over, and the release's uninstall must not take them from the other tests. It has no nodes, so
the operator's pods stay Pending: this checks what the apiserver accepts and authorises, not the
operator at work (the other e2e tests run it under the same RBAC, and e2e/test_kube_prometheus_stack.py
runs the pods of a default release's Deployment)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from e2e.cluster import load_all
from e2e.controlplane.local import LocalControlPlane, local_control_plane, prometheus_operator_crds
from tests.processes import wait_for
from trainguard.catalog.kubernetes import MONITORED

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "trainguard"
VALUES = REPO / "tests" / "packaging" / "golden" / "secret-certs.values.yaml"
NS = "tg-helm"  # not trainguard-system: the chart must work in any namespace
SA = "trainguard-operator"
WORKLOAD_NS = "ml"


@dataclass
class Installed:
    plane: LocalControlPlane
    api: client.ApiClient
    helm: list[str]


def _helm(plane: LocalControlPlane) -> list[str]:
    return [str(plane.bin / "helm"), "--kubeconfig", str(plane.kubeconfig)]


def _run(args: list[str]) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, f"{' '.join(args)}:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    if os.environ.get("TRAINGUARD_E2E_KUBECONFIG"):
        pytest.skip("the helm install test starts a control plane of its own (fixed cluster-wide names)")
    with local_control_plane(nodes=0) as plane:
        api = config.new_client_from_config(str(plane.kubeconfig))
        core = client.CoreV1Api(api)
        values = yaml.safe_load(VALUES.read_text())
        for ns in values["defaultPolicy"]["namespaces"]:  # the default AlertPolicies go there
            core.create_namespace({"metadata": {"name": ns}})
        # the values turn on the ServiceMonitor and PrometheusRule: prometheus-operator's CRDs come first, as
        # on a cluster with kube-prometheus-stack
        kubectl = [str(plane.bin / "kubectl"), "--kubeconfig", str(plane.kubeconfig)]
        _run(
            [
                *kubectl,
                "apply",
                "--server-side",
                *(x for p in prometheus_operator_crds() for x in ("-f", str(p))),
            ]
        )
        _run([*kubectl, "wait", "--for", "condition=established", "--timeout", "60s", "crd", "--all"])
        helm = _helm(plane)
        _run([*helm, "install", "trainguard", str(CHART), "--namespace", NS, "--create-namespace",
              "--values", str(VALUES), "--timeout", "120s"])  # fmt: skip
        yield Installed(plane, api, helm)


def test_the_release_is_deployed_with_everything_the_chart_renders(installed: Installed) -> None:
    status = yaml.safe_load(
        _run([*installed.helm, "status", "trainguard", "--namespace", NS, "--output", "yaml"])
    )
    assert status["info"]["status"] == "deployed"
    apps = client.AppsV1Api(installed.api)
    deploy = apps.read_namespaced_deployment(SA, NS)
    assert deploy.spec.replicas == 3
    assert deploy.spec.template.spec.service_account_name == SA
    ports = {
        p.name: p.port for p in client.CoreV1Api(installed.api).read_namespaced_service(SA, NS).spec.ports
    }
    assert ports == {"webhook": 443, "receiver": 8443, "metrics": 8081}
    custom = client.CustomObjectsApi(installed.api)
    # the values turn self-monitoring on: its ServiceMonitor and PrometheusRule passed their CRDs' schemas
    assert custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", NS, "servicemonitors", SA)
    assert custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", NS, "prometheusrules", SA)
    # the chart's CRDs were installed first, so its custom objects were accepted by their schemas
    assert custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", "trainguard")
    for ns in ("ml", "research"):
        policy = custom.get_namespaced_custom_object(
            "trainguard.io", "v1alpha1", ns, "alertpolicies", "default"
        )
        assert [r["name"] for r in policy["spec"]["receivers"]] == ["oncall", "tickets"]
    crds = {
        c.metadata.name
        for c in client.ApiextensionsV1Api(installed.api).list_custom_resource_definition().items
    }
    assert {
        "trainingjobmonitors.trainguard.io",
        "alertpolicies.trainguard.io",
        "clusterkopfpeerings.kopf.dev",
    } <= crds


@pytest.fixture(scope="module")
def as_operator(installed: Installed) -> client.AuthorizationV1Api:
    """A client authenticated as the ServiceAccount itself (a token from the TokenRequest API), so the
    apiserver answers for its real user and groups."""
    token = (
        client.CoreV1Api(installed.api)
        .create_namespaced_service_account_token(SA, NS, {"spec": {"expirationSeconds": 600}})
        .status.token
    )
    admin = client.Configuration()
    config.load_kube_config(str(installed.plane.kubeconfig), client_configuration=admin)
    cfg = client.Configuration()
    cfg.host, cfg.ssl_ca_cert = admin.host, admin.ssl_ca_cert
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.AuthorizationV1Api(client.ApiClient(cfg))


def _allowed(authz: client.AuthorizationV1Api, attrs: dict[str, str]) -> bool:
    review = authz.create_self_subject_access_review({"spec": {"resourceAttributes": attrs}})
    return bool(review.status.allowed)


CLUSTER_SCOPED = {
    "nodes",
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
    "clusterkopfpeerings",
    "customresourcedefinitions",
}


RBAC_FILES = ("rbac.yaml", "rbac-pod-logs.yaml", "rbac-webhook-configuration.yaml")
"""The deploy/ RBAC of certificates from a Secret (VALUES): the operator applies the webhook
configuration and reads its certificate from the mounted Secret; its reports quote pod logs."""


def granted_by_deploy_rbac(namespace: str) -> list[dict[str, str]]:
    """Every (verb, group, resource[/subresource], name) RBAC_FILES grant, as review attributes:
    namespaced resources of a ClusterRole in a workload namespace, a Role's in its namespace."""
    checks = []
    for obj in (o for name in RBAC_FILES for o in load_all(REPO / "deploy" / name)):
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        where = (
            namespace
            if obj["metadata"].get("namespace") == "trainguard-system"
            else obj["metadata"].get("namespace")
        )
        for rule in obj["rules"]:
            for group in rule["apiGroups"]:
                for full in rule["resources"]:
                    resource, _, sub = full.partition("/")
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [""]:
                            attrs = {"verb": verb, "group": group, "resource": resource}
                            if sub:
                                attrs["subresource"] = sub
                            if name:
                                attrs["name"] = name
                            if obj["kind"] == "Role":
                                attrs["namespace"] = where
                            elif resource not in CLUSTER_SCOPED:
                                attrs["namespace"] = WORKLOAD_NS
                            checks.append(attrs)
    return checks


def test_the_service_account_can_do_what_deploy_rbac_grants(as_operator: client.AuthorizationV1Api) -> None:
    authz = as_operator
    checks = granted_by_deploy_rbac(NS)
    assert len(checks) > 40
    denied = [c for c in checks if not _allowed(authz, c)]
    assert not denied, f"the installed ServiceAccount may not: {denied}"
    # the operator's own key Secret in its namespace, read by name: the only Secret it may read
    assert _allowed(
        authz, {"verb": "get", "resource": "secrets", "namespace": NS, "name": "trainguard-receiver-key"}
    )
    # pods and nodes cluster-wide, as the operator lists them
    assert _allowed(authz, {"verb": "list", "resource": "pods"})
    assert _allowed(authz, {"verb": "list", "resource": "nodes"})


MUST_NOT: list[dict[str, str]] = [
    # Secrets: written, never read, listed or deleted, but for its own key by name in its namespace
    {"verb": "get", "resource": "secrets", "namespace": WORKLOAD_NS, "name": "alertmanager-receivers"},
    {"verb": "list", "resource": "secrets", "namespace": NS},
    {"verb": "watch", "resource": "secrets"},
    {"verb": "get", "resource": "secrets", "namespace": NS, "name": "some-other-secret"},
    {"verb": "get", "resource": "secrets", "namespace": WORKLOAD_NS, "name": "trainguard-receiver-key"},
    {"verb": "delete", "resource": "secrets", "namespace": WORKLOAD_NS},
    # certificates from a Secret are mounted: the self-managed certificates' Secret is not its own
    {"verb": "get", "resource": "secrets", "namespace": NS, "name": "trainguard-operator-webhook-tls"},
    {"verb": "update", "resource": "secrets", "namespace": NS, "name": "trainguard-operator-webhook-tls"},
    # workloads: restarts through their owners (pods deleted or evicted, a JobSet's child Job deleted, a
    # dead node's pod marked Failed in its status), never creates, edits or execs into a pod, never
    # creates a Job or deletes an owner
    {"verb": "create", "resource": "pods", "namespace": WORKLOAD_NS},
    {"verb": "create", "resource": "pods", "subresource": "exec", "namespace": WORKLOAD_NS},
    {"verb": "patch", "resource": "pods", "namespace": WORKLOAD_NS},
    {"verb": "update", "resource": "pods", "namespace": WORKLOAD_NS},
    {"verb": "create", "group": "batch", "resource": "jobs", "namespace": WORKLOAD_NS},
    {"verb": "delete", "group": "jobset.x-k8s.io", "resource": "jobsets", "namespace": WORKLOAD_NS},
    {"verb": "delete", "group": "trainer.kubeflow.org", "resource": "trainjobs", "namespace": WORKLOAD_NS},
    {"verb": "patch", "group": "kueue.x-k8s.io", "resource": "workloads", "namespace": WORKLOAD_NS},
    {"verb": "patch", "group": "apps", "resource": "deployments", "namespace": NS},
    {"verb": "get", "resource": "configmaps", "namespace": WORKLOAD_NS},
    # namespaces: its label merge-patched on those holding a monitor (namespace-label-policy.yaml keeps
    # it to that label), never created, updated, deleted or finalized
    {"verb": "create", "resource": "namespaces"},
    {"verb": "update", "resource": "namespaces", "name": WORKLOAD_NS},
    {"verb": "delete", "resource": "namespaces", "name": WORKLOAD_NS},
    {"verb": "update", "resource": "namespaces", "subresource": "finalize", "name": WORKLOAD_NS},
    # nodes: cordons and taints, never deletes
    {"verb": "delete", "resource": "nodes"},
    {"verb": "update", "resource": "nodes"},
    # its own objects: deletion is the garbage collector's
    {"verb": "delete", "group": "trainguard.io", "resource": "trainingjobmonitors", "namespace": WORKLOAD_NS},
    {"verb": "create", "group": "trainguard.io", "resource": "alertpolicies", "namespace": WORKLOAD_NS},
    {
        "verb": "delete",
        "group": "monitoring.coreos.com",
        "resource": "prometheusrules",
        "namespace": WORKLOAD_NS,
    },
    # it lists and watches its rendered objects' metadata (kube/cache.py), and never deletes them
    {
        "verb": "delete",
        "group": "monitoring.coreos.com",
        "resource": "alertmanagerconfigs",
        "namespace": WORKLOAD_NS,
    },
    # only its own webhook configuration
    {
        "verb": "patch",
        "group": "admissionregistration.k8s.io",
        "resource": "mutatingwebhookconfigurations",
        "name": "someone-elses-webhook",
    },
    {
        "verb": "delete",
        "group": "admissionregistration.k8s.io",
        "resource": "mutatingwebhookconfigurations",
        "name": "trainguard-sidecar-injector",
    },
    {
        "verb": "patch",
        "group": "admissionregistration.k8s.io",
        "resource": "validatingwebhookconfigurations",
        "name": "someone-elses-webhook",
    },
    {
        "verb": "delete",
        "group": "admissionregistration.k8s.io",
        "resource": "validatingwebhookconfigurations",
        "name": "trainguard-eviction-gate",
    },
    # node heartbeats are read in kube-node-lease only, and never written
    {"verb": "list", "group": "coordination.k8s.io", "resource": "leases", "namespace": "default"},
    {"verb": "update", "group": "coordination.k8s.io", "resource": "leases", "namespace": "kube-node-lease"},
    # no way to more rights
    {"verb": "create", "group": "rbac.authorization.k8s.io", "resource": "clusterrolebindings"},
    {"verb": "escalate", "group": "rbac.authorization.k8s.io", "resource": "clusterroles"},
    {"verb": "impersonate", "resource": "users"},
    {"verb": "create", "resource": "serviceaccounts", "subresource": "token", "namespace": NS, "name": SA},
    {"verb": "create", "group": "kopf.dev", "resource": "clusterkopfpeerings"},
    {"verb": "delete", "group": "apiextensions.k8s.io", "resource": "customresourcedefinitions"},
    {"verb": "*", "group": "*", "resource": "*"},
]


@pytest.mark.parametrize("attrs", MUST_NOT, ids=lambda a: "-".join(a.values()))
def test_the_service_account_cannot(as_operator: client.AuthorizationV1Api, attrs: dict[str, str]) -> None:
    assert not _allowed(as_operator, attrs)


def test_the_network_policy_is_accepted_with_its_peers(installed: Installed) -> None:
    policy = client.NetworkingV1Api(installed.api).read_namespaced_network_policy(SA, NS)
    rules = {rule.ports[0].port: rule for rule in policy.spec.ingress}
    assert set(rules) == {"webhook", "receiver", "metrics", "health"}
    assert rules["webhook"]._from[0].ip_block.cidr == "10.0.0.0/24"
    assert rules["metrics"]._from[0].namespace_selector.match_labels == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    assert rules["health"]._from is None, "no peers: any source"


def test_the_secret_write_policy_is_in_force_for_the_releases_service_account(
    installed: Installed, as_operator: client.AuthorizationV1Api
) -> None:
    """The chart put the release's namespace into the policy's username: the release's operator may
    create a labelled Secret and no other (e2e/test_secret_write_policy.py tests the policy itself)."""
    core = client.CoreV1Api(as_operator.api_client)

    def body(labels: dict[str, str]) -> dict[str, Any]:
        return {"metadata": {"name": "probe", "labels": labels}, "stringData": {"k": "v"}}

    def refused() -> bool:
        try:
            core.create_namespaced_secret(WORKLOAD_NS, body({}), dry_run="All")
        except ApiException as exc:
            if exc.status == 403 and "trainguard-operator-secret-writes" in str(exc.body):
                return True
            raise
        return False

    wait_for("the Secret-write policy in force", refused, timeout=60)
    core.create_namespaced_secret(
        WORKLOAD_NS, body({"app.kubernetes.io/managed-by": "trainguard"}), dry_run="All"
    )


def test_the_namespace_label_policy_is_in_force_for_the_releases_service_account(
    installed: Installed, as_operator: client.AuthorizationV1Api
) -> None:
    """The release's operator may set its label on a namespace and change nothing else there
    (e2e/test_namespace_label_policy.py tests the policy itself)."""
    core = client.CoreV1Api(as_operator.api_client)

    def refused() -> bool:
        try:
            core.patch_namespace(WORKLOAD_NS, {"metadata": {"labels": {"team": "x"}}}, dry_run="All")
        except ApiException as exc:
            if exc.status == 403 and "trainguard-operator-namespace-labels" in str(exc.body):
                return True
            raise
        return False

    wait_for("the namespace-label policy in force", refused, timeout=60)
    core.patch_namespace(WORKLOAD_NS, {"metadata": {"labels": {MONITORED: "true"}}}, dry_run="All")


def test_an_upgrade_moves_the_operator_and_its_sidecar_image_together(installed: Installed) -> None:
    """`helm upgrade` to a new image (VALUES pin it by digest): the operator's Deployment and the image it
    injects into new pods (--sidecar-image) move as one; no monitor has to change."""
    apps = client.AppsV1Api(installed.api)

    def images() -> tuple[str, list[str]]:
        (container,) = apps.read_namespaced_deployment(SA, NS).spec.template.spec.containers
        flags = [
            a.removeprefix("--sidecar-image=") for a in container.args if a.startswith("--sidecar-image=")
        ]
        return container.image, flags

    before = f"ghcr.io/trainguard/trainguard@{yaml.safe_load(VALUES.read_text())['image']['digest']}"
    assert images() == (before, [before])
    digest = "sha256:" + "fe" * 32
    _run([*installed.helm, "upgrade", "trainguard", str(CHART), "--namespace", NS, "--reuse-values",
          "--set", f"image.digest={digest}", "--timeout", "120s"])  # fmt: skip
    after = f"ghcr.io/trainguard/trainguard@{digest}"
    assert images() == (after, [after])


def test_uninstall_removes_the_release_and_keeps_the_crds(installed: Installed) -> None:
    """Runs last in this module: the release goes, the CRDs (and so every monitor and policy in the
    cluster) stay, as Helm does with crds/."""
    _run([*installed.helm, "uninstall", "trainguard", "--namespace", NS, "--wait", "--timeout", "120s"])
    rbac = client.RbacAuthorizationV1Api(installed.api)
    assert not [r for r in rbac.list_cluster_role().items if r.metadata.name == SA]
    assert not [b for b in rbac.list_cluster_role_binding().items if b.metadata.name == SA]
    admission = client.AdmissionregistrationV1Api(installed.api)
    assert not [
        p for p in admission.list_validating_admission_policy().items if p.metadata.name.startswith(SA)
    ]
    assert not client.AppsV1Api(installed.api).list_namespaced_deployment(NS).items
    assert not [s for s in client.CoreV1Api(installed.api).list_namespaced_service_account(NS).items
                if s.metadata.name == SA]  # fmt: skip
    crds = {
        c.metadata.name
        for c in client.ApiextensionsV1Api(installed.api).list_custom_resource_definition().items
    }
    assert "trainingjobmonitors.trainguard.io" in crds
