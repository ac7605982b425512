"""The chart carries copies of crds/, deploy/peering-crd.yaml and deploy/rbac.yaml (`make chart`
writes them): the copies must be byte-identical, and what helm renders from the RBAC copy must be
the very objects of deploy/rbac.yaml, in whatever namespace the chart is installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.packaging.chart import CHART, REPO, objects, template

RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
DEPLOY_NAMESPACE = "trainguard-system"


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


def test_the_chart_rbac_is_deploy_rbac() -> None:
    copy = CHART / "files" / "rbac.yaml"
    source = REPO / "deploy" / "rbac.yaml"
    assert copy.exists(), "charts/trainguard/files/rbac.yaml is missing: run `make chart`"
    assert copy.read_bytes() == source.read_bytes(), (
        "charts/trainguard/files/rbac.yaml differs from deploy/rbac.yaml: run `make chart`"
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
    return out


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    return (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


@pytest.mark.parametrize("namespace", ["trainguard-system", "gpu-ops"])
def test_helm_renders_exactly_the_rbac_of_deploy(helm: str, namespace: str) -> None:
    rendered = [d for d in objects(template(helm, namespace=namespace)) if d["kind"] in RBAC_KINDS]
    deployed = objects((REPO / "deploy" / "rbac.yaml").read_text())
    got = sorted((_comparable(d, namespace) for d in rendered), key=_key)
    want = sorted((_comparable(d, DEPLOY_NAMESPACE) for d in deployed), key=_key)
    assert got == want
    # the namespaced objects land where the release is, except the node-lease Role, which must be
    # where the Leases are
    where = {(d["kind"], d["metadata"]["name"]): d["metadata"].get("namespace") for d in rendered}
    assert where[("ServiceAccount", "trainguard-operator")] == namespace
    assert where[("Role", "trainguard-operator-key")] == namespace
    assert where[("Role", "trainguard-operator-node-leases")] == "kube-node-lease"
    for binding in (d for d in rendered if d["kind"].endswith("Binding")):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "trainguard-operator", "namespace": namespace}
        ]
    for d in rendered:
        assert d["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "trainguard"


def test_no_rule_uses_a_wildcard(helm: str) -> None:
    for d in objects(template(helm)):
        for rule in d.get("rules") or []:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in (rule.get(field) or []), f"{d['kind']} {d['metadata']['name']}: {rule}"
