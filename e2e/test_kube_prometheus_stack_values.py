"""The chart's kube-prometheus-stack values (`longTermStorage.remoteWrite`), read by their real reader:
kube-prometheus-stack copies `prometheus.prometheusSpec.remoteWrite` into its `Prometheus` object's
`spec.remoteWrite`, and the apiserver checks that object against prometheus-operator's CRD (generated
at the pinned version). A structural schema prunes a field it does not know, silently
by default: applied here with `fieldValidation=Strict`, a misspelt field is refused instead, and what is
read back must be what was sent, so the keep-list cannot vanish on the way.

The object is checked here, not the prometheus.yml it becomes; the pipeline tests run the real
prometheus-operator (e2e/prometheus_operator.py)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kubernetes.dynamic.exceptions import DynamicApiError

from e2e.cluster import Cluster
from tests.packaging.chart import find_helm
from tests.packaging.remote_write import EVENTS_URL, URL, remote_write_configmap, remote_write_settings
from trainguard.render.longterm import keep_regex

pytestmark = pytest.mark.e2e


def values_from_the_chart() -> dict[str, Any]:
    helm = find_helm()
    if helm is None:
        pytest.fail("helm is not built: `make helm` builds it from its Go module")
    cm = remote_write_configmap(helm, *remote_write_settings(URL, EVENTS_URL))
    values: dict[str, Any] = yaml.safe_load(cm["data"]["kube-prometheus-stack-values.yaml"])
    return values


def prometheus_object(ns: str, remote_write: list[dict[str, Any]]) -> dict[str, Any]:
    """What kube-prometheus-stack renders from those values (its templates/prometheus/prometheus.yaml)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": "kube-prometheus-stack-prometheus", "namespace": ns},
        "spec": {"retention": "7d", "remoteWrite": remote_write},
    }


def apply_strict(cluster: Cluster, obj: dict[str, Any]) -> dict[str, Any]:
    resource = cluster.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    got = cluster.dynamic.server_side_apply(
        resource, body=obj, name=obj["metadata"]["name"], namespace=obj["metadata"]["namespace"],
        field_manager="e2e", force_conflicts=True, query_params=[("fieldValidation", "Strict")],
    )  # fmt: skip
    out: dict[str, Any] = got.to_dict()
    return out


def test_the_remote_write_values_are_a_prometheus_objects_and_nothing_is_pruned(
    cluster: Cluster, ns: str
) -> None:
    values = values_from_the_chart()
    remote_write = values["prometheus"]["prometheusSpec"]["remoteWrite"]
    assert [e["url"] for e in remote_write] == [URL, EVENTS_URL]
    # kube-prometheus-stack passes the list through `tpl`: a template action in it would be evaluated
    assert "{{" not in yaml.safe_dump(remote_write)

    stored = apply_strict(cluster, prometheus_object(ns, remote_write))
    back = stored["spec"]["remoteWrite"]
    assert len(back) == len(remote_write)
    for sent, kept in zip(remote_write, back, strict=True):
        assert {k: kept.get(k) for k in sent} == sent, f"the apiserver changed or pruned:\n{sent}\n{kept}"
    # the aggregates to one store, the alert history to the other, each behind its keep-list
    (aggregates, events) = ([r for r in e["writeRelabelConfigs"] if r["action"] == "keep"] for e in back)
    assert [r["regex"] for r in events] == ["ALERTS|ALERTS_FOR_STATE"]
    (kept,) = aggregates
    assert set(kept["regex"].split("|")) == set(keep_regex().split("|")) - {"ALERTS", "ALERTS_FOR_STATE"}


def test_a_misspelt_field_is_refused_not_pruned(cluster: Cluster, ns: str) -> None:
    """The check above can fail: prometheus.yml's snake_case name is not the object's field."""
    entry = {"url": URL, "write_relabel_configs": [{"source_labels": ["__name__"], "regex": "ALERTS",
                                                    "action": "keep"}]}  # fmt: skip
    with pytest.raises(DynamicApiError) as refused:
        apply_strict(cluster, prometheus_object(ns, [entry]))
    # server-side apply refuses it while building the typed patch (a 500 with this apiserver), a strict
    # create or update with a 422: either way it names the field and nothing is stored
    assert ".spec.remoteWrite[0].write_relabel_configs" in str(refused.value.body), refused.value.body
    assert (
        cluster.get("monitoring.coreos.com/v1", "Prometheus", ns, "kube-prometheus-stack-prometheus") is None
    )
