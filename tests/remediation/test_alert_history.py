"""The queries that ask Prometheus whether a job's own rule saw a GPU fault, and what a silent rank last
said it saved (remediation/alert_history.py); tests/integration/test_tenant_cannot_pose.py asks a real
Prometheus with the first, the last test here with the second."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.processes import backfilled_prometheus
from trainguard.clients.prometheus import prometheus_client
from trainguard.remediation.alert_history import AlertHistory, alerts_query, last_step_query


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


def test_a_ranks_last_saved_step_is_its_last_scrape_any_kind_and_only_its_own() -> None:
    q = last_step_query("ml", "llama", 'job-0"}')
    assert q == (
        'max(last_over_time(trainguard_checkpoint_last_step{namespace="ml",training_job="llama",'
        'pod="job-0\\"}"}[1h]))'
    )
    assert (
        AlertHistory(Prom([{"metric": {}, "value": [0, "1100"]}])).last_saved_step("ml", "j", "p") == 1100.0
    )
    assert AlertHistory(Prom([])).last_saved_step("ml", "j", "p") is None
    with pytest.raises(OSError):
        AlertHistory(Prom(error=OSError("refused"))).last_saved_step("ml", "j", "p")


@pytest.mark.tools
def test_prometheus_says_what_a_silent_rank_last_saved(tmp_path: Path) -> None:
    """A real Prometheus over a backfilled history: job-0 said 1000 then 1100 (full) and 1050 between
    (emergency), then went silent two minutes ago; job-1 saved further; job-2 said nothing within the
    hour; a pod of another job shares job-0's name."""
    end = int(time.time()) // 15 * 15 - 120
    rows = ["# HELP trainguard_checkpoint_last_step Step of the last successful checkpoint.",
            "# TYPE trainguard_checkpoint_last_step gauge"]  # fmt: skip

    def series(pod: str, kind: str, job: str, samples: list[tuple[int, int]]) -> None:
        labels = f'kind="{kind}",namespace="ml",pod="{pod}",training_job="{job}"'
        rows.extend(f"trainguard_checkpoint_last_step{{{labels}}} {v} {t}" for t, v in samples)

    series("job-0", "full", "llama", [(end - 600 + 15 * i, 1000) for i in range(20)] + [(end - 300 + 15 * i, 1100) for i in range(21)])  # fmt: skip
    series("job-0", "emergency", "llama", [(end - 300 + 15 * i, 1050) for i in range(21)])
    series("job-1", "full", "llama", [(end - 300 + 15 * i, 1200) for i in range(21)])
    series("job-2", "full", "llama", [(end - 7200 + 15 * i, 900) for i in range(20)])
    series("job-0", "full", "other", [(end - 300 + 15 * i, 5000) for i in range(21)])
    with backfilled_prometheus("\n".join([*rows, "# EOF", ""]), tmp_path) as url:
        history = AlertHistory(prometheus_client(url, timeout=10, retries=1), url)
        assert history.last_saved_step("ml", "llama", "job-0") == 1100.0
        assert history.last_saved_step("ml", "llama", "job-1") == 1200.0
        assert history.last_saved_step("ml", "llama", "job-2") is None
        assert history.last_saved_step("other-ns", "llama", "job-0") is None
