"""The shared rule group when its publisher fails: thresholds outlive the operator, a job nothing was
ever published for is judged by the catalogue's defaults, and the dead-man alert says so. And which
monitors the shared group cannot judge, and why."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import monitor, policy
from tests.render.alert_cases import GPU, POD, Case, p, series
from tests.render.test_alert_rules import OPERATOR_SCRAPE, promtool_test, publisher_input, shared_rules
from trainguard.catalog.rule_forms import NOT_SHARED_REASONS, REASONS_MAX, not_shared_markdown
from trainguard.catalog.severity import grade_labels
from trainguard.render.policy import effective_policy
from trainguard.render.shared import (
    DEFAULT_MONITOR,
    PER_MONITOR,
    SETTINGS_MISSING,
    SHARED,
    monitor_groups,
    published_series,
    rule_form,
    rules_status,
    shared_group,
)

THRESHOLD_80 = {"spec.alerts": [{"name": "GPUThermalThrottling", "threshold": 80}]}
UP = series("up", POD, "1x100")


def publication(values: Callable[[str], str], **policy_changes: Any) -> list[dict[str, str]]:
    """The operator's series for the test monitor, each with the promtool values `values(v)` for its
    value v ("_x60": an hour without)."""
    return [
        s | {"values": values(s["values"].split("x")[0])} for s in publisher_input({}, 1, **policy_changes)
    ]


def published(minutes: int, then: str = "") -> list[dict[str, str]]:
    return publication(lambda v: f"{v}x{minutes} {then}".strip())


def hot(celsius: int, minutes: int = 100) -> dict[str, str]:
    return series("DCGM_FI_DEV_GPU_TEMP", GPU, f"{celsius}x{minutes}")


@pytest.mark.tools
def test_thresholds_outlive_their_publisher(promtool: str, tmp_path: Path) -> None:
    """80 C published for ten minutes, by two operator replicas, then none for over an hour: 82 C still
    fires at 80, where the catalogue's 85 would not; and after the publisher restarted."""
    gone = publication(lambda v: f"{v}x10 _x70", **THRESHOLD_80)
    replica = [s | {"series": s["series"].replace("10.0.0.9", "10.0.0.10")} for s in gone]
    restarted = publication(lambda v: f"{v}x10 _x60 {v}x30", **THRESHOLD_80)
    cases = [
        Case("an hour after the publisher went", "75m", [hot(82), UP, *gone, *replica], [p("P1", GPU)]),
        Case("the published threshold, not the default, still holds", "75m", [hot(79), UP, *gone]),
        Case("after it came back", "85m", [hot(82), UP, *restarted], [p("P1", GPU)]),
    ]
    promtool_test(promtool, tmp_path, shared_rules({}, **THRESHOLD_80), "GPUThermalThrottling", cases)


@pytest.mark.tools
def test_a_job_never_published_is_judged_by_the_defaults(promtool: str, tmp_path: Path) -> None:
    """No operator ever published (a monitor created while it was down): the catalogue's 85 C."""
    cases = [
        Case("86 C over the default", "5m", [hot(86), UP], [p("P1", GPU)]),
        Case("84 C under it", "5m", [hot(84), UP]),
    ]
    promtool_test(promtool, tmp_path, shared_rules({}), "GPUThermalThrottling", cases)


@pytest.mark.tools
def test_a_job_the_publisher_does_not_know_is_not_judged(promtool: str, tmp_path: Path) -> None:
    """While the operator publishes, a job it publishes nothing for is no monitor of it."""
    other = {**GPU, "training_job": "unknown"}
    case = Case(
        "the operator publishes llama-pretrain only",
        "5m",
        [series("DCGM_FI_DEV_GPU_TEMP", other, "99x10"), series("up", other, "1x10"), *published(10)],
    )
    promtool_test(promtool, tmp_path, shared_rules({}), "GPUThermalThrottling", [case])


@pytest.mark.tools
def test_settings_missing_fires_when_the_publisher_is_gone(promtool: str, tmp_path: Path) -> None:
    fires = [grade_labels("P2")]
    cases = [
        Case("published all along", "30m", [UP, *published(40)]),
        Case("gone for 20 minutes while the job reports", "30m", [UP, *published(5, "_x40")], fires),
        Case("never published", "15m", [UP], fires),
        Case("gone, but not for 10 minutes yet", "12m", [UP, *published(5, "_x40")]),
        Case("no job reports series", "30m", [*published(5, "_x40")]),
    ]
    promtool_test(promtool, tmp_path, shared_rules({}), SETTINGS_MISSING, cases)


def test_the_shared_group_does_not_depend_on_the_monitors() -> None:
    group = shared_group()
    assert group == shared_group()
    text = str(group)
    assert "llama-pretrain" not in text and 'namespace="ml"' not in text
    assert {r["alert"] for r in group["rules"] if "alert" in r} >= {
        a.name for a in effective_policy(monitor(), []).alerts
    }


def _form(monitor_changes: dict[str, Any], **policy_changes: Any) -> list[str]:
    m = monitor(**monitor_changes)
    return rule_form(m, effective_policy(m, [policy(**policy_changes)])).notes()


def test_a_default_monitor_and_its_thresholds_are_shared() -> None:
    assert _form({}) == []
    assert _form({"spec.mode": "inference", "spec.baseline.sigma": 4}, **THRESHOLD_80) == []
    assert _form({"spec.baseline.window": "60m"}, **{"spec.alerts": [{"name": "GPULost", "for": "0m"}]}) == []


CANNOT_SHARE = [
    ({"spec.exporter.scrapeInterval": "1m"}, {}, "ScrapeInterval", "spec.exporter.scrapeInterval 1m"),
    ({"spec.exporter.gpuBackend": "dcgm"}, {}, "DcgmBackend", "spec.exporter.gpuBackend dcgm"),
    ({"spec.baseline.window": "2h"}, {}, "BaselineRange", "spec.baseline.window 2h"),
    ({"spec.topology.rackLabel": "rack"}, {}, "RackLabel", "spec.topology.rackLabel rack"),
    (
        {},
        {"spec.runbookBaseUrl": "https://wiki.example.com/runbooks"},
        "RunbookURL",
        "a policy's spec.runbookBaseUrl",
    ),
    (
        {},
        {"spec.alerts": [{"name": "GPUThermalThrottling", "for": "2m"}]},
        "AlertFor",
        "GPUThermalThrottling: for 2m",
    ),
    (
        {},
        {"spec.alerts": [{"name": "GPUMemoryHigh", "severity": "P2"}]},
        "AlertSeverity",
        "GPUMemoryHigh: severity P2",
    ),
    (
        {},
        {"spec.alerts": [{"name": "GPUMemoryGrowthPredicted", "params": {"horizon_seconds": 600}}]},
        "LiteralParam",
        "GPUMemoryGrowthPredicted: horizon_seconds 600",
    ),
]
"""A monitor for each thing of catalog/rule_forms.py's list, the reason's name and its message's start."""


@pytest.mark.parametrize(("monitor_changes", "policy_changes", "reason", "message"), CANNOT_SHARE)
def test_what_no_series_can_carry_keeps_a_group_of_its_own(
    monitor_changes: dict[str, Any], policy_changes: dict[str, Any], reason: str, message: str
) -> None:
    m = monitor(**monitor_changes)
    pol = effective_policy(m, [policy(**policy_changes)])
    form = rule_form(m, pol)
    assert [r.kind.reason for r in form.reasons] == [reason]
    assert form.reasons[0].message.startswith(message)
    assert rules_status(m, pol, SHARED) == {
        "form": "own-group",
        "reasons": [{"reason": reason, "message": form.reasons[0].message}],
        "moreReasons": 0,
        "customRules": 0,
    }
    assert [g["name"] for g in monitor_groups(m, pol)] == ["trainguard.ml.llama-pretrain"]
    assert [labels["setting"] for _, labels, _ in published_series(m, pol)] == ["own_group"]


def test_every_reason_of_the_list_is_decided_and_the_docs_print_the_same_list() -> None:
    """One list (catalog/rule_forms.py): rule_form decides by each of its entries, the status names them,
    and docs/rendering.md prints it as it is."""
    assert {case[2] for case in CANNOT_SHARE} == set(NOT_SHARED_REASONS)
    docs = (Path(__file__).parents[2] / "docs" / "rendering.md").read_text()
    assert not_shared_markdown() in docs, "docs/rendering.md's list: paste not_shared_markdown()"
    assert f"other than the default, {DEFAULT_MONITOR.spec.exporter.scrape_interval}" in not_shared_markdown()


def test_the_status_lists_the_first_reasons_and_counts_the_rest() -> None:
    every_for = [{"name": a.name, "for": "17m"} for a in effective_policy(monitor(), []).enabled_alerts()]
    m = monitor()
    pol = effective_policy(m, [policy(**{"spec.alerts": every_for})])
    status = rules_status(m, pol, SHARED)
    assert status["form"] == "own-group" and len(status["reasons"]) == REASONS_MAX
    assert status["moreReasons"] == len(every_for) - REASONS_MAX


def test_the_per_monitor_form_says_so_whatever_the_monitor() -> None:
    m = monitor(**{"spec.exporter.scrapeInterval": "1m"})
    assert rules_status(m, effective_policy(m, []), PER_MONITOR) == {
        "form": "per-monitor",
        "reasons": [],
        "moreReasons": 0,
        "customRules": 0,
    }
    m = monitor()
    assert rules_status(m, effective_policy(m, []), SHARED) == {
        "form": "shared",
        "reasons": [],
        "moreReasons": 0,
        "customRules": 0,
    }


def test_custom_rules_get_a_group_of_their_own_and_the_rest_stays_shared() -> None:
    custom = {"name": "SlowSteps", "expr": "trainguard:train_step:rate{$selector} < 1", "severity": "P3"}
    m = monitor()
    pol = effective_policy(m, [policy(**{"spec.customRules": [custom]})])
    form = rule_form(m, pol)
    assert form.shared and form.notes() == ["1 custom rule(s) in a group of their own"]
    assert form.status() == {"form": "shared", "reasons": [], "moreReasons": 0, "customRules": 1}
    (group,) = monitor_groups(m, pol)
    assert [r["alert"] for r in group["rules"]] == ["SlowSteps"]
    assert 'training_job="llama-pretrain"' in group["rules"][0]["expr"]


def test_published_series_carry_the_monitors_namespace_apart_from_the_scrapes() -> None:
    m = monitor()
    samples = published_series(m, effective_policy(m, [policy(**THRESHOLD_80)]))
    assert all("namespace" not in labels and labels["monitor_namespace"] == "ml" for _, labels, _ in samples)
    assert (
        "trainguard_monitor_alert_threshold",
        {
            "monitor_namespace": "ml",
            "training_job": "llama-pretrain",
            "alertname": "GPUThermalThrottling",
            "param": "celsius",
        },
        80.0,
    ) in samples
    assert "namespace" in OPERATOR_SCRAPE
