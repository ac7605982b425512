"""The query that asks Prometheus whether a job's own rule saw a GPU fault (remediation/alert_history.py);
tests/integration/test_tenant_cannot_pose.py asks a real Prometheus with it."""

from __future__ import annotations

from typing import Any

import pytest

from trainguard.remediation.alert_history import AlertHistory, alerts_query


def test_the_query_names_the_job_node_and_gpu_over_the_last_hour() -> None:
    assert alerts_query("GPUCriticalXid", "ml", "llama", "gpu-a", "3") == (
        'max_over_time(ALERTS{alertname="GPUCriticalXid",namespace="ml",training_job="llama",'
        'node="gpu-a",gpu="3"}[1h])'
    )
    assert 'gpu="' not in alerts_query("GPULost", "ml", "llama", "gpu-a")


def test_a_label_value_cannot_break_out_of_its_matcher() -> None:
    q = alerts_query("GPULost", "ml", "llama", 'gpu-a"} or vector(1) or {x="\\')
    assert q.endswith(r'node="gpu-a\"} or vector(1) or {x=\"\\"}[1h])'), q


class Prom:
    def __init__(self, result: Any = None, error: Exception | None = None) -> None:
        self.result, self.error, self.queries = result, error, []  # type: list[str]

    def custom_query(self, query: str) -> Any:
        self.queries.append(query)
        if self.error:
            raise self.error
        return self.result


def test_any_series_is_a_sighting_and_an_error_is_not_a_no() -> None:
    assert AlertHistory(Prom([{"metric": {}, "value": [0, "1"]}])).saw("GPULost", "ml", "j", "n")
    assert not AlertHistory(Prom([])).saw("GPULost", "ml", "j", "n")
    with pytest.raises(OSError):
        AlertHistory(Prom(error=OSError("refused"))).saw("GPULost", "ml", "j", "n")
    assert AlertHistory(Prom(), "http://prom:9090").where() == "Prometheus http://prom:9090"
