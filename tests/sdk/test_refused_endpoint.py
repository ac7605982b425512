"""The SDK's endpoint: by default the injected sidecar's unix socket, since the exporter refuses the
SDK on its TCP port without --sdk-tcp. A refusal (401, 403) is a wrong endpoint, not an outage: one
warning that names the fix, and the refused batch is dropped and counted, never requeued forever."""

from __future__ import annotations

import logging

import pytest

from tests.exporter.running import running_exporter
from tests.sdk.fakes import running_sidecar
from trainguard.sdk import Reporter
from trainguard.sdk.reporter import DEFAULT_ENDPOINT


def test_the_default_endpoint_is_the_injected_sidecars_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINGUARD_ENDPOINT", raising=False)
    assert Reporter(start=False).endpoint == DEFAULT_ENDPOINT == "unix:///var/run/trainguard/sdk.sock"
    monkeypatch.setenv("TRAINGUARD_ENDPOINT", "http://127.0.0.1:9400")
    assert Reporter(start=False).endpoint == "http://127.0.0.1:9400", "the environment still wins"


def test_a_refusing_exporter_costs_one_clear_warning_and_the_refused_reports(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="trainguard.sdk")
    with running_exporter("--backend", "none", "--no-host", sdk_tcp=False) as exp:  # as in a pod
        tg = Reporter(exp.url, start=False)
        tg.log_step(1, loss=1.0)
        tg.flush()  # 403: the hello and the step
        assert (tg.refused, tg.dropped, tg.sent) == (2, 2, 0)
        tg.log_step(2, loss=1.0)
        tg.flush()
        assert (tg.refused, tg.dropped) == (3, 3), "only the new report: the refused batch was not requeued"
        tg.resume_from()  # GET /v1/control: 401
        tg.flush()
        assert exp.value("trainguard_train_step") is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "403" in warnings[0] and DEFAULT_ENDPOINT in warnings[0] and "--sdk-tcp" in warnings[0]
    assert "not reachable" not in warnings[0]


def test_a_sidecar_in_trouble_is_still_retried() -> None:
    with running_sidecar() as (sidecar, url):
        tg = Reporter(url, start=False)
        sidecar.report_status = 503
        tg.log_step(1, loss=1.0)
        tg.flush()
        assert tg.refused == 0 and tg.dropped == 0, "a 503 is an outage: the batch is kept"
        sidecar.report_status = 204
        tg.flush()
        assert [e["type"] for e in sidecar.events] == ["hello", "step"]
