"""How the e2e harness turns a controller module's kustomize folders into what it applies
(e2e/controlplane/controllers.py): the patches of the webhook folder, the webhooks called by URL, the
CRDs that convert through a webhook. The folders here are small copies of the modules' own shapes."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from e2e.controlplane.controllers import Spec, crds, json6902, kustomize, pointed_at

CONFIG = """\
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- name: mjob.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}
- name: mpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- name: vpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate--v1-pod}}
---
apiVersion: v1
kind: Service
metadata: {name: webhook-service}
"""

SELECTOR = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}


def folder(tmp_path: Path, patches: list[dict[str, object]], files: dict[str, object]) -> Path:
    (tmp_path / "manifests.yaml").write_text(CONFIG)
    for name, body in files.items():
        (tmp_path / name).write_text(yaml.safe_dump(body))
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": ["manifests.yaml"], "patches": patches})
    )
    return tmp_path


def test_json_patches_apply_to_their_target_only(tmp_path: Path) -> None:
    """JobSet's shape: a JSON 6902 patch file per configuration, chosen by kind and name."""
    op = {"op": "add", "path": "/webhooks/1/objectSelector", "value": SELECTOR}
    d = folder(
        tmp_path,
        [
            {
                "path": "p.yaml",
                "target": {"kind": "MutatingWebhookConfiguration", "name": "mutating-webhook-configuration"},
            }
        ],
        {"p.yaml": [op]},
    )
    mutating, validating = kustomize(d)
    assert mutating["webhooks"][1]["objectSelector"] == SELECTOR
    assert "objectSelector" not in mutating["webhooks"][0]
    assert "objectSelector" not in validating["webhooks"][0]  # the Service is left out too: two documents


def test_strategic_patches_merge_webhooks_by_name(tmp_path: Path) -> None:
    """Kueue's shape: inline strategic merge patches naming the configuration and the webhooks."""
    ns = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
        ]
    }
    patch = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
             "metadata": {"name": "validating-webhook-configuration"},
             "webhooks": [{"name": "vpod.kb.io", "namespaceSelector": ns}]}  # fmt: skip
    mutating, validating = kustomize(folder(tmp_path, [{"patch": yaml.safe_dump(patch)}], {}))
    assert validating["webhooks"][0]["namespaceSelector"] == ns
    assert validating["webhooks"][0]["clientConfig"]["service"]["path"] == "/validate--v1-pod"  # merged, kept
    assert all("namespaceSelector" not in w for w in mutating["webhooks"])


def test_an_unknown_json_patch_op_is_refused() -> None:
    with pytest.raises(ValueError, match="'move' at /webhooks/0"):
        json6902({"webhooks": [{}]}, [{"op": "move", "path": "/webhooks/0", "from": "/x"}])


def test_webhooks_are_called_by_url_with_the_ca(tmp_path: Path) -> None:
    configs = pointed_at(kustomize(folder(tmp_path, [], {})), "jobset", "https://127.0.0.1:9443", b"CA")
    assert [c["metadata"]["name"] for c in configs] == [
        "jobset-mutating-webhook-configuration",
        "jobset-validating-webhook-configuration",
    ]
    hook = configs[0]["webhooks"][1]["clientConfig"]
    assert hook == {
        "url": "https://127.0.0.1:9443/mutate--v1-pod",
        "caBundle": base64.b64encode(b"CA").decode(),
    }
    kept = pointed_at(kustomize(folder(tmp_path, [], {})), None, "https://127.0.0.1:1", b"CA")
    assert kept[0]["metadata"]["name"] == "mutating-webhook-configuration"


def crd(name: str, versions: list[str]) -> dict[str, object]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": name},
            "spec": {"versions": [{"name": v} for v in versions]}}  # fmt: skip


def test_crds_named_by_a_conversion_patch_convert_through_the_webhook(tmp_path: Path) -> None:
    (tmp_path / "bases").mkdir()
    (tmp_path / "patches").mkdir()
    for name, versions in (("workloads.kueue.x-k8s.io", ["v1beta1", "v1beta2"]),
                           ("topologies.kueue.x-k8s.io", ["v1beta1", "v1beta2"]),
                           ("jobsets.jobset.x-k8s.io", ["v1alpha2"])):  # fmt: skip
        (tmp_path / "bases" / f"{name}.yaml").write_text(yaml.safe_dump(crd(name, versions)))
    for name in ("workloads.kueue.x-k8s.io", "jobsets.jobset.x-k8s.io"):
        patch = {"metadata": {"name": name}, "spec": {"conversion": {"strategy": "Webhook", "webhook": {
            "clientConfig": {"service": {"name": "webhook-service", "path": "/convert"}}}}}}  # fmt: skip
        (tmp_path / "patches" / f"webhook_in_{name.split('.')[0]}.yaml").write_text(yaml.safe_dump(patch))
    spec = Spec("kueue", "bases", "webhook", lambda *_: pytest.fail("not started"), crd_patches="patches")
    out = {
        c["metadata"]["name"]: c["spec"].get("conversion") for c in crds(spec, tmp_path, "https://h:1", b"CA")
    }
    assert out["workloads.kueue.x-k8s.io"]["webhook"]["clientConfig"]["url"] == "https://h:1/convert"
    assert out["topologies.kueue.x-k8s.io"] is None  # no patch: the apiserver's own (None) conversion
    assert out["jobsets.jobset.x-k8s.io"] is None  # one version: nothing to convert
