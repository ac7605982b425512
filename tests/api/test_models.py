"""The CR models: defaults as documented, and every validation error names its field."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import MONITOR, POLICY, merged, monitor, policy
from trainguard.api import InvalidInput, duration_seconds, format_duration, load_documents, parse_object
from trainguard.api.common import LabelSelector


def problems(obj: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidInput) as exc:
        parse_object(obj)
    return {p.path: p.message for p in exc.value.problems}


def test_monitor_defaults_follow_the_architecture() -> None:
    m = monitor()
    s = m.spec
    assert s.mode == "training"
    assert s.warmup_steps() == 1000
    assert s.baseline.sigma == 3
    assert (s.checkpoint.incremental_every_steps, s.checkpoint.full_every_steps) == (100, 1000)
    assert s.exporter.port == 9400
    assert s.remediation.dry_run is False
    assert s.remediation.actions.non_finite_loss == "PauseAndPinCheckpoint"
    assert s.remediation.actions.node_fault == "CheckpointCordonReschedule"


def test_warmup_default_depends_on_mode_unless_set() -> None:
    assert monitor(**{"spec.mode": "finetuning"}).spec.warmup_steps() == 100
    assert (
        monitor(**{"spec.mode": "finetuning", "spec.baseline": {"warmupSteps": 7}}).spec.warmup_steps() == 7
    )


def test_policy_defaults() -> None:
    p = policy().spec
    assert p.escalation.after == "15m"
    assert p.quiet_hours.allowlist == [
        "GPUMemoryCritical",
        "GPUNodeDown",
        "GPUOutOfMemory",
        "TrainingInterrupted",
    ]
    assert p.inhibition.node_down and p.inhibition.job_p0


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [
        ({"spec.baseline": {"sigma": -1}}, "spec.baseline.sigma", "greater than 0"),
        ({"spec.mode": "pretraining"}, "spec.mode", "'training', 'finetuning' or 'inference'"),
        (
            {"spec.exporter": {"gpuBackend": "rocm"}},
            "spec.exporter.gpuBackend",
            "'nvml', 'dcgm' or 'simulated'",
        ),
        ({"spec.exporter": {"scrapeInterval": "15 seconds"}}, "spec.exporter.scrapeInterval", "pattern"),
        ({"spec.exporter": {"port": 80}}, "spec.exporter.port", "greater than or equal to 1024"),
        (
            {"spec.checkpoint": {"incrementalEverySteps": 300, "fullEverySteps": 1000}},
            "spec.checkpoint",
            "must be a multiple of incrementalEverySteps",
        ),
        ({"spec.selector": {}}, "spec", "selector must name at least one label"),
        ({"spec.gpusPerPod": 9000}, "spec.gpusPerPod", "less than or equal to 64"),
        ({"spec.policyRefs": [{"name": "Bad_Name"}]}, "spec.policyRefs[0].name", "pattern"),
        (
            {"spec.baseline": {"window": "1h", "offset": "2h"}},
            "spec.baseline",
            "offset must be shorter than window",
        ),
        (
            {"spec.workloadRef": {"kind": "Deployment", "name": "x"}},
            "spec.workloadRef.kind",
            "'Job', 'JobSet'",
        ),
        ({"spec.replicas": 3}, "spec.replicas", "unknown field"),
        ({"metadata.name": "A" * 70}, "metadata.name", "at most 63"),
    ],
)
def test_invalid_monitor_names_the_field(changes: dict[str, Any], path: str, fragment: str) -> None:
    found = problems(merged(MONITOR, **changes))
    assert path in found, found
    assert fragment in found[path]


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [
        ({"spec.alerts": [{"name": "GPUMemoryCritcal"}]}, "spec.alerts[0].name", "GPUMemoryCritical"),
        (
            {"spec.alerts": [{"name": "GPUMemoryHang", "params": {"utilisation": 20}}]},
            "spec.alerts[0]",
            "its parameters: ratio, utilization",
        ),
        ({"spec.alerts": [{"name": "GPUMemoryHang", "severity": "P5"}]}, "spec.alerts[0].severity", "'P0'"),
        (
            {"spec.alerts": [{"name": "GradientExplosion", "threshold": 3}]},
            "spec.alerts[0]",
            "baseline settings",
        ),
        (
            {"spec.receivers": [{"name": "im", "type": "slack"}]},
            "spec.receivers[0]",
            "needs url or urlSecretRef",
        ),
        (
            {"spec.receivers": [{"name": "pd", "type": "pagerduty"}]},
            "spec.receivers[0]",
            "routingKeySecretRef",
        ),
        (
            {"spec.receivers": [{"name": "mail", "type": "email", "to": "a@b.c"}]},
            "spec.receivers[0]",
            "to, from and smarthost",
        ),
        (
            {"spec.receivers": [{"name": "x", "type": "webhook", "url": "ftp://example"}]},
            "spec.receivers[0].url",
            "pattern",
        ),
        ({"spec.routes": [{"severity": "P0", "receivers": ["pager"]}]}, "spec", "pager is not a receiver"),
        ({"spec.quietHours": {"timezone": "Mars/Olympus"}}, "spec.quietHours.timezone", "unknown time zone"),
        ({"spec.quietHours": {"start": "25:00"}}, "spec.quietHours.start", "pattern"),
        (
            {
                "spec.maintenanceWindows": [
                    {
                        "name": "mw",
                        "start": "2026-12-01T06:00:00Z",
                        "end": "2026-12-01T02:00:00Z",
                        "nodes": ["n1"],
                    }
                ]
            },
            "spec.maintenanceWindows[0]",
            "end must be after start",
        ),
        (
            {
                "spec.maintenanceWindows": [
                    {"name": "mw", "start": "2026-12-01T02:00:00", "end": "2026-12-01T06:00:00Z"}
                ]
            },
            "spec.maintenanceWindows[0].start",
            "timezone",
        ),
        (
            {"spec.customRules": [{"name": "GPUNodeDown", "expr": "up == 0", "severity": "P0"}]},
            "spec.customRules[0].name",
            "is a catalogue alert",
        ),
        (
            {
                "spec.customRules": [
                    {"name": "Mine", "expr": "up == 0", "severity": "P1", "labels": {"severity": "x"}}
                ]
            },
            "spec.customRules[0].labels",
            "must not set severity",
        ),
    ],
)
def test_invalid_policy_names_the_field(changes: dict[str, Any], path: str, fragment: str) -> None:
    found = problems(merged(POLICY, **changes))
    assert path in found, found
    assert fragment in found[path]


def test_every_problem_is_reported_at_once() -> None:
    found = problems(
        merged(MONITOR, **{"spec.baseline": {"sigma": 0}, "spec.gpusPerPod": -1, "spec.bogus": 1})
    )
    assert {"spec.baseline.sigma", "spec.gpusPerPod", "spec.bogus"} <= set(found)


def test_wrong_api_version_and_kind() -> None:
    assert (
        "must be trainguard.io/v1alpha1"
        in problems(merged(MONITOR, apiVersion="trainguard.io/v1"))["apiVersion"]
    )
    assert "must be one of" in problems(merged(MONITOR, kind="Monitor"))["kind"]


def test_documents_cross_references_are_checked() -> None:
    text = "\n---\n".join(
        [
            "apiVersion: trainguard.io/v1alpha1\nkind: TrainingJobMonitor\nmetadata: {name: a, namespace: ml}\n"
            "spec: {selector: {matchLabels: {app: a}}, policyRefs: [{name: missing}]}",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}",
        ]
    )
    with pytest.raises(InvalidInput) as exc:
        load_documents([("f.yaml", text)])
    (problem,) = exc.value.problems
    assert problem.path == "spec.policyRefs[0].name"
    assert "AlertPolicy ml/missing is not in the input" in problem.message
    assert str(problem).startswith("f.yaml#1 TrainingJobMonitor ml/a: spec.policyRefs[0].name:")


def test_other_kinds_are_skipped_not_rejected() -> None:
    docs = load_documents([("f.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")])
    assert docs.skipped == ["f.yaml: ConfigMap"]


def test_broken_yaml_is_a_problem_not_a_crash() -> None:
    with pytest.raises(InvalidInput) as exc:
        load_documents([("bad.yaml", "spec: [unclosed")])
    assert "not valid YAML" in exc.value.problems[0].message


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("5m", 300), ("1h30m", 5400), ("1d", 86400), ("500ms", 0.5)]
)
def test_durations(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


def test_bad_duration_says_what_is_allowed() -> None:
    with pytest.raises(ValueError, match="such as 30s"):
        duration_seconds("5 minutes")


def test_format_duration() -> None:
    assert [format_duration(s) for s in (0, 59, 60, 90, 3600, 16 * 60, 86400 + 1)] == [
        "0s",
        "59s",
        "1m",
        "1m30s",
        "1h",
        "16m",
        "1d1s",
    ]


def test_label_selector_semantics() -> None:
    sel = LabelSelector.model_validate(
        {
            "matchLabels": {"app": "x"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}],
        }
    )
    assert sel.matches({"app": "x", "tier": "a"})
    assert not sel.matches({"app": "x", "tier": "c"})
    assert not sel.matches({"app": "y", "tier": "a"})
    assert not LabelSelector().matches({"app": "x"}), "an empty selector must match nothing"
