"""The diagnostic report: what fired, the causes with evidence, plots, log excerpt and actions, in
Markdown and HTML; the SVG plots are well-formed and draw inside their frame."""

from __future__ import annotations

import base64
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from html.parser import HTMLParser

from tests.diagnosis.report_inputs import TRACE_ID, report_input
from tests.diagnosis.traces import AT
from trainguard.diagnosis.logs import classify, parse_timestamped
from trainguard.diagnosis.report import PLOTS, build
from trainguard.diagnosis.svg import Band, Line, line_plot

SVG = "{http://www.w3.org/2000/svg}"


def test_every_plot_is_drawn_as_well_formed_svg() -> None:
    report = build(report_input())
    assert set(report.plots) == {p.key for p in PLOTS}
    for svg in report.plots.values():
        root = ET.fromstring(svg)
        assert root.tag == f"{SVG}svg"
        assert root.findall(f"{SVG}polyline")
    throughput = ET.fromstring(report.plots["throughput"])
    assert throughput.find(f"{SVG}rect[@class='band']") is not None
    assert throughput.find(f"{SVG}line[@class='alert-marker']") is not None


def test_lines_stay_inside_the_frame_and_follow_the_values() -> None:
    svg = line_plot(
        "t", [Line("a", [(0, 1.0), (50, 3.0), (100, 2.0)])], start=0, end=100, band=Band("b", 0, 4)
    )
    [poly] = ET.fromstring(svg).findall(f"{SVG}polyline")
    pts = [tuple(map(float, p.split(","))) for p in (poly.get("points") or "").split()]
    assert [x for x, _ in pts] == sorted(x for x, _ in pts)
    assert all(56 <= x <= 470 and 24 <= y <= 170 for x, y in pts)
    assert pts[1][1] < pts[2][1] < pts[0][1]  # higher value, higher on the page


def test_markdown_names_cause_evidence_logs_trace_and_actions() -> None:
    md = build(report_input()).markdown
    assert "# P2 TrainingThroughputDrop" in md
    assert "### throughput-data-loading" in md and "trainguard_train_dataloader_wait_ratio" in md
    assert md.count("data:image/svg+xml;base64,") == len(PLOTS)
    first = re.search(r"data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)", md)
    assert first and base64.b64decode(first.group(1)).startswith(b"<svg")
    assert TRACE_ID in md and "runbook#trainingthroughputdrop" in md
    assert "[nccl-timeout]" in md and "[oom]" in md and "[cuda-error]" in md
    assert "step 1200" not in md  # 80 s before the alert
    assert "notify: Succeeded - email and ticket receivers" in md


def test_the_data_form_holds_the_alert_findings_logs_and_actions_and_is_json() -> None:
    data = json.loads(json.dumps(build(report_input()).data, allow_nan=False))
    assert data["alert"]["name"] == "TrainingThroughputDrop" and data["alert"]["traceID"] == TRACE_ID
    causes = [f["cause"] for f in data["findings"]]
    assert "throughput-data-loading" in causes
    assert all(f["evidence"] and "metric" in f["evidence"][0] for f in data["findings"])
    assert set(data["plots"]) == {p.key for p in PLOTS}
    assert {ln["kind"] for ln in data["logs"]} >= {"nccl-timeout", "oom", "cuda-error"}
    assert [r["id"] for r in data["remediations"]] == ["r-1"]


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_html_marks_errors_and_escapes_what_the_trainer_printed() -> None:
    html = build(report_input()).html
    parser = _Collect()
    parser.feed(html)
    kinds = [a.get("data-kind") for t, a in parser.tags if t == "mark"]
    assert kinds == ["nccl-timeout", "traceback", "oom", "cuda-error"]
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert [a.get("data-cause") for t, a in parser.tags if t == "div" and a.get("class") == "cause"] == [
        "throughput-data-loading"
    ]
    assert sum(1 for t, a in parser.tags if t == "figure") == len(PLOTS)


def test_a_healthy_job_says_no_cause_was_found() -> None:
    report = build(report_input("healthy"))
    assert "No rule found a probable cause" in report.markdown


def test_error_patterns_and_timestamped_lines() -> None:
    assert classify("NCCL WARN Timeout waiting for peer; watchdog") == "nccl-timeout"
    assert classify("RuntimeError: CUDA error: device-side assert triggered") == "cuda-error"
    assert classify("killed: OOMKilled") == "oom"
    assert classify("step 10 loss 2.0") == ""
    text = '2025-10-09T08:53:19.500000000Z Traceback (most recent call last):\n  File "train.py", line 3'
    lines = parse_timestamped("p", text)
    assert [ln.at for ln in lines] == [AT - 0.5, AT - 0.5]


def test_a_report_without_pod_logs_says_they_were_not_read() -> None:
    """The operator's --no-pod-logs (no RBAC on pods/log): not an empty window, which would mislead."""
    unread = build(replace(report_input(), logs=(), logs_read=False))
    for text in (unread.markdown, unread.html):
        assert "pod logs not read: the operator runs with --no-pod-logs" in text
        assert "no log lines in the window" not in text
    empty = build(replace(report_input(), logs=()))
    assert "no log lines in the window" in empty.markdown and "not read" not in empty.markdown
