"""Every alert says how to open its diagnostic report: a P2's is written by the operator into a ConfigMap
(diagnosis/configmap.py) under the name its `report_configmap` annotation gives; any alert's is built on demand by the CLI."""

from __future__ import annotations

from tests.conftest import monitor, policy
from trainguard.diagnosis import configmap as report
from trainguard.render.policy import effective_policy
from trainguard.render.prometheus import REPORT_SEVERITY, rule_group


def annotations() -> dict[str, tuple[str, str]]:
    m = monitor()
    group = rule_group(m, effective_policy(m, [policy()]))
    return {r["alert"]: (r["labels"]["severity"], r["annotations"]["report_command"]) for r in group["rules"]
            if "alert" in r}  # fmt: skip


def test_a_p2_points_at_the_configmap_by_the_name_the_operator_gives_it() -> None:
    """The name's expansion is checked against diagnosis/configmap.report_name by promtool in
    tests/controller/test_report_name.py; here, that the command opens that ConfigMap."""
    assert REPORT_SEVERITY == report.REPORT_SEVERITY
    m = monitor()
    group = rule_group(m, effective_policy(m, [policy()]))
    [rule] = [r for r in group["rules"] if r.get("alert") == "DataLoaderSlow"]
    assert rule["labels"]["severity"] == "P2"
    name, command = rule["annotations"]["report_configmap"], rule["annotations"]["report_command"]
    assert "training_job" in name and "DataLoaderSlow" in name
    expanded = command.replace("{{ $labels.training_job }}", "llama-pretrain").replace(
        "{{ $labels.namespace }}", "ml"
    )
    assert expanded.startswith(f"kubectl get configmap -n ml {name} -o jsonpath='{{.data.report\\.html}}'")
    assert "trainguard report --monitor ml/llama-pretrain --alert DataLoaderSlow --out-dir report" in expanded


def test_other_severities_get_the_on_demand_command_only() -> None:
    for name, (severity, command) in annotations().items():
        if severity != "P2":
            assert command.startswith("trainguard report --monitor") and "kubectl" not in command, name
