"""The grade's labels: `priority` always holds P0..P3, `severity` the grade or its mapped word."""

from __future__ import annotations

import pytest

from trainguard.catalog import SEVERITIES
from trainguard.catalog.severity import (
    GRADE,
    MAPPED,
    MAPPED_SEVERITY,
    STYLES,
    grade_labels,
    grade_of,
    severity_label,
    styled,
    with_priority,
)


def test_the_mapping_covers_every_grade_with_the_words_kube_prometheus_stack_routes_on() -> None:
    assert list(MAPPED_SEVERITY) == list(SEVERITIES)
    assert set(MAPPED_SEVERITY.values()) <= {"critical", "warning", "info", "none"}
    assert MAPPED_SEVERITY["P0"] == "critical" and MAPPED_SEVERITY["P1"] == "warning"


def test_no_grade_maps_to_info() -> None:
    """kube-prometheus-stack's InfoInhibitor mutes `info` alerts wherever no warning or critical fires:
    a P2 must still reach e-mail and tickets, and a P3 would raise the InfoInhibitor itself."""
    assert "info" not in MAPPED_SEVERITY.values()


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("grade", SEVERITIES)
def test_priority_holds_the_grade_in_every_style(style: str, grade: str) -> None:
    labels = grade_labels(grade, style)
    assert labels["priority"] == grade
    assert grade_of(labels) == grade


def test_grade_style_severity_is_the_grade_and_mapped_is_the_word() -> None:
    assert [grade_labels(g, GRADE)["severity"] for g in SEVERITIES] == ["P0", "P1", "P2", "P3"]
    assert [grade_labels(g, MAPPED)["severity"] for g in SEVERITIES] == [
        "critical",
        "warning",
        "warning",
        "none",
    ]


def test_a_value_that_is_not_a_grade_keeps_its_severity() -> None:
    assert severity_label("info", MAPPED) == "info"


def test_grade_of_falls_back_to_severity_for_an_alert_without_priority() -> None:
    assert grade_of({"severity": "P1"}) == "P1"
    assert grade_of({"severity": "critical", "priority": "P0"}) == "P0"
    assert grade_of({"severity": "critical"}) == "critical"
    assert grade_of({"alertname": "X"}) == ""


def test_styled_writes_a_graded_severity_in_the_style_and_keeps_any_other() -> None:
    posted = {"alertname": "X", "priority": "P0", "severity": "P0"}
    assert styled(posted, MAPPED) == posted | {"severity": "critical"}
    assert styled(posted, GRADE) == posted
    assert styled(styled(posted, MAPPED), MAPPED) == styled(posted, MAPPED)
    # read back from Alertmanager and posted again: already in the style
    copy = {"alertname": "X", "priority": "P0", "severity": "warning", "escalated_from": "P1"}
    assert styled(copy, MAPPED) == copy
    report = {"alertname": "TrainguardMorningReport", "severity": "none"}
    assert styled(report, MAPPED) == report


def test_with_priority_fills_priority_from_an_old_rules_severity_only() -> None:
    assert with_priority({"severity": "P2"}) == {"severity": "P2", "priority": "P2"}
    assert with_priority({"severity": "warning"}) == {"severity": "warning"}
    assert with_priority({"severity": "warning", "priority": "P1"}) == {
        "severity": "warning",
        "priority": "P1",
    }
