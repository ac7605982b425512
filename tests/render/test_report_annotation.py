"""Every alert says how to open its diagnostic report: a P2's is written by the operator into a ConfigMap
(controller/report.py), found by the labels it carries; any alert's is built on demand by the CLI."""

from __future__ import annotations

from tests.conftest import MONITOR, monitor, policy
from trainguard.controller import report
from trainguard.render.policy import effective_policy
from trainguard.render.prometheus import REPORT_SEVERITY, rule_group


def annotations() -> dict[str, tuple[str, str]]:
    m = monitor()
    group = rule_group(m, effective_policy(m, [policy()]))
    return {r["alert"]: (r["labels"]["severity"], r["annotations"]["report_command"]) for r in group["rules"]
            if "alert" in r}  # fmt: skip


def test_a_p2_points_at_the_configmap_by_the_labels_the_operator_gives_it() -> None:
    assert REPORT_SEVERITY == report.REPORT_SEVERITY
    severity, command = annotations()["DataLoaderSlow"]
    assert severity == "P2"
    body = MONITOR | {"metadata": MONITOR["metadata"] | {"uid": "u-1"}}
    labels = report.report_configmap(
        body, "cm", {"alertname": "DataLoaderSlow"}, report.Report("md", "html")
    )["metadata"]["labels"]
    # the template's label values, as Prometheus expands them for this monitor's alert
    expanded = command.replace("{{ $labels.training_job }}", "llama-pretrain").replace(
        "{{ $labels.namespace }}", "ml"
    )
    selector = ",".join(f"{k}={v}" for k, v in labels.items() if k.startswith("trainguard.io/"))
    assert f"kubectl get configmaps -n ml -l {selector} " in expanded
    assert "trainguard report --monitor ml/llama-pretrain --alert DataLoaderSlow -o report.html" in expanded


def test_other_severities_get_the_on_demand_command_only() -> None:
    for name, (severity, command) in annotations().items():
        if severity != "P2":
            assert command.startswith("trainguard report --monitor") and "kubectl" not in command, name
