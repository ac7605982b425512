"""The operator's own /metrics against a real kube-apiserver: after a monitor is reconciled and a
training pod is admitted through the webhook, a scrape answers with every trainguard_operator_*
family and counts them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.cluster import Cluster
from e2e.monitors import quickstart, ready
from tests.exposition import Samples, metric_families, samples_of, value
from tests.processes import free_port, wait_for

pytestmark = pytest.mark.e2e
OPERATOR = "metrics"
FAMILIES = {
    "trainguard_operator_reconcile",
    "trainguard_operator_reconcile_errors",
    "trainguard_operator_resyncs",
    "trainguard_operator_remediation_first_holds",
    "trainguard_operator_remediation_first_wait_seconds",
    "trainguard_operator_reconcile_duration_seconds",
    "trainguard_operator_remediation_steps",
    "trainguard_operator_signals_received",
    "trainguard_operator_webhook_duration_seconds",
    "trainguard_operator_injection_failures",
    "trainguard_operator_leader",
}


@pytest.fixture(scope="module")
def metrics_port(cluster: Cluster) -> Iterator[int]:
    """An operator whose metrics are on a port of this test's own; the session's operator steps aside
    (it would lead) and comes back."""
    with cluster.operators_aside():
        port = free_port()
        cluster.start_operator(priority=200, name=OPERATOR, extra=("--metrics-addr", f"127.0.0.1:{port}"))
        yield port


def operator_samples(port: int) -> Samples:
    families = metric_families(f"http://127.0.0.1:{port}")
    assert set(families) >= FAMILIES
    return samples_of(families.values())


def test_metrics_count_a_reconcile_and_an_admission(cluster: Cluster, metrics_port: int, ns: str) -> None:
    cluster.apply(quickstart(ns))
    wait_for("monitor Ready", lambda: ready(cluster, ns), timeout=60)
    # a reconcile is counted, then its duration observed: a scrape can fall between the two
    reconciled = wait_for(
        "a successful reconcile counted and timed",
        lambda: (
            (s := operator_samples(metrics_port))
            and (value(s, "trainguard_operator_reconcile_total", result="success") or 0) >= 1
            and (value(s, "trainguard_operator_reconcile_duration_seconds_count") or 0) >= 1
            and s
        ),
    )
    assert value(reconciled, "trainguard_operator_leader") == 1
    assert value(reconciled, "trainguard_operator_reconcile_errors_total") == 0

    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "trainer-0", "namespace": ns, "labels": {"app": "llama-pretrain"}},
                           "spec": {"containers": [{"name": "trainer", "image": "registry.invalid/trainer:1"}]}}  # fmt: skip
    cluster.apply([pod])
    admitted = cluster.core.read_namespaced_pod("trainer-0", ns)
    assert "trainguard.io/injected" in (admitted.metadata.annotations or {}), "the webhook injected it"
    after = operator_samples(metrics_port)
    assert (value(after, "trainguard_operator_webhook_duration_seconds_count") or 0) >= 1
    assert value(after, "trainguard_operator_injection_failures_total") == 0
