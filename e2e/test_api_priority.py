"""deploy/api-priority.yaml on the real apiserver, where every e2e test runs under it (the cluster
installs it with the RBAC): the requests of the operator's ServiceAccount that protect a job are
classified under the FlowSchema trainguard-operator-remediation at workload-high, and its reconciles'
writes stay under the built-in `service-accounts` at workload-low. Each request is made with a token
of the operator's own; the apiserver names the FlowSchema that classified it in the response header
X-Kubernetes-PF-FlowSchema-UID, on a refusal or a 404 too (API Priority and Fairness classifies a
request before it is authorized or served), so no object is changed: writes are dry runs or name
objects that do not exist."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from e2e.cluster import Cluster
from tests.processes import wait_for

pytestmark = pytest.mark.e2e

OURS = "trainguard-operator-remediation"
HEADER = "X-Kubernetes-PF-FlowSchema-UID"
DRY = {"dry_run": "All"}
NOWHERE = "trainguard-api-priority-absent"


def schema_of(call: Callable[[], Any]) -> str:
    """The UID of the FlowSchema that classified the request `call` makes (its response's header)."""
    try:
        response = call()
        headers = response.headers if hasattr(response, "headers") else {}
    except ApiException as exc:
        headers = exc.headers or {}
    got = {k.lower(): v for k, v in dict(headers).items()}.get(HEADER.lower())
    assert got, f"no {HEADER} in the response"
    return str(got)


@pytest.fixture(scope="module")
def as_operator(cluster: Cluster) -> client.ApiClient:
    return config.new_client_from_config(str(cluster.operator_kubeconfig()))


@pytest.fixture(scope="module")
def uids(cluster: Cluster, as_operator: client.ApiClient) -> dict[str, str]:
    """The UIDs of our FlowSchema and of `service-accounts`, once the apiserver classifies by ours (its
    flow-control configuration follows the FlowSchemas through a watch: a moment after the apply)."""
    flow = client.FlowcontrolApiserverV1Api(cluster.api)
    found = {n: flow.read_flow_schema(n).metadata.uid for n in (OURS, "service-accounts")}
    node = cluster.core.list_node().items[0].metadata.name
    core = client.CoreV1Api(as_operator)
    cordon = {"spec": {"unschedulable": True}}
    wait_for(
        f"the apiserver classifying by {OURS}",
        lambda: (
            schema_of(lambda: core.patch_node(node, cordon, _preload_content=False, **DRY)) == found[OURS]
        ),
        timeout=60,
    )
    return found


def test_the_requests_that_protect_a_job_are_classified_at_workload_high(
    cluster: Cluster, as_operator: client.ApiClient, uids: dict[str, str]
) -> None:
    flow = client.FlowcontrolApiserverV1Api(cluster.api).read_flow_schema(OURS)
    assert flow.spec.priority_level_configuration.name == "workload-high"
    core, batch = client.CoreV1Api(as_operator), client.BatchV1Api(as_operator)
    custom = client.CustomObjectsApi(as_operator)
    node = cluster.core.list_node().items[0].metadata.name
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": NOWHERE, "namespace": "default"},
    }
    review = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "not-a-token"},
    }
    record = {"status": {"remediations": []}}
    remediation = {
        "the cordon": lambda: core.patch_node(node, {"spec": {"unschedulable": True}}, _preload_content=False, **DRY),
        "a pod deleted for a restart": lambda: core.delete_namespaced_pod(NOWHERE, "default", _preload_content=False),
        "a pod evicted": lambda: core.create_namespaced_pod_eviction(NOWHERE, "default", eviction, _preload_content=False),
        "a pod's DisruptionTarget": lambda: core.patch_namespaced_pod_status(NOWHERE, "default", {}, _preload_content=False),
        "a Job deleted": lambda: batch.delete_namespaced_job(NOWHERE, "default", _preload_content=False),
        "a Job's resume-from": lambda: batch.patch_namespaced_job(NOWHERE, "default", {}, _preload_content=False),
        "a JobSet's resume-from": lambda: custom.patch_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", NOWHERE, {}, _preload_content=False),
        "a sender's TokenReview": lambda: client.AuthenticationV1Api(as_operator).create_token_review(
            review, _preload_content=False),
        "the remediation record": lambda: custom.patch_namespaced_custom_object_status(
            "trainguard.io", "v1alpha1", "default", "trainingjobmonitors", NOWHERE, record, _preload_content=False),
        "the leadership keep-alive": lambda: custom.patch_cluster_custom_object(
            "kopf.dev", "v1", "clusterkopfpeerings", NOWHERE, {}, _preload_content=False),
    }  # fmt: skip
    classified = {what: schema_of(call) for what, call in remediation.items()}
    assert classified == dict.fromkeys(remediation, uids[OURS])


def test_the_reconciles_and_reads_stay_with_every_service_account(
    as_operator: client.ApiClient, uids: dict[str, str]
) -> None:
    core, custom = client.CoreV1Api(as_operator), client.CustomObjectsApi(as_operator)
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NOWHERE}}
    reconcile = {
        "a PrometheusRule applied": lambda: custom.patch_namespaced_custom_object(
            "monitoring.coreos.com", "v1", "default", "prometheusrules", NOWHERE, {}, _preload_content=False),
        "a report's ConfigMap": lambda: core.create_namespaced_config_map(
            "default", config_map, _preload_content=False, **DRY),
        "a monitor read by name": lambda: custom.get_namespaced_custom_object(
            "trainguard.io", "v1alpha1", "default", "trainingjobmonitors", NOWHERE, _preload_content=False),
        "a pod read": lambda: core.read_namespaced_pod(NOWHERE, "default", _preload_content=False),
    }  # fmt: skip
    classified = {what: schema_of(call) for what, call in reconcile.items()}
    assert classified == dict.fromkeys(reconcile, uids["service-accounts"])
