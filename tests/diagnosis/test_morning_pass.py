"""The leader's morning-report pass: once per night and monitor, the marker annotation, retries, and
what it asks Prometheus.

Stand-ins: the Kubernetes edge in memory, tests/kube/fakes.py (which applies a merge patch of the
monitor's annotations as the apiserver would), and canned Prometheus answers that record the queries asked
(tests/integration/test_morning_report.py runs the pass against a real Prometheus). Alertmanager is
a real process.
"""

from __future__ import annotations

import datetime as dt
import shutil
import time
import zoneinfo
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MONITOR, POLICY, merged
from tests.kube.fakes import FakeKube
from tests.processes import alertmanager, free_port, http_json
from tests.render.amconfig import write_config
from trainguard.diagnosis.passes import MARKER, RETRY_S, MorningReports
from trainguard.render.routing import MORNING_REPORT

SHANGHAI = zoneinfo.ZoneInfo("Asia/Shanghai")
END = time.time() // 60 * 60 - 120
"""The quiet hours ended two minutes ago by the real clock, which the real Alertmanager keeps."""
_END = dt.datetime.fromtimestamp(END, SHANGHAI)
KEY = _END.strftime("%Y-%m-%dT%H:%M")
NS, NAME = MONITOR["metadata"]["namespace"], MONITOR["metadata"]["name"]
QUIET = {"enabled": True, "timezone": "Asia/Shanghai", "start": f"{_END - dt.timedelta(hours=9):%H:%M}",
         "end": f"{_END:%H:%M}"}  # fmt: skip


def marker(k: FakeKube) -> str | None:
    """The night written in the test monitor's annotation, None before any."""
    return ((k.get_monitor(NS, NAME) or {})["metadata"].get("annotations") or {}).get(MARKER)


class CannedPrometheus:
    def __init__(self, history: list[dict[str, Any]], now: list[dict[str, Any]]) -> None:
        self.history, self.now = history, now
        self.queries: list[tuple[str, dict[str, Any]]] = []
        self.fail: Exception | None = None

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any:
        self.queries.append((query, dict(params or {})))
        if self.fail is not None:
            raise self.fail
        return self.history if "[" in query else self.now


def alerts_history() -> list[dict[str, Any]]:
    labels = {
        "__name__": "ALERTS",
        "alertstate": "firing",
        "namespace": "ml",
        "training_job": "llama-pretrain",
    }
    return [
        {"metric": labels | {"alertname": "GPUMemoryHigh", "severity": "P3", "gpu": "1"},
         "values": [[END - 3600 + 30 * i, "1"] for i in range(10)]},
    ]  # fmt: skip


@pytest.fixture
def am_url(tmp_path: Path) -> Iterator[str]:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip("Alertmanager is not installed")
    with alertmanager(binary, write_config(tmp_path, **{"spec.quietHours": QUIET}), tmp_path) as url:
        yield url


def kube(**policy_changes: Any) -> FakeKube:
    return FakeKube(MONITOR, merged(POLICY, **({"spec.quietHours": QUIET} | policy_changes)))


def reports(k: FakeKube, prom: CannedPrometheus | None, url: str | None, now: list[float]) -> MorningReports:
    return MorningReports(k, k, leader=lambda: True, alertmanager_url=url, prometheus=prom, clock=lambda: now[0],
                          check_s=0)  # fmt: skip


def posted(url: str) -> list[dict[str, Any]]:
    return list(http_json(f"{url}/api/v2/alerts?filter=alertname%3D%22{MORNING_REPORT}%22"))


pytestmark = pytest.mark.tools


def test_one_report_per_night_marked_on_the_monitor(am_url: str) -> None:
    k, prom, now = kube(), CannedPrometheus(alerts_history(), []), [END + 120]
    assert reports(k, prom, am_url, now).run() == 1
    (alert,) = posted(am_url)
    assert alert["labels"]["night"] == KEY
    assert "GPUMemoryHigh" in alert["annotations"]["description"]
    assert marker(k) == KEY
    # what it asked: the job's firing alerts over the 9-hour night at its end, and those firing now
    (history, h_params), (current, c_params) = prom.queries
    selector = 'ALERTS{alertstate="firing",namespace="ml",training_job="llama-pretrain"}'
    assert history == f"{selector}[32400s]" and float(h_params["time"]) == END
    assert current == selector and float(c_params["time"]) == END + 120


def test_a_second_pass_and_a_restarted_operator_do_not_report_the_night_again(am_url: str) -> None:
    k, prom, now = kube(), CannedPrometheus(alerts_history(), []), [END + 120]
    first = reports(k, prom, am_url, now)
    assert first.run() == 1
    now[0] += 600
    assert first.run() == 0
    assert reports(k, prom, am_url, now).run() == 0, "a new process reads the marker"
    assert len(prom.queries) == 2, "a reported night is not queried again"
    assert len(k.monitor_patches) == 1


def test_a_quiet_night_sends_nothing_but_is_marked(am_url: str) -> None:
    k = kube()
    assert reports(k, CannedPrometheus([], []), am_url, [END + 60]).run() == 0
    assert posted(am_url) == []
    assert marker(k) == KEY


def test_a_failure_marks_nothing_and_is_retried_later(am_url: str) -> None:
    k, prom, now = kube(), CannedPrometheus(alerts_history(), []), [END + 60]
    prom.fail = ConnectionError("prometheus is down")
    r = reports(k, prom, am_url, now)
    assert r.run() == 0
    assert marker(k) is None
    prom.fail = None
    now[0] += RETRY_S - 1
    assert r.run() == 0 and len(prom.queries) == 1, "not before RETRY_S"
    now[0] += 1
    assert r.run() == 1


def test_alertmanager_down_marks_nothing() -> None:
    k = kube()
    r = reports(k, CannedPrometheus(alerts_history(), []), f"http://127.0.0.1:{free_port()}", [END + 60])
    assert r.run() == 0
    assert marker(k) is None


def test_only_the_leader_with_both_urls_and_quiet_hours_reports() -> None:
    prom = CannedPrometheus(alerts_history(), [])
    standby = MorningReports(kube(), kube(), leader=lambda: False, alertmanager_url="http://127.0.0.1:1", prometheus=prom,
                             clock=lambda: END + 60)  # fmt: skip
    assert standby.run() == 0
    assert reports(kube(), None, "http://127.0.0.1:1", [END + 60]).run() == 0
    assert reports(kube(), prom, None, [END + 60]).run() == 0
    assert (
        reports(kube(**{"spec.quietHours": {"enabled": False}}), prom, "http://127.0.0.1:1", [END + 60]).run()
        == 0
    )
    assert prom.queries == []


def test_a_monitor_whose_policy_is_missing_is_left_to_its_reconcile() -> None:
    k = FakeKube(MONITOR)
    prom = CannedPrometheus(alerts_history(), [])
    assert reports(k, prom, "http://127.0.0.1:1", [END + 60]).run() == 0
    assert prom.queries == []


def test_the_pass_looks_at_most_once_a_minute() -> None:
    k, prom, now = kube(), CannedPrometheus([], []), [END + 60]
    r = MorningReports(k, k, leader=lambda: True, alertmanager_url="http://127.0.0.1:1", prometheus=prom,
                       clock=lambda: now[0])  # fmt: skip
    r.run()
    k.put(merged(MONITOR))  # the marker gone
    now[0] += 30
    r.run()
    assert len(prom.queries) == 2, "one night queried once: the second pass came too soon"
    now[0] += 30
    r.run()
    assert len(prom.queries) == 4
