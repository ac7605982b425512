"""The morning report's content, from Prometheus's ALERTS samples: counts per alert and severity, how
often each fired, where, first and last seen, still firing, P3s included; and the alert that carries it."""

from __future__ import annotations

import datetime as dt
import zoneinfo

from trainguard.diagnosis.morning import (
    MAX_ROWS,
    NIGHT_LABEL,
    SEVERITY,
    Night,
    Series,
    parse_matrix,
    parse_vector,
    report_alert,
    report_text,
    tally,
)
from trainguard.render.routing import MORNING_REPORT

ZONE = zoneinfo.ZoneInfo("Asia/Shanghai")
NIGHT = Night(dt.datetime(2026, 5, 4, 23, 0, tzinfo=ZONE), dt.datetime(2026, 5, 5, 8, 0, tzinfo=ZONE))
T0 = NIGHT.start.timestamp()
JOB = {"alertstate": "firing", "namespace": "ml", "training_job": "llama"}


def series(alertname: str, severity: str, minutes: list[tuple[int, int]], **labels: str) -> Series:
    """Samples every 30 s over each (from, to) minute range after the night's start."""
    ts = tuple(T0 + m * 60 + s for a, b in minutes for m in range(a, b) for s in (0, 30))
    return Series({"alertname": alertname, "severity": severity, **JOB, **labels}, ts)


NIGHT_SERIES = [
    series("GPUMemoryHigh", "P3", [(300, 540)], node="n1", gpu="1"),
    series("GPUThermalThrottling", "P1", [(60, 80), (180, 200)], node="n2", gpu="0"),
    series("GPUThermalThrottling", "P1", [(61, 70)], node="n2", gpu="3"),
    series("GPUNodeDown", "P0", [(10, 40)], node="n3"),
    series("DataLoaderSlow", "P2", [(120, 130)], pod="llama-0"),
]
NOW_FIRING = [{"alertname": "GPUMemoryHigh", "severity": "P3", **JOB, "node": "n1", "gpu": "1"}]


def test_one_row_per_alert_and_severity_strongest_first() -> None:
    rows = tally(NIGHT_SERIES, NOW_FIRING, allowlist=["GPUNodeDown"])
    assert [(r.severity, r.alertname) for r in rows] == [
        ("P0", "GPUNodeDown"),
        ("P1", "GPUThermalThrottling"),
        ("P2", "DataLoaderSlow"),
        ("P3", "GPUMemoryHigh"),
    ]


def test_the_mapped_style_is_tallied_by_priority_and_priority_is_no_instance_label() -> None:
    mapped = [
        series("GPUNodeDown", "critical", [(10, 40)], node="n3", priority="P0"),
        series("DataLoaderSlow", "warning", [(120, 130)], pod="llama-0", priority="P2"),
        series("GPUThermalThrottling", "warning", [(60, 80)], node="n2", gpu="0", priority="P1"),
    ]
    rows = tally(mapped, [], [])
    assert [(r.severity, r.alertname) for r in rows] == [
        ("P0", "GPUNodeDown"),
        ("P1", "GPUThermalThrottling"),
        ("P2", "DataLoaderSlow"),
    ]
    assert rows[0].instances == ("node=n3",)


def test_a_gap_is_a_second_firing_and_each_instance_counts() -> None:
    (thermal,) = [r for r in tally(NIGHT_SERIES, [], []) if r.alertname == "GPUThermalThrottling"]
    assert thermal.firings == 3, "gpu 0 fired twice (a 100-minute gap), gpu 3 once"
    assert thermal.instances == ("gpu=0,node=n2", "gpu=3,node=n2")
    assert thermal.first_seen == T0 + 60 * 60
    assert thermal.last_seen == T0 + 199 * 60 + 30


def test_still_firing_and_paged_are_told_apart() -> None:
    rows = {r.alertname: r for r in tally(NIGHT_SERIES, NOW_FIRING, allowlist=["GPUNodeDown"])}
    assert rows["GPUMemoryHigh"].still_firing == 1
    assert rows["GPUNodeDown"].still_firing == 0
    assert rows["GPUNodeDown"].paged and not rows["GPUMemoryHigh"].paged


def test_an_instance_firing_now_elsewhere_is_not_this_one() -> None:
    other_gpu = [{**NOW_FIRING[0], "gpu": "7"}]
    rows = {r.alertname: r for r in tally(NIGHT_SERIES, other_gpu, [])}
    assert rows["GPUMemoryHigh"].still_firing == 0


def test_the_text_counts_per_severity_and_lists_every_alert_p3_included() -> None:
    summary, description = report_text("ml", "llama", NIGHT, tally(NIGHT_SERIES, NOW_FIRING, ["GPUNodeDown"]))
    assert (
        summary == "ml/llama: 4 alerts fired 6x in the quiet hours (P0 1, P1 3, P2 1, P3 1), 1 still firing"
    )
    lines = description.splitlines()
    assert lines[0] == "Quiet hours Mon 2026-05-04 23:00 to Tue 08:00 Asia/Shanghai."
    assert (
        lines[1]
        == "[P0] GPUNodeDown: fired 1x on node=n3; first Mon 23:10, last Mon 23:39; paged at night (allowlist)"
    )
    assert lines[2].startswith(
        "[P1] GPUThermalThrottling: fired 3x on gpu=0,node=n2, gpu=3,node=n2; first Tue 00:00"
    )
    assert (
        lines[4]
        == "[P3] GPUMemoryHigh: fired 1x on gpu=1,node=n1; first Tue 04:00, last Tue 07:59; STILL FIRING (1)"
    )
    assert len(lines) == 5


def test_many_alerts_are_cut_with_a_count() -> None:
    many = [series(f"Custom{i:03d}", "P2", [(1, 2)]) for i in range(MAX_ROWS + 5)]
    _, description = report_text("ml", "llama", NIGHT, tally(many, [], []))
    lines = description.splitlines()
    assert len(lines) == 1 + MAX_ROWS + 1
    assert lines[-1].startswith("... and 5 more alerts")


def test_many_instances_are_cut_with_a_count() -> None:
    gpus = [series("GPUMemoryHigh", "P3", [(1, 2)], gpu=str(g)) for g in range(8)]
    _, description = report_text("ml", "llama", NIGHT, tally(gpus, [], []))
    assert "on gpu=0, gpu=1, gpu=2 and 5 more;" in description


def test_the_report_alert_is_routed_by_its_name_and_night() -> None:
    alert = report_alert("ml", "llama", NIGHT, summary="s", description="d", now=T0, until=T0 + 86400)
    assert alert["labels"] == {
        "alertname": MORNING_REPORT,
        "severity": SEVERITY,
        "namespace": "ml",
        "training_job": "llama",
        NIGHT_LABEL: "2026-05-05T08:00",
    }
    assert alert["annotations"] == {"summary": "s", "description": "d"}
    assert alert["endsAt"] > alert["startsAt"]


def test_prometheus_answers_are_parsed() -> None:
    matrix = [{"metric": {"__name__": "ALERTS", "alertname": "A"}, "values": [[1.5, "1"], [31.5, "1"]]}]
    assert parse_matrix(matrix) == [Series({"__name__": "ALERTS", "alertname": "A"}, (1.5, 31.5))]
    assert parse_vector([{"metric": {"alertname": "A"}, "value": [2, "1"]}]) == [{"alertname": "A"}]
    assert parse_matrix([]) == [] and parse_vector(None) == []
