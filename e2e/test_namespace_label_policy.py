"""deploy/namespace-label-policy.yaml on the real apiserver, where every e2e test runs under it (the
cluster installs it with the RBAC): the operator's ServiceAccount, which RBAC lets patch namespaces (to
keep trainguard.io/monitored, the sidecar-injection webhook's namespaceSelector, on the namespaces that
hold a monitor), may change a namespace in that label alone, to "true" or away; not its Pod Security
labels, its other labels or its annotations. Its requests go through the operator's own write path
(kube.Kube.label_namespace); anyone else's are not looked at. e2e/test_operator.py runs the operator's
real labelling under it."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from kubernetes import config
from kubernetes.client.exceptions import ApiException

from e2e.cluster import Cluster
from tests.processes import wait_for
from trainguard.catalog.kubernetes import MONITORED
from trainguard.kube import Kube

pytestmark = pytest.mark.e2e

POLICY = "trainguard-operator-namespace-labels"
PSA = "pod-security.kubernetes.io/enforce"


def refusal(call: Callable[[], object]) -> str:
    """The apiserver's message for a request the policy denies."""
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 403, err.value.body
    message = str(json.loads(err.value.body)["message"])
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in message, message
    return message


@pytest.fixture(scope="module")
def operator_kube(cluster: Cluster) -> Kube:
    """The operator's edge, authenticated as its ServiceAccount. Returned once the policy is in force:
    the apiserver loads and type-checks a new policy in the background, so a dry-run patch of another
    label is repeated until it is denied."""
    kube = Kube(config.new_client_from_config(str(cluster.operator_kubeconfig())))
    probe = cluster.namespace("e2e-namespace-label-probe")

    def in_force() -> bool:
        try:
            kube.core.patch_namespace(probe, {"metadata": {"labels": {"probe": "x"}}}, dry_run="All")
        except ApiException as exc:
            if exc.status == 403 and POLICY in str(exc.body):
                return True
            raise
        return False

    wait_for("the namespace-label policy in force", in_force, timeout=60)
    return kube


def labels(cluster: Cluster, ns: str) -> dict[str, str]:
    return dict(cluster.core.read_namespace(ns).metadata.labels or {})


def test_the_operator_sets_and_removes_its_label(operator_kube: Kube, cluster: Cluster, ns: str) -> None:
    assert operator_kube.label_namespace(ns, {MONITORED: "true"})
    assert labels(cluster, ns)[MONITORED] == "true"
    assert operator_kube.label_namespace(ns, {MONITORED: "true"}), "again: a patch that changes nothing"
    assert operator_kube.label_namespace(ns, {MONITORED: None})
    assert MONITORED not in labels(cluster, ns)
    assert operator_kube.label_namespace("e2e-no-such-namespace", {MONITORED: "true"}) is False


def test_the_operator_may_not_relax_pod_security_or_touch_other_labels(
    operator_kube: Kube, cluster: Cluster, ns: str
) -> None:
    cluster.core.patch_namespace(ns, {"metadata": {"labels": {PSA: "restricted", "team": "a"}}})
    for change in ({PSA: "privileged"}, {PSA: None}, {"team": "b"}, {"new": "x"}):
        message = refusal(
            lambda change=change: operator_kube.label_namespace(ns, {MONITORED: "true", **change})
        )
        assert f"this update of namespace {ns} changes its other labels" in message, message
    message = refusal(lambda: operator_kube.label_namespace(ns, {MONITORED: "false"}))
    assert 'changes that label to a value other than "true"' in message, message
    found = labels(cluster, ns)
    assert (found[PSA], found["team"], MONITORED in found) == ("restricted", "a", False)


def test_the_operator_may_not_change_annotations_or_finalizers(
    operator_kube: Kube, cluster: Cluster, ns: str
) -> None:
    for patch in (
        {"metadata": {"annotations": {"scheduler.alpha.kubernetes.io/node-selector": "pool=gpu"}}},
        {"metadata": {"finalizers": ["example.com/hold"]}},
    ):
        message = refusal(lambda patch=patch: operator_kube.core.patch_namespace(ns, patch))
        assert "changes its annotations, finalizers, owners or spec" in message, message
    assert not (cluster.core.read_namespace(ns).metadata.annotations or {}).get(
        "scheduler.alpha.kubernetes.io/node-selector"
    )


def test_anyone_else_is_not_looked_at(cluster: Cluster, ns: str) -> None:
    cluster.core.patch_namespace(ns, {"metadata": {"labels": {MONITORED: "maybe", PSA: "baseline"}}})
    assert labels(cluster, ns)[MONITORED] == "maybe"
