"""The operator's own /metrics against a real kube-apiserver: after a monitor is reconciled and a
training pod is admitted through the webhook, a scrape answers with every trainguard_operator_*
family and counts them."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.cluster import Cluster, wait_for
from e2e.controlplane.local import free_port
from e2e.test_operator import quickstart, ready

pytestmark = pytest.mark.e2e
OPERATOR = "metrics"
FAMILIES = {
    "trainguard_operator_reconcile",
    "trainguard_operator_reconcile_errors",
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
    had = bool(cluster.operators)
    cluster.stop_all_operators()
    port = free_port()
    cluster.start_operator(priority=200, name=OPERATOR, extra=("--metrics-addr", f"127.0.0.1:{port}"))
    try:
        yield port
    finally:
        cluster.stop_all_operators()
        if had:
            cluster.start_operator(priority=100, keep_ports=True)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.status == 200
        assert resp.headers.get_content_type() == "text/plain"
        families = list(text_string_to_metric_families(resp.read().decode()))
    assert {f.name for f in families} >= FAMILIES
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_metrics_count_a_reconcile_and_an_admission(cluster: Cluster, metrics_port: int, ns: str) -> None:
    cluster.apply(quickstart(ns))
    wait_for("monitor Ready", lambda: ready(cluster, ns), timeout=60)
    # a reconcile is counted, then its duration observed: a scrape can fall between the two
    reconciled = wait_for(
        "a successful reconcile counted and timed",
        lambda: (
            (s := scrape(metrics_port))
            and s[("trainguard_operator_reconcile_total", (("result", "success"),))] >= 1
            and s[("trainguard_operator_reconcile_duration_seconds_count", ())] >= 1
            and s
        ),
    )
    assert reconciled[("trainguard_operator_leader", ())] == 1
    assert reconciled[("trainguard_operator_reconcile_errors_total", ())] == 0

    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "trainer-0", "namespace": ns, "labels": {"app": "llama-pretrain"}},
                           "spec": {"containers": [{"name": "trainer", "image": "registry.invalid/trainer:1"}]}}  # fmt: skip
    cluster.apply([pod])
    admitted = cluster.core.read_namespaced_pod("trainer-0", ns)
    assert "trainguard.io/injected" in (admitted.metadata.annotations or {}), "the webhook injected it"
    after = scrape(metrics_port)
    assert after[("trainguard_operator_webhook_duration_seconds_count", ())] >= 1
    assert after[("trainguard_operator_injection_failures_total", ())] == 0
