"""The diagnostic-report pass asks Prometheus for the firing alerts once a pass, for every job at once:
at 2,000 monitors one query a monitor was 2,000 queries a minute from the operator. The reports themselves
are built from a real Prometheus in test_report_prometheus.py; here a stand-in answers the one query."""

from __future__ import annotations

from typing import Any

from tests.conftest import MONITOR, POLICY, merged
from tests.kube.fakes import FakeKube
from trainguard.diagnosis.passes import DiagnosticReports

AT = 1_760_000_000.0
JOBS = [("ml", f"job-{i}") for i in range(3)]


class Prometheus:
    def __init__(self, alerts: list[dict[str, str]], fail: Exception | None = None) -> None:
        self.alerts, self.fail = alerts, fail
        self.queries: list[str] = []

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any:
        self.queries.append(query)
        if self.fail is not None:
            raise self.fail
        return [{"metric": a, "value": [AT, "1"]} for a in self.alerts]

    def custom_query_range(self, query: str, **_: Any) -> Any:
        raise AssertionError(f"no range query for a pass with no P2 firing: {query}")


def cluster() -> FakeKube:
    monitors = [merged(MONITOR, **{"metadata.namespace": ns, "metadata.name": name, "metadata.uid": name})
                for ns, name in JOBS]  # fmt: skip
    return FakeKube(*monitors, POLICY)


def alert(ns: str, job: str, severity: str) -> dict[str, str]:
    return {"__name__": "ALERTS", "alertstate": "firing", "alertname": "GPUMemoryHigh", "severity": severity,
            "namespace": ns, "training_job": job}  # fmt: skip


def test_one_query_a_pass_for_every_monitor() -> None:
    kube = cluster()
    prom = Prometheus([alert("ml", "job-1", "P3"), alert("other", "not-monitored", "P2")])
    passes = DiagnosticReports(kube, kube, lambda: True, prom, clock=lambda: AT, check_s=0)
    assert passes.run() == 0, "a P3 is not reported; a job no monitor names is not either"
    assert prom.queries == ['ALERTS{alertstate="firing",training_job!=""}']
    assert kube.created == [], "no report written"


def test_prometheus_unreachable_ends_the_pass_quietly() -> None:
    kube = cluster()
    prom = Prometheus([], fail=ConnectionError("refused"))
    passes = DiagnosticReports(kube, kube, lambda: True, prom, clock=lambda: AT, check_s=0)
    assert passes.run() == 0
    assert len(prom.queries) == 1
