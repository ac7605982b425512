"""The run's trace id reaches Prometheus on trainguard_exporter_info, where the alerts' correlation
annotations read it (render/prometheus.py); the operator sets TRAINGUARD_TRACE_ID per Job."""

from __future__ import annotations

import pytest

from tests.exporter.running import running_exporter


def test_trace_id_flag_is_a_label_of_exporter_info() -> None:
    with running_exporter("--backend", "simulated", "--gpus", "1", "--trace-id", "4f1c0ffee") as r:
        (labels, value), *_ = r.scrape()["trainguard_exporter_info"]
    assert labels["trace_id"] == "4f1c0ffee"
    assert value == 1.0


def test_trace_id_comes_from_the_environment_the_sidecar_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_TRACE_ID", "from-env")
    with running_exporter("--backend", "simulated", "--gpus", "1") as r:
        (labels, _), *_ = r.scrape()["trainguard_exporter_info"]
    assert labels["trace_id"] == "from-env"
