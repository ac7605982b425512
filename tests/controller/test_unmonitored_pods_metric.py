"""Pods a monitor selects that run without the exporter, on the operator's metrics: the apiserver's
fail-open (a webhook call that timed out) leaves no injection failure on the operator's side, only
status.podsUnmonitored, which the leader exports per job."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from trainguard.controller.metrics import OperatorMetrics


def monitor(name: str, unmonitored: int | None) -> dict[str, Any]:
    status = {} if unmonitored is None else {"podsMonitored": 8 - unmonitored, "podsUnmonitored": unmonitored}
    return {"metadata": {"namespace": "ml", "name": name}, "status": status}


def test_each_job_exports_its_pods_without_the_exporter_and_only_from_the_leader() -> None:
    leading = [True]
    bodies = [monitor("llama", 7), monitor("gpt", 0), monitor("new", None)]
    metrics = OperatorMetrics(CollectorRegistry(), leader=lambda: leading[0], monitors=lambda: bodies)
    got = metrics.registry.get_sample_value
    name = "trainguard_operator_pods_unmonitored"
    assert got(name, {"namespace": "ml", "training_job": "llama"}) == 7
    assert got(name, {"namespace": "ml", "training_job": "gpt"}) == 0
    assert got(name, {"namespace": "ml", "training_job": "new"}) == 0, "not counted yet reads as none"
    leading[0] = False
    assert got(name, {"namespace": "ml", "training_job": "llama"}) is None, "a standby exports nothing"


def test_a_cache_not_synced_costs_one_scrape_of_it_and_nothing_else() -> None:
    def monitors() -> list[dict[str, Any]]:
        raise TimeoutError("monitors not synced")

    metrics = OperatorMetrics(CollectorRegistry(), leader=lambda: True, monitors=monitors)
    assert metrics.registry.get_sample_value("trainguard_operator_pods_unmonitored", {}) is None
    assert (
        metrics.registry.get_sample_value("trainguard_operator_reconcile_total", {"result": "success"}) == 0
    )
