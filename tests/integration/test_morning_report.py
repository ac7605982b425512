"""The morning report end to end on real components: a Prometheus whose ALERTS history holds a night
(backfilled with `promtool tsdb create-blocks-from openmetrics`, as a rule evaluation writes it), the
operator's pass querying it through prometheus-api-client, a real Alertmanager with the rendered
configuration, and a notification sink behind its receivers. The quiet hours ended ten minutes ago
by the real clock, which both processes keep.

Stand-in: the Kubernetes edge in memory (tests/kube/fakes.py); no apiserver here.
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
import yaml

from tests.conftest import MONITOR, POLICY, merged
from tests.kube.fakes import FakeKube
from tests.processes import alertmanager, backfilled_prometheus
from tests.render.amconfig import write_config
from tests.render.notification_sink import Sink, serve
from trainguard.clients.prometheus import prometheus_client
from trainguard.diagnosis.passes import MARKER, MorningReports
from trainguard.render.routing import MORNING_REPORT

pytestmark = pytest.mark.tools

ZONE = zoneinfo.ZoneInfo("Asia/Shanghai")
END = time.time() // 60 * 60 - 600
START = END - 8 * 3600
_END = dt.datetime.fromtimestamp(END, ZONE)
KEY = _END.strftime("%Y-%m-%dT%H:%M")
QUIET = {"enabled": True, "timezone": "Asia/Shanghai", "start": f"{_END - dt.timedelta(hours=8):%H:%M}", "end": f"{_END:%H:%M}"}  # fmt: skip
JOB = {"namespace": "ml", "training_job": "llama-pretrain"}
M = 60


def _series(labels: dict[str, str], ranges: list[tuple[float, float]]) -> list[str]:
    text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return [f"ALERTS{{{text}}} 1 {t:.3f}" for a, b in ranges for t in _steps(a, b)]


def _steps(a: float, b: float) -> list[float]:
    """One sample every 30 s, as a rule group evaluated every 30 s writes ALERTS."""
    return [a + 30 * i for i in range(int((b - a) // 30))]


def night_history() -> str:
    firing = {"alertstate": "firing"}
    lines = ["# HELP ALERTS Alerts of the night.", "# TYPE ALERTS gauge"]
    # the night of llama-pretrain
    lines += _series(
        JOB | firing | {"alertname": "GPUNodeDown", "severity": "P0", "node": "gpu-3"},
        [(START + 70 * M, START + 100 * M)],
    )
    lines += _series(
        JOB | firing | {"alertname": "GPUThermalThrottling", "severity": "P1", "node": "gpu-1", "gpu": "0"},
        [(START + 120 * M, START + 140 * M), (START + 240 * M, START + 270 * M)],
    )
    lines += _series(
        JOB | firing | {"alertname": "DataLoaderSlow", "severity": "P2", "pod": "llama-pretrain-0"},
        [(START + 180 * M, START + 190 * M)],
    )
    lines += _series(
        JOB | firing | {"alertname": "GPUMemoryHigh", "severity": "P3", "node": "gpu-1", "gpu": "1"},
        [(START + 300 * M, time.time() - 30)],
    )  # still firing
    # not in the report: another job, a pending alert, an alert of the evening before
    lines += _series(
        {"namespace": "ml", "training_job": "bert-finetune"}
        | firing
        | {"alertname": "TrainingJobStalled", "severity": "P0"},
        [(START + 120 * M, START + 180 * M)],
    )
    lines += _series(
        JOB
        | {
            "alertstate": "pending",
            "alertname": "GPUThermalThrottling",
            "severity": "P1",
            "node": "gpu-1",
            "gpu": "5",
        },
        [(START + 360 * M, START + 365 * M)],
    )
    lines += _series(JOB | firing | {"alertname": "CheckpointStale", "severity": "P1"},
                     [(START - 120 * M, START - 60 * M)])  # fmt: skip
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with backfilled_prometheus(night_history(), tmp_path_factory.mktemp("prometheus")) as url:
        yield url


@pytest.fixture
def stack(prometheus: str, tmp_path: Path) -> Iterator[tuple[str, str, Sink, FakeKube]]:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip("Alertmanager is not installed")
    with serve() as sink:
        hook = {"type": "webhook", "sendResolved": False}
        receivers = [
            hook | {"name": "oncall-phone", "roles": ["phone", "sms"], "url": sink.receiver_url("phone")},
            hook | {"name": "im", "roles": ["im"], "url": sink.receiver_url("im")},
            hook | {"name": "email", "roles": ["email"], "url": sink.receiver_url("email")},
            hook | {"name": "ticket", "roles": ["ticket"], "url": sink.receiver_url("ticket")},
        ]
        changes = {"spec.quietHours": QUIET, "spec.receivers": receivers}
        config = write_config(tmp_path, **changes)
        _shorten_report_timing(config)
        kube = FakeKube(MONITOR, merged(POLICY, **changes))
        with alertmanager(binary, config, tmp_path) as am:
            yield prometheus, am, sink, kube


def _shorten_report_timing(config: Path) -> None:
    """The report route's group_wait (10s) and group_interval (5m) cut to 1s and 2s, so that the test
    sees the notification, and the absence of a second one, in seconds."""
    doc = yaml.safe_load(config.read_text())
    for monitor in doc["route"]["routes"]:
        for route in monitor["routes"]:
            if route.get("matchers") == [f'alertname="{MORNING_REPORT}"']:
                route |= {"group_wait": "1s", "group_interval": "2s"}
    config.write_text(yaml.safe_dump(doc))


def reports_of(sink: Sink) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for n in sink.notifications():
        for a in n.alerts:
            if a["labels"].get("alertname") == MORNING_REPORT and a.get("status") == "firing":
                out.setdefault(n.receiver, []).append(a)
    return out


def local(offset_minutes: int) -> str:
    return dt.datetime.fromtimestamp(START + offset_minutes * M, ZONE).strftime("%a %H:%M")


def test_the_night_is_reported_once_to_im_and_email(stack: tuple[str, str, Sink, FakeKube]) -> None:
    prom_url, am_url, sink, kube = stack
    reports = MorningReports(kube, kube, leader=lambda: True, alertmanager_url=am_url,
                             prometheus=prometheus_client(prom_url), check_s=0)  # fmt: skip
    assert reports.run() == 1
    assert sink.wait(lambda s: {"im", "email"} <= set(reports_of(s)), timeout=20), sink.notifications()
    assert kube.get_monitor("ml", "llama-pretrain")["metadata"]["annotations"][MARKER] == KEY

    got = reports_of(sink)
    assert set(got) == {"im", "email"}, "phone and ticket get no report"
    (report,) = got["im"]
    assert report["labels"] | {"night": KEY} == report["labels"]
    summary, description = report["annotations"]["summary"], report["annotations"]["description"]
    assert (
        summary
        == "ml/llama-pretrain: 4 alerts fired 5x in the quiet hours (P0 1, P1 2, P2 1, P3 1), 1 still firing"
    )
    lines = description.splitlines()
    assert lines[1:] == [
        f"[P0] GPUNodeDown: fired 1x on node=gpu-3; first {local(70)}, last {local(99)}"
        f"; paged at night (allowlist)",
        f"[P1] GPUThermalThrottling: fired 2x on gpu=0,node=gpu-1; first {local(120)}, last {local(269)}",
        f"[P2] DataLoaderSlow: fired 1x on pod=llama-pretrain-0; first {local(180)}, last {local(189)}",
        f"[P3] GPUMemoryHigh: fired 1x on gpu=1,node=gpu-1; first {local(300)}, last {local(480)}"
        f"; STILL FIRING (1)",
    ]  # fmt: skip

    # the same pass again, and a restarted operator: the marker stops both
    assert reports.run() == 0
    again = MorningReports(kube, kube, leader=lambda: True, alertmanager_url=am_url,
                           prometheus=prometheus_client(prom_url), check_s=0)  # fmt: skip
    assert again.run() == 0
    # an operator killed between the post and the marker posts the same report again: Alertmanager
    # holds it as the same alert and notifies no one twice
    kube.put(MONITOR)  # the marker gone
    assert again.run() == 1
    time.sleep(6)  # three report group_intervals
    assert {r: len(a) for r, a in reports_of(sink).items()} == {"im": 1, "email": 1}
