"""Regression tests for the defects a review found at the operator's edges (issue 7), against a real
kube-apiserver: standby replicas, hand edits, finalizers, deleted policies, refused applies, pod counts.
OwnerReferencesPermissionEnforcement is on in the local apiserver, so every test here also proves that
deploy/rbac.yaml lets the operator set blockOwnerDeletion."""

from __future__ import annotations

import base64
import copy
import json
import ssl
import time
import urllib.request
import uuid
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.cluster import RESYNC_SECONDS, Cluster
from e2e.monitors import MON, NAME, condition, quickstart, ready
from tests.processes import wait_for
from trainguard.remediation import tokens

PR = ("monitoring.coreos.com/v1", "PrometheusRule")


def pod(ns: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "trainer", "image": "registry.invalid/llama:1"}]},
    }


def admission_review(ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
            "object": pod(ns, "llama-0", {"app": "llama-pretrain"}),
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def test_a_standby_replica_injects_the_sidecar(operator: Cluster, ns: str) -> None:
    """kopf pauses a standby's watches; admission requests reach every replica behind the Service."""
    standby = operator.start_operator(priority=50, name="operator-standby", manage_webhook=False)
    try:
        operator.apply(quickstart(ns))
        wait_for("monitor Ready", lambda: ready(operator, ns))
        log = operator.workdir / "operator-standby.log"
        wait_for("the second replica to know it is a standby", lambda: "a standby" in log.read_text())
        ca = operator.webhook_certs("127.0.0.1")[2]
        port = operator.webhook_ports["operator-standby"]
        req = urllib.request.Request(
            f"https://127.0.0.1:{port}/inject-sidecar",
            data=json.dumps(admission_review(ns)).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=str(ca)), timeout=10) as r:
            answer = json.loads(r.read())["response"]
        assert answer["allowed"] is True
        patch = json.loads(base64.b64decode(answer["patch"]))
        assert "trainguard-exporter" in json.dumps(patch), patch
    finally:
        operator.stop_operator(standby)


def test_a_hand_edit_of_a_rendered_rule_is_repaired_within_one_resync(operator: Cluster, ns: str) -> None:
    operator.apply(quickstart(ns))
    wait_for("monitor Ready", lambda: ready(operator, ns))
    rendered = operator.get(*PR, ns, NAME)["spec"]
    edited = copy.deepcopy(rendered)
    edited["groups"][0]["rules"] = edited["groups"][0]["rules"][:1]  # someone deleted every alert
    # the edit as the apiserver took it: a resync may repair it before a read that follows
    patched = client.CustomObjectsApi(operator.api).patch_namespaced_custom_object(
        "monitoring.coreos.com", "v1", ns, "prometheusrules", NAME, {"spec": edited}
    )
    assert patched["spec"] != rendered
    t0 = time.monotonic()
    wait_for(
        "the rule repaired",
        lambda: operator.get(*PR, ns, NAME)["spec"] == rendered,
        timeout=3 * RESYNC_SECONDS,
    )
    assert time.monotonic() - t0 <= 2 * RESYNC_SECONDS + 5


def test_monitors_have_no_finalizer_and_delete_without_the_operator(operator: Cluster, ns: str) -> None:
    operator.apply(quickstart(ns))
    obj = wait_for("monitor Ready", lambda: ready(operator, ns))
    assert not obj["metadata"].get("finalizers"), obj["metadata"].get("finalizers")
    operator.stop_all_operators()  # uninstalled first, as happens
    try:
        operator.custom.delete_namespaced_custom_object("trainguard.io", "v1alpha1", ns, "trainingjobmonitors",
                                                        "llama-pretrain")  # fmt: skip
        wait_for("monitor gone without an operator", lambda: operator.get(*MON, ns, "llama-pretrain") is None,
                 timeout=15)  # fmt: skip
    finally:
        operator.start_operator(priority=100)


def test_a_deleted_policy_degrades_the_monitors_that_name_it(operator: Cluster, ns: str) -> None:
    operator.apply(quickstart(ns))
    wait_for("monitor Ready", lambda: ready(operator, ns))
    operator.custom.delete_namespaced_custom_object(
        "trainguard.io", "v1alpha1", ns, "alertpolicies", "default"
    )
    degraded = wait_for(
        "Degraded: PolicyNotFound",
        lambda: (
            (c := condition(operator.get(*MON, ns, "llama-pretrain"), "Degraded"))
            and c["status"] == "True"
            and c["reason"] == "PolicyNotFound"  # not the WorkloadUnresolved of a monitor without its Job
            and c
        ),
        timeout=30,
    )
    assert degraded["reason"] == "PolicyNotFound"


def test_an_apply_refused_by_an_admission_policy_shows_in_status(operator: Cluster, ns: str) -> None:
    """The likeliest real case is prometheus-operator's webhook refusing a rule; a
    ValidatingAdmissionPolicy refuses it here the same way (a real admission rejection)."""
    name = f"e2e-no-rules-{ns}"
    message = "e2e: PrometheusRules are refused in this namespace"
    admissions = client.AdmissionregistrationV1Api(operator.api)
    admissions.create_validating_admission_policy({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["monitoring.coreos.com"], "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"], "resources": ["prometheusrules"]}]},
            "validations": [{"expression": "false", "message": message}],
        },
    })  # fmt: skip
    admissions.create_validating_admission_policy_binding({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}},
    })  # fmt: skip
    try:
        # the apiserver takes the policy up through an informer, a moment after the create returns: until
        # then the rule would be applied, and the test would wait for a refusal that never comes
        probe = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
                 "metadata": {"name": "e2e-probe", "namespace": ns}, "spec": {"groups": []}}  # fmt: skip

        def in_force() -> bool:
            try:
                operator.custom.create_namespaced_custom_object(
                    "monitoring.coreos.com", "v1", ns, "prometheusrules", probe, dry_run="All"
                )
            except ApiException as exc:
                return message in str(exc.body)
            return False

        wait_for("the admission policy in force", in_force, timeout=30)
        operator.apply(quickstart(ns))
        degraded = wait_for(
            "Degraded: ApplyFailed",
            lambda: (
                (c := condition(operator.get(*MON, ns, "llama-pretrain"), "Degraded"))
                and c["reason"] == "ApplyFailed"
                and c
            ),
            timeout=60,
        )
        assert f"PrometheusRule {ns}/{NAME}" in degraded["message"] and message in degraded["message"]
        assert condition(operator.get(*MON, ns, "llama-pretrain"), "Ready")["status"] == "False"
        assert operator.events(ns, "llama-pretrain", "ApplyFailed")
    finally:
        admissions.delete_validating_admission_policy_binding(name)
        admissions.delete_validating_admission_policy(name)
    wait_for("Ready again once the rule is accepted", lambda: ready(operator, ns), timeout=3 * RESYNC_SECONDS)


def test_only_pods_that_carry_the_exporter_count_as_monitored(operator: Cluster, ns: str) -> None:
    operator.apply(quickstart(ns))
    wait_for("monitor Ready", lambda: ready(operator, ns))
    opted_out = pod(ns, "opted-out", {"app": "llama-pretrain", "trainguard.io/inject": "disabled"})
    operator.apply([pod(ns, "llama-0", {"app": "llama-pretrain"}), opted_out])
    injected = operator.core.read_namespaced_pod("llama-0", ns)
    assert any(c.name == "trainguard-exporter" for c in injected.spec.init_containers or [])
    wait_for(
        "podsMonitored == 1 (the opted-out pod matches the selector but runs no exporter)",
        lambda: (o := operator.get(*MON, ns, "llama-pretrain")) and o["status"].get("podsMonitored") == 1,
        timeout=30,
    )


def test_the_credentials_derive_from_the_operator_key_and_only_the_sidecar_token_is_mounted(
    operator: Cluster, ns: str
) -> None:
    """The operator reads no monitor's Secret: it derives each monitor's tokens from its own key (the
    one Secret it may read) and the monitor's uid, so it can check any token it receives."""
    operator.apply(quickstart(ns))
    wait_for("monitor Ready", lambda: ready(operator, ns))
    key = base64.b64decode(
        operator.core.read_namespaced_secret("trainguard-receiver-key", "trainguard-system").data["key"]
    )
    uid = operator.get(*MON, ns, "llama-pretrain")["metadata"]["uid"]
    secret = operator.core.read_namespaced_secret(f"{NAME}-fastpath", ns).data
    events, alerts = (base64.b64decode(secret[k]).decode() for k in ("token", "alertmanager-token"))
    assert tokens.verify(key, tokens.EVENTS, ns, "llama-pretrain", uid, presented=events)
    assert tokens.verify(key, tokens.ALERTS, ns, "llama-pretrain", uid, presented=alerts)
    assert "ca.crt" in secret
    # a hand-edited token is repaired at the next resync, like any other owned object
    operator.core.patch_namespaced_secret(f"{NAME}-fastpath", ns, {"stringData": {"token": "forged"}})
    wait_for(
        "the token repaired",
        lambda: (
            base64.b64decode(
                operator.core.read_namespaced_secret(f"{NAME}-fastpath", ns).data["token"]
            ).decode()
            == events
        ),
        timeout=3 * RESYNC_SECONDS,
    )
