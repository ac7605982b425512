"""The chart carries copies of crds/, deploy/peering-crd.yaml and the rest of deploy/ (its RBAC and
the Secret-write policy; `make chart` writes them): the copies must be byte-identical, and what helm
renders from them must be the very objects of the deploy/ files its values need, in
whatever namespace the chart is installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.packaging.chart import CHART, REPO, objects, run_helm, template, template_args

RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
POLICY_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "FlowSchema"}
DEPLOY_NAMESPACE = "trainguard-system"
OPERATOR_USER = "system:serviceaccount:{}:trainguard-operator"
ALL = (
    "rbac.yaml",
    "rbac-pod-logs.yaml",
    "rbac-webhook-configuration.yaml",
    "rbac-webhook-tls.yaml",
    "secret-write-policy.yaml",
    "namespace-label-policy.yaml",
    "api-priority.yaml",
)
"""deploy/ but the peering: what the chart copies into files/ and `kubectl apply` installs."""


def expected_crd_copies() -> dict[str, Path]:
    sources = {p.name: p for p in sorted((REPO / "crds").glob("*.yaml"))}
    sources["peering-crd.yaml"] = REPO / "deploy" / "peering-crd.yaml"
    return sources


def test_the_chart_crds_are_the_generated_crds() -> None:
    chart_crds = CHART / "crds"
    assert chart_crds.is_dir(), "charts/trainguard/crds/ is missing: run `make crds`"
    expected = expected_crd_copies()
    present = {p.name for p in chart_crds.iterdir()}
    assert present == set(expected), (
        f"charts/trainguard/crds/ holds {sorted(present)}, crds/ and deploy/ give {sorted(expected)}: "
        "run `make crds`"
    )
    for name, source in expected.items():
        assert (chart_crds / name).read_bytes() == source.read_bytes(), (
            f"charts/trainguard/crds/{name} differs from {source.relative_to(REPO)}: run `make crds`"
        )


def test_the_chart_copies_every_deploy_file_but_the_peering() -> None:
    deploy = sorted(p.name for p in (REPO / "deploy").glob("*.yaml") if not p.name.startswith("peering"))
    assert deploy == sorted(ALL), "a new deploy/ file: copy it in `make chart` and render it in the chart"
    for name in ALL:
        copy, source = CHART / "files" / name, REPO / "deploy" / name
        assert copy.exists(), f"charts/trainguard/files/{name} is missing: run `make chart`"
        assert copy.read_bytes() == source.read_bytes(), (
            f"charts/trainguard/files/{name} differs from deploy/{name}: run `make chart`"
        )


def _comparable(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The object as deploy/ would have it: the install namespace back to trainguard-system, no labels
    and no Argo CD sync wave (the chart's own)."""
    out: dict[str, Any] = yaml.safe_load(yaml.safe_dump(obj))
    meta = out["metadata"]
    meta.pop("labels", None)
    annotations = meta.pop("annotations", None) or {}
    annotations.pop("argocd.argoproj.io/sync-wave", None)
    if annotations:
        meta["annotations"] = annotations
    if meta.get("namespace") == namespace:
        meta["namespace"] = DEPLOY_NAMESPACE
    for subject in out.get("subjects") or []:
        if subject.get("namespace") == namespace:
            subject["namespace"] = DEPLOY_NAMESPACE
    for rule in (out.get("spec") or {}).get("rules") or []:
        for subject in rule.get("subjects") or []:
            if (subject.get("serviceAccount") or {}).get("namespace") == namespace:
                subject["serviceAccount"]["namespace"] = DEPLOY_NAMESPACE
    for condition in (out.get("spec") or {}).get("matchConditions") or []:
        condition["expression"] = condition["expression"].replace(
            OPERATOR_USER.format(namespace), OPERATOR_USER.format(DEPLOY_NAMESPACE)
        )
    return out


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    return (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


def _deployed(files: tuple[str, ...]) -> list[dict[str, Any]]:
    return [obj for name in files for obj in objects((REPO / "deploy" / name).read_text())]


@pytest.mark.parametrize("namespace", ["trainguard-system", "gpu-ops"])
def test_helm_renders_exactly_the_rbac_and_policy_of_deploy(helm: str, namespace: str) -> None:
    """The default, self-managed certificates: everything in deploy/, as `kubectl apply` installs it."""
    rendered = [
        d for d in objects(template(helm, namespace=namespace)) if d["kind"] in RBAC_KINDS | POLICY_KINDS
    ]
    got = sorted((_comparable(d, namespace) for d in rendered), key=_key)
    want = sorted((_comparable(d, DEPLOY_NAMESPACE) for d in _deployed(ALL)), key=_key)
    assert got == want
    # the namespaced objects land where the release is, except the node-lease Role, which must be
    # where the Leases are
    where = {(d["kind"], d["metadata"]["name"]): d["metadata"].get("namespace") for d in rendered}
    assert where[("ServiceAccount", "trainguard-operator")] == namespace
    assert where[("Role", "trainguard-operator-key")] == namespace
    assert where[("Role", "trainguard-operator-node-leases")] == "kube-node-lease"
    for binding in (d for d in rendered if d["kind"].endswith("RoleBinding")):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "trainguard-operator", "namespace": namespace}
        ]
    # the policy looks at the release's ServiceAccount, and at it alone
    policy = next(d for d in rendered if d["kind"] == "ValidatingAdmissionPolicy")
    assert [c["expression"] for c in policy["spec"]["matchConditions"]] == [
        f"request.userInfo.username == '{OPERATOR_USER.format(namespace)}'"
    ]
    # the FlowSchema classifies the release's ServiceAccount's requests
    flow = next(d for d in rendered if d["kind"] == "FlowSchema")
    assert [s["serviceAccount"] for r in flow["spec"]["rules"] for s in r["subjects"]] == [
        {"name": "trainguard-operator", "namespace": namespace}
    ]
    for d in rendered:
        assert d["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "trainguard"


def without(*names: str) -> tuple[str, ...]:
    return tuple(name for name in ALL if name not in names)


SOURCES = [
    # (values, extra helm arguments, the deploy/ files rendered)
    ((), (), ALL),
    (("webhook.certificates.source=selfManaged",), (), ALL),
    # the operator applies the webhook configuration but mounts its certificate: no TLS Secret Role
    (
        ("webhook.certificates.source=secret", "webhook.certificates.secretName=tls"),
        (),
        without("rbac-webhook-tls.yaml"),
    ),
    # cert-manager: the chart renders the webhook configuration, the operator runs --no-manage-webhook
    (
        ("webhook.certificates.source=certManager",),
        (),
        without("rbac-webhook-configuration.yaml", "rbac-webhook-tls.yaml"),
    ),
    (
        (),
        ("--api-versions", "cert-manager.io/v1"),
        without("rbac-webhook-configuration.yaml", "rbac-webhook-tls.yaml"),
    ),
    # clusters before 1.30
    (("rbac.secretWritePolicy=false",), (), without("secret-write-policy.yaml")),
    (("rbac.namespaceLabelPolicy=false",), (), without("namespace-label-policy.yaml")),
    (("apiPriority.enabled=false",), (), without("api-priority.yaml")),
    # reports without pod logs (--no-pod-logs)
    (("reports.podLogs=false",), (), without("rbac-pod-logs.yaml")),
]


@pytest.mark.parametrize(("sets", "extra", "files"), SOURCES, ids=lambda v: ",".join(v) or "defaults")
def test_helm_renders_the_deploy_files_the_values_need(
    helm: str, sets: tuple[str, ...], extra: tuple[str, ...], files: tuple[str, ...]
) -> None:
    docs = objects(run_helm(helm, *template_args(*sets, namespace="gpu-ops"), *extra).stdout)
    rendered = [d for d in docs if d["kind"] in RBAC_KINDS | POLICY_KINDS]
    got = sorted((_comparable(d, "gpu-ops") for d in rendered), key=_key)
    want = sorted((_comparable(d, DEPLOY_NAMESPACE) for d in _deployed(files)), key=_key)
    assert got == want


def test_no_rule_uses_a_wildcard(helm: str) -> None:
    for d in objects(template(helm)):
        for rule in d.get("rules") or []:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in (rule.get(field) or []), f"{d['kind']} {d['metadata']['name']}: {rule}"


def test_the_flow_schema_takes_the_priority_level_the_platform_names(helm: str) -> None:
    docs = objects(run_helm(helm, *template_args("apiPriority.priorityLevel=gpu-platform-high")).stdout)
    flow = next(d for d in docs if d["kind"] == "FlowSchema")
    assert flow["spec"]["priorityLevelConfiguration"] == {"name": "gpu-platform-high"}
    assert flow["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1"


def test_a_cluster_without_flowcontrol_v1_gets_the_v1beta3_flow_schema(helm: str) -> None:
    """Kubernetes 1.28, the chart's oldest, serves FlowSchemas as v1beta3 alone."""
    docs = objects(run_helm(helm, *template_args(), "--kube-version", "1.28.0").stdout)
    flow = next(d for d in docs if d["kind"] == "FlowSchema")
    assert flow["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1beta3"
    assert flow["spec"] == objects((REPO / "deploy" / "api-priority.yaml").read_text())[0]["spec"]
