"""deploy/secret-write-policy.yaml on the real apiserver, where every e2e test runs under it (the
cluster installs it with the RBAC): the operator's ServiceAccount, which RBAC lets create and patch
Secrets in every namespace, may write only Secrets labelled app.kubernetes.io/managed-by=trainguard,
and update only those that carried the label before, so it cannot take over a tenant's Secret. Its
requests go through the operator's own write paths (kube.Kube); anyone else's are not looked at.
e2e/test_operator.py and e2e/test_webhook_certs.py run the operator's real Secret writes under it."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import config
from kubernetes.client.exceptions import ApiException

from e2e.cluster import OPERATOR_NS, Cluster
from tests.processes import wait_for
from trainguard.catalog.kubernetes import MANAGED_BY, MANAGED_BY_VALUE
from trainguard.certs.ca import WEBHOOK_CERT_SECRET
from trainguard.kube import Kube

pytestmark = pytest.mark.e2e

LABEL = f"{MANAGED_BY}={MANAGED_BY_VALUE}"


def secret(ns: str, name: str, labelled: bool, value: str = "v") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if labelled:
        meta["labels"] = {MANAGED_BY: MANAGED_BY_VALUE}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "stringData": {"k": value},
    }


def refusal(call: Callable[[], object]) -> str:
    """The apiserver's message for a request the policy denies."""
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 403, err.value.body
    message = str(json.loads(err.value.body)["message"])
    assert "ValidatingAdmissionPolicy 'trainguard-operator-secret-writes'" in message, message
    return message


@pytest.fixture(scope="module")
def operator_kube(cluster: Cluster) -> Kube:
    """The operator's edge, authenticated as its ServiceAccount (a token of its own). Returned once the
    policy is in force: the apiserver loads and type-checks a new policy in the background, so a
    dry-run create of an unlabelled Secret (admitted, never stored) is repeated until it is denied."""
    kube = Kube(config.new_client_from_config(str(cluster.operator_kubeconfig())))

    def in_force() -> bool:
        try:
            kube.core.create_namespaced_secret(
                OPERATOR_NS, secret(OPERATOR_NS, "probe", False), dry_run="All"
            )
        except ApiException as exc:
            if exc.status == 403 and "trainguard-operator-secret-writes" in str(exc.body):
                return True
            raise
        return False

    wait_for("the Secret-write policy in force", in_force, timeout=60)
    return kube


def data(cluster: Cluster, ns: str, name: str) -> tuple[dict[str, str], dict[str, str]]:
    """(decoded data, labels) as the admin reads them."""
    s = cluster.core.read_namespaced_secret(name, ns)
    return {k: base64.b64decode(v).decode() for k, v in (s.data or {}).items()}, s.metadata.labels or {}


def absent(cluster: Cluster, ns: str, name: str) -> bool:
    try:
        cluster.core.read_namespaced_secret(name, ns)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def test_the_operator_may_not_create_an_unlabelled_secret(
    operator_kube: Kube, cluster: Cluster, ns: str
) -> None:
    message = refusal(lambda: operator_kube.apply(secret(ns, "plain", labelled=False)))
    assert f"may write only Secrets labelled {LABEL}" in message, message
    assert f"CREATE of Secret {ns}/plain without that label is refused" in message, message
    assert absent(cluster, ns, "plain")
    # the plain create call too, not only server-side apply
    refusal(lambda: operator_kube.core.create_namespaced_secret(ns, secret(ns, "plain", labelled=False)))
    assert absent(cluster, ns, "plain")


def test_the_operator_creates_and_updates_its_labelled_secrets(
    operator_kube: Kube, cluster: Cluster, ns: str
) -> None:
    operator_kube.apply(secret(ns, "trainguard-job-fastpath", labelled=True, value="one"))
    operator_kube.apply(secret(ns, "trainguard-job-fastpath", labelled=True, value="two"))
    values, labels = data(cluster, ns, "trainguard-job-fastpath")
    assert values == {"k": "two"} and labels[MANAGED_BY] == MANAGED_BY_VALUE
    # nor may it drop the label from its own Secret (and then write it as it likes)
    message = refusal(
        lambda: operator_kube.core.patch_namespaced_secret(
            "trainguard-job-fastpath", ns, {"metadata": {"labels": {MANAGED_BY: None}}}
        )
    )
    assert f"UPDATE of Secret {ns}/trainguard-job-fastpath without that label is refused" in message, message


def test_the_operator_cannot_take_over_a_tenants_secret_by_labelling_it(
    operator_kube: Kube, cluster: Cluster, ns: str
) -> None:
    """A tenant's own Secret under the name the operator would write (its monitor's fast-path Secret):
    the operator's apply, which adds the label, is refused, and the Secret stays the tenant's."""
    cluster.core.create_namespaced_secret(
        ns, secret(ns, "trainguard-job-fastpath", labelled=False, value="tenant")
    )
    message = refusal(
        lambda: operator_kube.apply(secret(ns, "trainguard-job-fastpath", labelled=True, value="op"))
    )
    assert "may update only Secrets it wrote" in message, message
    assert f"Secret {ns}/trainguard-job-fastpath was not labelled {LABEL} before this update" in message, (
        message
    )
    refusal(
        lambda: operator_kube.core.patch_namespaced_secret(
            "trainguard-job-fastpath", ns, {"metadata": {"labels": {MANAGED_BY: MANAGED_BY_VALUE}}}
        )
    )
    values, labels = data(cluster, ns, "trainguard-job-fastpath")
    assert values == {"k": "tenant"} and MANAGED_BY not in labels


def test_the_webhook_tls_secret_written_before_the_label_stays_the_operators(
    operator_kube: Kube, cluster: Cluster, ns: str
) -> None:
    """Releases before the label wrote trainguard-operator-webhook-tls without it: the leader still
    rotates it (an update by name, in the operator's namespace only), and the update labels it."""
    try:
        cluster.core.delete_namespaced_secret(WEBHOOK_CERT_SECRET, OPERATOR_NS)
    except ApiException as exc:
        if exc.status != 404:
            raise
    old = secret(OPERATOR_NS, WEBHOOK_CERT_SECRET, labelled=False, value="old")
    old["metadata"]["labels"] = {"app.kubernetes.io/part-of": "trainguard"}
    cluster.core.create_namespaced_secret(OPERATOR_NS, old)
    try:
        found = operator_kube.read_secret(OPERATOR_NS, WEBHOOK_CERT_SECRET)
        assert found is not None
        new = secret(OPERATOR_NS, WEBHOOK_CERT_SECRET, labelled=True, value="rotated")
        new["metadata"]["resourceVersion"] = found[1]
        assert operator_kube.write_secret(new)
        values, labels = data(cluster, OPERATOR_NS, WEBHOOK_CERT_SECRET)
        assert values == {"k": "rotated"} and labels[MANAGED_BY] == MANAGED_BY_VALUE
    finally:
        cluster.core.delete_namespaced_secret(WEBHOOK_CERT_SECRET, OPERATOR_NS)
    # the same name in a tenant's namespace is no exception
    cluster.core.create_namespaced_secret(ns, secret(ns, WEBHOOK_CERT_SECRET, labelled=False, value="tenant"))
    refusal(lambda: operator_kube.apply(secret(ns, WEBHOOK_CERT_SECRET, labelled=True)))
    assert data(cluster, ns, WEBHOOK_CERT_SECRET)[0] == {"k": "tenant"}


def test_anyone_else_is_not_looked_at(operator_kube: Kube, cluster: Cluster, ns: str) -> None:
    """The admin (and any user but the operator's ServiceAccount) writes unlabelled Secrets as before."""
    cluster.core.create_namespaced_secret(ns, secret(ns, "plain", labelled=False, value="a"))
    cluster.core.patch_namespaced_secret("plain", ns, {"stringData": {"k": "b"}})
    cluster.core.patch_namespaced_secret(
        "plain", ns, {"metadata": {"labels": {MANAGED_BY: MANAGED_BY_VALUE}}}
    )
    cluster.core.patch_namespaced_secret("plain", ns, {"metadata": {"labels": {MANAGED_BY: None}}})
    assert data(cluster, ns, "plain") == ({"k": "b"}, {})
