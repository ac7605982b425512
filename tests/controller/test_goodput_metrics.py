"""The goodput families on the operator's /metrics: read from the monitors at each scrape (the records
keep the numbers), exported by the leader only, with the catalogue's help; scraped over HTTP and read
back with prometheus_client's parser."""

from __future__ import annotations

import json
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from tests.exposition import metric_families, parse
from trainguard.catalog.metrics import GOODPUT_METRICS
from trainguard.controller.metrics import GoodputCollector, OperatorMetrics, serve
from trainguard.remediation.goodput import LAG_S
from trainguard.times import rfc3339

T0 = 1_700_000_000.0


def monitor(name: str, *records: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "ml", "name": name, "creationTimestamp": rfc3339(T0)},
            "status": {"remediations": list(records)}}  # fmt: skip


def restart(created: float, updated: float, resume_ts: float | None) -> dict[str, Any]:
    pointer = json.dumps({"step": 10, "ts": resume_ts}) if resume_ts else "null"
    return {"id": f"r{created}", "phase": "Succeeded", "created": rfc3339(created), "updated": rfc3339(updated),
            "steps": [{"kind": "Pause", "phase": "Succeeded"},
                      {"kind": "RestartGang", "phase": "Succeeded", "progress": {"resumeFrom": pointer}}]}  # fmt: skip


def test_each_jobs_goodput_is_scraped_with_the_catalogues_help() -> None:
    bodies = [monitor("llm", restart(T0 + 1600, T0 + 1700, T0 + 1000)), monitor("quiet")]
    registry = CollectorRegistry()
    registry.register(GoodputCollector(lambda: bodies, lambda: True, clock=lambda: T0 + 5000 + LAG_S))
    server = serve("127.0.0.1:0", registry)
    assert server is not None
    try:
        families = metric_families(f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
    help_of = {m.name.removesuffix("_total"): m.help for m in GOODPUT_METRICS}
    for name, text in help_of.items():
        assert families[name].documentation == text
    lost = {(s.labels["training_job"], s.labels["cause"]): s.value
            for s in families["trainguard_job_lost_seconds"].samples if s.name.endswith("_total")}  # fmt: skip
    assert lost == {("llm", "restart"): 100, ("llm", "maintenance"): 0, ("llm", "redone_work"): 600,
                    ("quiet", "restart"): 0, ("quiet", "maintenance"): 0, ("quiet", "redone_work"): 0}  # fmt: skip
    productive = {s.labels["training_job"]: s.value for s in families["trainguard_job_productive_seconds"].samples
                  if s.name.endswith("_total")}  # fmt: skip
    assert productive == {"llm": 4300, "quiet": 5000}
    ettr = {s.labels["training_job"]: s.value for s in families["trainguard_job_ettr_ratio"].samples}
    assert ettr == {"llm": 0.86, "quiet": 1.0}
    assert families["trainguard_job_lost_seconds"].type == "counter"


def test_only_the_leader_exports_goodput_and_a_cache_not_synced_costs_one_scrape() -> None:
    leading = [False]
    registry = CollectorRegistry()

    def monitors() -> list[dict[str, Any]]:
        if not synced[0]:
            raise TimeoutError("monitors not synced")
        return [monitor("llm")]

    synced = [False]
    registry.register(GoodputCollector(monitors, lambda: leading[0], clock=lambda: T0 + 100))
    assert "trainguard_job_productive_seconds_total" not in parse(generate_latest(registry).decode())
    leading[0] = True
    assert "trainguard_job_productive_seconds_total" not in parse(generate_latest(registry).decode())
    synced[0] = True
    got = parse(generate_latest(registry).decode())
    assert got["trainguard_job_productive_seconds_total"] == [
        ({"namespace": "ml", "training_job": "llm"}, 100 - LAG_S)
    ]


def test_the_operators_registry_holds_goodput_when_given_the_monitors() -> None:
    metrics = OperatorMetrics(CollectorRegistry(), leader=lambda: True, monitors=lambda: [monitor("llm")])
    labels = {"namespace": "ml", "training_job": "llm", "cause": "restart"}
    assert metrics.registry.get_sample_value("trainguard_job_lost_seconds_total", labels) == 0
