"""How the morning report is wired into the operator: on the leader's report pass, beside the P0 loop's
(tests/controller/test_periodic.py: neither holds the other back), and the Helm chart's prometheusUrl
reaching the variable the operator reads."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.packaging.chart import find_helm, objects, run_helm, template, template_args
from trainguard.controller.run import PROMETHEUS_URL_ENV, report_pass
from trainguard.remediation.loop import RemediationLoop


class Calls:
    def __init__(self, fail: str = "") -> None:
        self.calls: list[str] = []
        self.fail = fail

    def __getattr__(self, name: str) -> Any:
        def call() -> int:
            self.calls.append(name)
            if name == self.fail:
                raise RuntimeError(f"{name} failed")
            return 0

        return call


def test_the_p0_pass_resumes_escalates_and_announces_in_that_order_and_detection_runs_alone() -> None:
    calls: list[str] = []
    loop = RemediationLoop.__new__(RemediationLoop)
    for name in ("resume", "pending", "breaker", "watch", "escalate", "cordon_notices"):
        setattr(loop, name, type("Pass", (), {"run": lambda self, n=name: calls.append(n) or 0})())
    loop.passes()
    assert calls == ["resume", "pending", "breaker", "escalate", "cordon_notices"]
    loop.detect()
    assert calls[5:] == ["watch"]


def test_a_failed_morning_report_does_not_stop_the_diagnostic_reports() -> None:
    reports, diagnostics = Calls(fail="run"), Calls()
    with pytest.raises(RuntimeError):
        report_pass(reports, diagnostics)  # type: ignore[arg-type]
    assert diagnostics.calls == ["run"]


@pytest.fixture(scope="module")
def helm() -> str:
    path = find_helm()
    if path is None:
        if os.environ.get("TRAINGUARD_REQUIRE_TOOLS"):
            pytest.fail("helm is required (TRAINGUARD_REQUIRE_TOOLS is set)")
        pytest.skip("helm is not built: `make helm` builds it from its Go module (needs Go)")
    return path


def _env(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_the_charts_prometheus_url_is_the_operators(helm: str) -> None:
    url = "http://prometheus-operated.monitoring.svc:9090"
    assert _env(objects(template(helm, f"prometheusUrl={url}")))[PROMETHEUS_URL_ENV] == url
    assert PROMETHEUS_URL_ENV not in _env(objects(template(helm))), "empty by default: no report"


def test_the_chart_refuses_a_prometheus_url_without_scheme(helm: str) -> None:
    proc = run_helm(helm, *template_args("prometheusUrl=prometheus:9090"), check=False)
    assert proc.returncode != 0
    assert "prometheusUrl" in proc.stderr
