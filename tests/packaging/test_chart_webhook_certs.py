"""The chart's certificate modes: `auto` picks cert-manager where the cluster serves it and the
operator's self-managed Secret elsewhere; self-managed runs the operator with no certificate files,
and the RBAC lets it keep exactly that one Secret."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from tests.packaging.chart import by_kind, objects, one, run_helm, template, template_args
from trainguard.certs.ca import WEBHOOK_CERT_SECRET
from trainguard.cli import build_parser


def operator_args(docs: list[dict[str, Any]]) -> argparse.Namespace:
    (container,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return build_parser().parse_args([*container["command"][1:], *container["args"]])


def test_auto_without_cert_manager_is_self_managed(helm: str) -> None:
    docs = objects(template(helm))
    args = operator_args(docs)
    assert args.self_managed_certs is True
    assert (args.webhook_cert, args.webhook_key, args.webhook_ca) == (None, None, None)
    assert args.no_manage_webhook is False, "the operator applies the webhook configuration"
    assert args.webhook_service == "trainguard-operator:443"
    assert not by_kind(docs, "Certificate") and not by_kind(docs, "MutatingWebhookConfiguration")
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert "tls" not in {v["name"] for v in pod["volumes"]}
    # the operator writes the files its servers load under /tmp, a writable emptyDir
    assert {"name": "tmp", "mountPath": "/tmp"} in pod["containers"][0]["volumeMounts"]


def test_auto_with_cert_manager_uses_it(helm: str) -> None:
    args = template_args()
    docs = objects(run_helm(helm, *args, "--api-versions", "cert-manager.io/v1").stdout)
    assert by_kind(docs, "Certificate") and one(docs, "MutatingWebhookConfiguration")
    parsed = operator_args(docs)
    assert parsed.self_managed_certs is False and parsed.no_manage_webhook is True


def test_lifetimes_reach_the_operator_and_cert_manager_alike(helm: str) -> None:
    sets = ("webhook.certificates.duration=720h", "webhook.certificates.renewBefore=48h",
            "webhook.certificates.caDuration=43800h")  # fmt: skip
    args = operator_args(objects(template(helm, *sets)))
    assert args.cert_duration == 720 * 3600
    assert args.cert_renew_before == 48 * 3600
    assert args.ca_duration == 43800 * 3600
    certs = {
        c["metadata"]["name"]: c["spec"]
        for c in by_kind(
            objects(template(helm, *sets, "webhook.certificates.source=certManager")), "Certificate"
        )
    }
    assert certs["trainguard-operator-ca"]["duration"] == "43800h"
    assert certs["trainguard-operator-tls"]["duration"] == "720h"


def test_the_operator_may_read_and_update_only_its_certificate_secret(helm: str) -> None:
    docs = objects(template(helm, namespace="gpu-ops"))
    roles = [r for r in by_kind(docs, "Role") if r["metadata"]["namespace"] == "gpu-ops"]
    rules = [rule for r in roles for rule in r["rules"] if "secrets" in rule["resources"]]
    named = [rule for rule in rules if WEBHOOK_CERT_SECRET in (rule.get("resourceNames") or [])]
    assert len(named) == 1 and named[0]["resourceNames"] == [WEBHOOK_CERT_SECRET]
    assert sorted(named[0]["verbs"]) == ["get", "update"]
    binding = next(b for b in by_kind(docs, "RoleBinding") if b["roleRef"]["name"] == WEBHOOK_CERT_SECRET)
    assert binding["metadata"]["namespace"] == "gpu-ops"
    assert binding["subjects"][0]["name"] == "trainguard-operator"


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ("webhook.certificates.source=selfSigned", "/webhook/certificates/source"),
        # Go reads 1.5h, the operator's parser does not: only forms both read pass
        ("webhook.certificates.duration=1.5h", "/webhook/certificates/duration"),
        ("webhook.certificates.caDuration=3650d", "/webhook/certificates/caDuration"),
    ],
)
def test_values_the_operator_cannot_read_are_refused(helm: str, value: str, path: str) -> None:
    proc = run_helm(helm, *template_args(value), check=False)
    assert proc.returncode != 0
    assert path in proc.stderr


def _grants(docs: list[dict[str, Any]], resource: str, name: str | None = None) -> set[str]:
    """The verbs the chart's Roles and ClusterRoles grant on `resource` (by `name`, or unnamed)."""
    return {
        verb
        for role in [*by_kind(docs, "ClusterRole"), *by_kind(docs, "Role")]
        for rule in role["rules"]
        if resource in rule["resources"] and (name is None or name in (rule.get("resourceNames") or [name]))
        for verb in rule["verbs"]
    }


@pytest.mark.parametrize(
    ("sets", "extra"),
    [
        ((), ()),
        (("webhook.certificates.source=secret", "webhook.certificates.secretName=tls"), ()),
        (("webhook.certificates.source=certManager",), ()),
        ((), ("--api-versions", "cert-manager.io/v1")),
    ],
    ids=["selfManaged", "secret", "certManager", "auto-with-cert-manager"],
)
def test_the_rbac_is_what_the_operators_flags_need(
    helm: str, sets: tuple[str, ...], extra: tuple[str, ...]
) -> None:
    """The operator applies the webhook configuration unless --no-manage-webhook, and reads and rotates
    its certificate Secret only with --self-managed-certs: the RBAC grants each only then."""
    docs = objects(run_helm(helm, *template_args(*sets), *extra).stdout)
    args = operator_args(docs)
    webhook = _grants(docs, "mutatingwebhookconfigurations", "trainguard-sidecar-injector")
    assert webhook == (set() if args.no_manage_webhook else {"create", "get", "patch"})
    gate = _grants(docs, "validatingwebhookconfigurations", "trainguard-eviction-gate")
    assert gate == (set() if args.no_manage_webhook else {"create", "get", "patch"})
    tls = {
        verb
        for role in by_kind(docs, "Role")
        for rule in role["rules"]
        if WEBHOOK_CERT_SECRET in (rule.get("resourceNames") or [])
        for verb in rule["verbs"]
    }
    assert tls == ({"get", "update"} if args.self_managed_certs else set())
    # mounted certificates (cert-manager's or the Secret named): the only Secret it reads is its key
    read = sorted(
        name
        for role in [*by_kind(docs, "ClusterRole"), *by_kind(docs, "Role")]
        for rule in role["rules"]
        if "secrets" in rule["resources"] and "get" in rule["verbs"]
        for name in rule.get("resourceNames") or ["*"]
    )
    assert read == sorted(
        ["trainguard-receiver-key", *([WEBHOOK_CERT_SECRET] if args.self_managed_certs else [])]
    )
