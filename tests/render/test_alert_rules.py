"""Every catalogue alert, rendered and run through `promtool test rules`: it fires when it should and
stays quiet when it should not, including boundary values and baselines before and after warm-up."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import monitor, policy
from tests.render.alert_cases import CASES, ESCALATION_CASES, GPU, Case, only_alert, p, series
from trainguard.catalog import ALERT_NAMES, ALERTS_BY_NAME, SEVERITIES
from trainguard.catalog.severity import GRADE, MAPPED, SEVERITY, grade_of, severity_label
from trainguard.render import dump_yaml
from trainguard.render.policy import effective_policy
from trainguard.render.prometheus import rule_group

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


def promtool_test(
    promtool: str, tmp: Path, rule_file: dict[str, Any], alertname: str, cases: list[Case]
) -> None:
    (tmp / "rules.yml").write_text(dump_yaml(only_alert(rule_file, alertname)))
    tests = [
        {
            "name": case.why,
            "interval": case.interval,
            "input_series": case.input,
            "alert_rule_test": [
                {
                    "eval_time": case.at,
                    "alertname": alertname,
                    "exp_alerts": [{"exp_labels": labels} for labels in case.fires],
                }
            ],
        }
        for case in cases
    ]
    (tmp / "test.yml").write_text(
        dump_yaml({"rule_files": ["rules.yml"], "evaluation_interval": "15s", "tests": tests})
    )
    result = subprocess.run(
        [promtool, "test", "rules", "test.yml"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, (
        f"promtool test rules failed for {alertname}:\n{result.stdout}\n{result.stderr}"
    )


def test_every_catalogue_alert_has_a_firing_and_a_quiet_case() -> None:
    assert set(CASES) == set(ALERT_NAMES)
    for name, cases in CASES.items():
        assert any(c.fires for c in cases), f"{name} has no must-fire case"
        assert any(not c.fires for c in cases), f"{name} has no must-not-fire case"


@pytest.mark.parametrize("alertname", ALERT_NAMES)
def test_alert_fires_as_catalogued(promtool: str, tmp_path: Path, alertname: str) -> None:
    by_monitor: dict[str, list[Case]] = {}
    for case in CASES[alertname]:
        by_monitor.setdefault(json.dumps(case.monitor, sort_keys=True), []).append(case)
    for i, (changes, cases) in enumerate(by_monitor.items()):
        d = tmp_path / str(i)
        d.mkdir()
        promtool_test(promtool, d, rules(json.loads(changes)), alertname, cases)


MAPPED_SAMPLE = ("TrainingLossNonFinite", "GPUThermalThrottling", "DataLoaderSlow", "GPUMemoryHigh")
"""One alert of each grade, for the mapped style."""


def test_the_mapped_sample_has_every_grade() -> None:
    assert sorted(ALERTS_BY_NAME[a].severity for a in MAPPED_SAMPLE) == list(SEVERITIES)


@pytest.mark.parametrize("alertname", MAPPED_SAMPLE)
def test_mapped_style_fires_the_same_cases_with_the_mapped_severity(
    promtool: str, tmp_path: Path, alertname: str
) -> None:
    """The same must-fire and must-not-fire cases in the mapped style: the same alerts, the grade in
    `priority`, and `severity` the mapped word (critical, warning, warning, none)."""
    by_monitor: dict[str, list[Case]] = {}
    for case in CASES[alertname]:
        fires = [f | {SEVERITY: severity_label(f[SEVERITY], MAPPED)} for f in case.fires]
        by_monitor.setdefault(json.dumps(case.monitor, sort_keys=True), []).append(
            dataclasses.replace(case, fires=fires)
        )
    for i, (changes, cases) in enumerate(by_monitor.items()):
        d = tmp_path / str(i)
        d.mkdir()
        promtool_test(promtool, d, rules(json.loads(changes), MAPPED), alertname, cases)


def test_rules_never_copy_a_p1_to_p0(promtool: str, tmp_path: Path) -> None:
    """A copied P0 rule escalated acknowledged and inhibited alerts alike, and then muted the job's
    other alerts; escalation is the operator's, from what Alertmanager shows (remediation/escalation)."""
    promtool_test(promtool, tmp_path, rules({}), "GPUThermalThrottling", ESCALATION_CASES)


def test_no_rendered_rule_carries_escalated_from() -> None:
    group = rules({}, **{"spec.escalation": {"enabled": True, "after": "5m"}})["groups"][0]
    assert [r["alert"] for r in group["rules"] if "escalated_from" in r.get("labels", {})] == []
    assert not [
        r
        for r in group["rules"]
        if grade_of(r.get("labels", {})) == "P0"
        and r["alert"] in {"GPUThermalThrottling", "GPUMemoryCritical"}
    ]


def test_policy_threshold_override_moves_the_boundary(promtool: str, tmp_path: Path) -> None:
    override = {"spec.alerts": [{"name": "GPUThermalThrottling", "threshold": 80, "for": "2m"}]}
    cases = [
        Case("82 C now fires", "5m", [series("DCGM_FI_DEV_GPU_TEMP", GPU, "82x10")], [p("P1", GPU)]),
        Case("but only after the new for", "1m", [series("DCGM_FI_DEV_GPU_TEMP", GPU, "82x10")]),
    ]
    promtool_test(promtool, tmp_path, rules({}, **override), "GPUThermalThrottling", cases)


def test_disabled_alert_never_fires(promtool: str, tmp_path: Path) -> None:
    override = {"spec.alerts": [{"name": "GPUThermalThrottling", "enabled": False}]}
    case = Case("disabled", "5m", [series("DCGM_FI_DEV_GPU_TEMP", GPU, "99x10")])
    promtool_test(promtool, tmp_path, rules({}, **override), "GPUThermalThrottling", [case])


def test_dcgm_backend_joins_exporter_series_to_the_job(promtool: str, tmp_path: Path) -> None:
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
    )
    promtool_test(
        promtool, tmp_path, rules({"spec.exporter.gpuBackend": "dcgm"}), "GPUMemoryCritical", [case]
    )
