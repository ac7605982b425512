"""Every catalogue alert, rendered and run through `promtool test rules`: it fires when it should and
stays quiet when it should not, including boundary values and baselines before and after warm-up."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import monitor, policy
from tests.render.alert_cases import CASES, ESCALATION_CASES, GPU, Case, only_alert, p, series
from tests.toolchains import promtool_test_rules
from trainguard.api.common import duration_seconds
from trainguard.catalog import ALERT_NAMES, ALERTS_BY_NAME, SEVERITIES
from trainguard.catalog.metrics import MONITOR_SETTINGS_PUBLISHED
from trainguard.catalog.severity import GRADE, MAPPED, SEVERITY, grade_of, severity_label
from trainguard.render import dump_yaml
from trainguard.render.policy import effective_policy
from trainguard.render.prometheus import rule_group
from trainguard.render.shared import monitor_groups, published_series, shared_groups

pytestmark = pytest.mark.tools


def rules(
    monitor_changes: dict[str, Any], severity_style: str = GRADE, **policy_changes: Any
) -> dict[str, Any]:
    m = monitor(**monitor_changes)
    group = rule_group(m, effective_policy(m, [policy(**policy_changes)]), severity_style)
    # promtool compares annotations too; their templates are checked in test_annotations_expand
    for rule in group["rules"]:
        rule.pop("annotations", None)
    return {"groups": [group]}


SPLIT = "shared-split"
SPLIT_PARTS = 4
FORMS = ("per-monitor", "shared", SPLIT)
"""The rule forms every case runs on: a group per monitor, the shared group, and the shared group in
SPLIT_PARTS groups (--shared-rule-groups)."""
OPERATOR_SCRAPE = {"namespace": "trainguard", "job": "trainguard-operator", "instance": "10.0.0.9:8081"}
"""The labels the scrape of the operator's metrics gives the series it publishes."""


def publisher_input(
    monitor_changes: dict[str, Any], samples: int, **policy_changes: Any
) -> list[dict[str, str]]:
    """What the operator publishes for the test monitor (render/shared.py's published_series), as
    promtool input series of `samples` samples at the test's interval."""
    m = monitor(**monitor_changes)
    published = published_series(m, effective_policy(m, [policy(**policy_changes)]))
    out = [series(name, OPERATOR_SCRAPE | labels, f"{v!r}x{samples}") for name, labels, v in published]
    return [*out, series(MONITOR_SETTINGS_PUBLISHED, OPERATOR_SCRAPE, f"1x{samples}")]


def shared_rules(
    monitor_changes: dict[str, Any], severity_style: str = GRADE, *, parts: int = 1, **policy_changes: Any
) -> dict[str, Any]:
    """The shared group, and the test monitor's own group when the shared form gives it one. In `parts`
    groups (--shared-rule-groups), the first of them, which records the inputs every other group reads,
    is put last: promtool evaluates the groups in the file's order at each step, so every other group
    reads the inputs one evaluation late, as it may in a Prometheus, where each group keeps its own
    schedule."""
    m = monitor(**monitor_changes)
    own = monitor_groups(m, effective_policy(m, [policy(**policy_changes)]), severity_style)
    shared = shared_groups(severity_style, parts)
    groups = [*shared[1:], *shared[:1], *own]
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    return {"groups": groups}


def form_rules(
    form: str, monitor_changes: dict[str, Any], severity_style: str = GRADE, **policy_changes: Any
) -> tuple[dict[str, Any], list[dict[str, str]] | None]:
    """The rule file of `form` for the test monitor, and for the shared form what the operator
    publishes, for every case's input (None: nothing to add)."""
    if form == "per-monitor":
        return rules(monitor_changes, severity_style, **policy_changes), None
    parts = SPLIT_PARTS if form == SPLIT else 1
    return shared_rules(monitor_changes, severity_style, parts=parts, **policy_changes), publisher_input(
        monitor_changes, 0, **policy_changes
    )


def _with_publisher(
    case: Case, published: list[dict[str, str]] | None, monitor_changes: dict[str, Any], **policy: Any
) -> list[dict[str, str]]:
    if published is None:
        return case.input
    # at the case's sample interval, past its last evaluation
    samples = int((duration_seconds(case.at) + 300) // duration_seconds(case.interval))
    return case.input + publisher_input(monitor_changes, samples, **policy)


def promtool_test(
    promtool: str,
    tmp: Path,
    rule_file: dict[str, Any],
    alertname: str,
    cases: list[Case],
    *,
    inputs: list[list[dict[str, str]]] | None = None,
) -> None:
    """Each case through `promtool test rules`; `inputs` replaces the cases' input series, one per case."""
    rules_file = only_alert(rule_file, alertname)
    (tmp / "rules.yml").write_text(dump_yaml(rules_file))
    tests = [
        {
            "name": case.why,
            "interval": case.interval,
            "input_series": case.input if inputs is None else inputs[i],
            "alert_rule_test": [
                {
                    "eval_time": case.at,
                    "alertname": alertname,
                    "exp_alerts": [{"exp_labels": labels} for labels in case.fires],
                }
            ],
        }
        for i, case in enumerate(cases)
    ]
    (tmp / "test.yml").write_text(
        dump_yaml(
            {
                "rule_files": ["rules.yml"],
                "evaluation_interval": "15s",
                # in the file's order (a group reading what another records at the same step): promtool
                # otherwise evaluates groups in map order, which varies from run to run
                "group_eval_order": [g["name"] for g in rules_file["groups"]],
                "tests": tests,
            }
        )
    )
    promtool_test_rules(promtool, tmp, alertname)


def test_every_catalogue_alert_has_a_firing_and_a_quiet_case() -> None:
    assert set(CASES) == set(ALERT_NAMES)
    for name, cases in CASES.items():
        assert any(c.fires for c in cases), f"{name} has no must-fire case"
        assert any(not c.fires for c in cases), f"{name} has no must-not-fire case"


def run_cases(
    promtool: str,
    tmp: Path,
    *,
    form: str,
    alertname: str,
    cases: list[Case],
    severity_style: str = GRADE,
    **policy_changes: Any,
) -> None:
    """The cases on `form`, one rule file per monitor they need; on the shared form each case's input
    gains what the operator publishes for that monitor and policy."""
    by_monitor: dict[str, list[Case]] = {}
    for case in cases:
        by_monitor.setdefault(json.dumps(case.monitor, sort_keys=True), []).append(case)
    for i, (changes, group) in enumerate(by_monitor.items()):
        d = tmp / str(i)
        d.mkdir()
        monitor_changes = json.loads(changes)
        rule_file, published = form_rules(form, monitor_changes, severity_style, **policy_changes)
        inputs = [_with_publisher(c, published, monitor_changes, **policy_changes) for c in group]
        promtool_test(promtool, d, rule_file, alertname, group, inputs=inputs)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("alertname", ALERT_NAMES)
def test_alert_fires_as_catalogued(promtool: str, tmp_path: Path, alertname: str, form: str) -> None:
    run_cases(promtool, tmp_path, form=form, alertname=alertname, cases=CASES[alertname])


MAPPED_SAMPLE = ("TrainingLossNonFinite", "GPUThermalThrottling", "DataLoaderSlow", "GPUMemoryHigh")
"""One alert of each grade, for the mapped style."""


def test_the_mapped_sample_has_every_grade() -> None:
    assert sorted(ALERTS_BY_NAME[a].severity for a in MAPPED_SAMPLE) == list(SEVERITIES)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("alertname", MAPPED_SAMPLE)
def test_mapped_style_fires_the_same_cases_with_the_mapped_severity(
    promtool: str, tmp_path: Path, alertname: str, form: str
) -> None:
    """The same must-fire and must-not-fire cases in the mapped style: the same alerts, the grade in
    `priority`, and `severity` the mapped word (critical, warning, warning, none)."""
    cases = [
        dataclasses.replace(
            case, fires=[f | {SEVERITY: severity_label(f[SEVERITY], MAPPED)} for f in case.fires]
        )
        for case in CASES[alertname]
    ]
    run_cases(promtool, tmp_path, form=form, alertname=alertname, cases=cases, severity_style=MAPPED)


@pytest.mark.parametrize("form", FORMS)
def test_rules_never_copy_a_p1_to_p0(promtool: str, tmp_path: Path, form: str) -> None:
    """A copied P0 rule escalated acknowledged and inhibited alerts alike, and then muted the job's
    other alerts; escalation is the operator's, from what Alertmanager shows (remediation/escalation)."""
    run_cases(promtool, tmp_path, form=form, alertname="GPUThermalThrottling", cases=ESCALATION_CASES)


def test_no_rendered_rule_carries_escalated_from() -> None:
    group = rules({}, **{"spec.escalation": {"enabled": True, "after": "5m"}})["groups"][0]
    assert [r["alert"] for r in group["rules"] if "escalated_from" in r.get("labels", {})] == []
    assert not [
        r
        for r in group["rules"]
        if grade_of(r.get("labels", {})) == "P0"
        and r["alert"] in {"GPUThermalThrottling", "GPUMemoryCritical"}
    ]


@pytest.mark.parametrize("form", FORMS)
def test_policy_threshold_override_moves_the_boundary(promtool: str, tmp_path: Path, form: str) -> None:
    override = {"spec.alerts": [{"name": "GPUThermalThrottling", "threshold": 80, "for": "2m"}]}
    cases = [
        Case("82 C now fires", "5m", [series("DCGM_FI_DEV_GPU_TEMP", GPU, "82x10")], [p("P1", GPU)]),
        Case("but only after the new for", "1m", [series("DCGM_FI_DEV_GPU_TEMP", GPU, "82x10")]),
    ]
    run_cases(promtool, tmp_path, form=form, alertname="GPUThermalThrottling", cases=cases, **override)


@pytest.mark.parametrize("form", FORMS)
def test_policy_threshold_alone_moves_the_boundary(promtool: str, tmp_path: Path, form: str) -> None:
    """A threshold without a new `for`: on the shared form, a published series and no group of its own."""
    override = {"spec.alerts": [{"name": "GPUThermalThrottling", "threshold": 80}]}
    cases = [
        Case("82 C fires at 80", "5m", [series("DCGM_FI_DEV_GPU_TEMP", GPU, "82x10")], [p("P1", GPU)]),
        Case("79 C does not", "5m", [series("DCGM_FI_DEV_GPU_TEMP", GPU, "79x10")]),
    ]
    run_cases(promtool, tmp_path, form=form, alertname="GPUThermalThrottling", cases=cases, **override)


@pytest.mark.parametrize("form", FORMS)
def test_disabled_alert_never_fires(promtool: str, tmp_path: Path, form: str) -> None:
    override = {"spec.alerts": [{"name": "GPUThermalThrottling", "enabled": False}]}
    case = Case("disabled", "5m", [series("DCGM_FI_DEV_GPU_TEMP", GPU, "99x10")])
    run_cases(promtool, tmp_path, form=form, alertname="GPUThermalThrottling", cases=[case], **override)


@pytest.mark.parametrize("form", FORMS)
def test_dcgm_backend_joins_exporter_series_to_the_job(promtool: str, tmp_path: Path, form: str) -> None:
    dcgm_gpu = {"namespace": "ml", "pod": "llama-0", "gpu": "0", "UUID": "GPU-0000", "Hostname": "gpu-node-1"}
    info = {"namespace": "ml", "training_job": "llama-pretrain", "pod": "llama-0", "node": "gpu-node-1"}
    other_pod = dcgm_gpu | {"pod": "unrelated-0"}
    case = Case(
        "dcgm-exporter series get training_job and node from the sidecar's info series",
        "2m",
        [
            series("DCGM_FI_DEV_FB_USED", dcgm_gpu, "96x5"),
            series("DCGM_FI_DEV_FB_FREE", dcgm_gpu, "4x5"),
            series("DCGM_FI_DEV_FB_USED", other_pod, "99x5"),
            series("DCGM_FI_DEV_FB_FREE", other_pod, "1x5"),
            series("trainguard_exporter_info", info | {"driver_version": "550.54"}, "1x5"),
        ],
        [p("P1", dcgm_gpu | {"training_job": "llama-pretrain", "node": "gpu-node-1"})],
        monitor={"spec.exporter.gpuBackend": "dcgm"},
    )
    run_cases(promtool, tmp_path, form=form, alertname="GPUMemoryCritical", cases=[case])
