"""--rule-form: per-monitor by default; with shared, a monitor's PrometheusRule keeps only what the shared
group cannot judge, and the shared group is one object in the operator's namespace."""

from __future__ import annotations

import pytest

from tests.conftest import POLICY, monitor, monitor_body, policy
from tests.kube.fakes import FakeKube
from trainguard.cli import build_parser
from trainguard.controller.reconcile import reconcile_monitor
from trainguard.controller.run import OperatorOptions, apply_shared_rules
from trainguard.render.kubernetes import prometheus_rule, shared_prometheus_rule
from trainguard.render.policy import effective_policy
from trainguard.render.shared import RULE_FORMS, SHARED_GROUP, SHARED_RULE_NAME


def test_per_monitor_is_the_default_and_both_forms_are_taken() -> None:
    assert build_parser().parse_args(["operator"]).rule_form == "per-monitor"
    for form in RULE_FORMS:
        assert build_parser().parse_args(["operator", "--rule-form", form]).rule_form == form


def test_another_value_is_refused_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["operator", "--rule-form", "both"])
    assert "--rule-form" in capsys.readouterr().err


def _groups(form: str, **monitor_changes: str) -> list[str]:
    m = monitor(**monitor_changes)
    rule = prometheus_rule(m, effective_policy(m, [policy()]), rule_form=form)
    return [g["name"] for g in rule["spec"]["groups"]]


def test_a_shared_monitors_rule_holds_only_its_aggregates() -> None:
    assert _groups("per-monitor") == [
        "trainguard.ml.llama-pretrain",
        "trainguard.ml.llama-pretrain.longterm",
    ]
    assert _groups("shared") == ["trainguard.ml.llama-pretrain.longterm"]
    slow = {"spec.exporter.scrapeInterval": "1m"}
    assert _groups("shared", **slow) == _groups("per-monitor", **slow)


def test_the_shared_rule_is_one_object_in_the_operators_namespace() -> None:
    rule = shared_prometheus_rule("trainguard-system", object_labels={"release": "kube-prometheus-stack"})
    assert rule["metadata"]["namespace"] == "trainguard-system"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert [g["name"] for g in rule["spec"]["groups"]] == [SHARED_GROUP]


def test_reconcile_applies_the_shared_forms_rule() -> None:
    kube = FakeKube(POLICY)
    reconcile_monitor(kube, kube, monitor_body(), rule_form="shared")  # type: ignore[arg-type]
    applied = kube.objects[("PrometheusRule", "ml", "trainguard-llama-pretrain")]
    assert [g["name"] for g in applied["spec"]["groups"]] == ["trainguard.ml.llama-pretrain.longterm"]


def test_the_operator_applies_the_shared_rule_in_its_namespace() -> None:
    kube = FakeKube()
    apply_shared_rules(kube, OperatorOptions(namespace="tg", rule_form="shared"))  # type: ignore[arg-type]
    rule = kube.objects[("PrometheusRule", "tg", SHARED_RULE_NAME)]
    assert [g["name"] for g in rule["spec"]["groups"]] == [SHARED_GROUP]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"  # the default object labels


def test_the_status_says_which_form_the_rules_take_and_why() -> None:
    """status.rules: per-monitor under that form; under the shared form, shared, or own-group with each
    reason of catalog/rule_forms.py's list that applies, written with the rest of the status."""
    kube = FakeKube(POLICY)
    body = monitor_body()
    status = reconcile_monitor(kube, kube, body)  # type: ignore[arg-type]
    # every field, zeros too, as the apiserver stores it after its defaults: a steady resync writes nothing
    assert status["rules"] == {"form": "per-monitor", "reasons": [], "moreReasons": 0, "customRules": 0}
    assert kube.status is not None and kube.status["rules"] == status["rules"]
    assert reconcile_monitor(kube, kube, body, rule_form="shared")["rules"] == {
        "form": "shared",
        "reasons": [],
        "moreReasons": 0,
        "customRules": 0,
    }  # type: ignore[arg-type]
    slow = monitor_body(exporter={"scrapeInterval": "1m", "gpuBackend": "dcgm"})
    rules = reconcile_monitor(FakeKube(POLICY), kube, slow, rule_form="shared")["rules"]  # type: ignore[arg-type]
    assert rules["form"] == "own-group"
    assert [r["reason"] for r in rules["reasons"]] == ["ScrapeInterval", "DcgmBackend"]
    assert rules["reasons"][0]["message"].startswith("spec.exporter.scrapeInterval 1m")


def test_the_shared_rule_groups_flag_is_one_by_default_and_bounded(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert build_parser().parse_args(["operator"]).shared_rule_groups == 1
    assert build_parser().parse_args(["operator", "--shared-rule-groups", "4"]).shared_rule_groups == 4
    for bad in ("0", "17", "two"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["operator", "--shared-rule-groups", bad])
        assert "--shared-rule-groups" in capsys.readouterr().err


def test_split_groups_without_the_shared_form_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["operator", "--shared-rule-groups", "3"])
    with pytest.raises(SystemExit) as exc:
        args.func(args)
    assert exc.value.code == 2
    assert "--rule-form shared" in capsys.readouterr().err


def test_shared_annotation_lookups_without_the_shared_form_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = build_parser().parse_args(["operator", "--shared-annotation-lookups"])
    with pytest.raises(SystemExit) as exc:
        args.func(args)
    assert exc.value.code == 2
    assert "--rule-form shared" in capsys.readouterr().err


@pytest.mark.parametrize("lookups", [False, True])
def test_the_operator_looks_the_shared_annotations_up_only_when_asked(lookups: bool) -> None:
    assert build_parser().parse_args(["operator"]).shared_annotation_lookups is False
    kube = FakeKube()
    apply_shared_rules(
        kube, OperatorOptions(namespace="tg", rule_form="shared", shared_annotation_lookups=lookups)
    )  # type: ignore[arg-type]
    rule = kube.objects[("PrometheusRule", "tg", SHARED_RULE_NAME)]
    notes = [r["annotations"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert any("| query" in v for n in notes for v in n.values()) is lookups


def test_the_operator_applies_the_shared_rule_in_as_many_groups_as_asked() -> None:
    kube = FakeKube()
    opts = OperatorOptions(namespace="tg", rule_form="shared", shared_rule_groups=3)
    apply_shared_rules(kube, opts)  # type: ignore[arg-type]
    rule = kube.objects[("PrometheusRule", "tg", SHARED_RULE_NAME)]
    assert [g["name"] for g in rule["spec"]["groups"]] == [
        SHARED_GROUP,
        f"{SHARED_GROUP}.1",
        f"{SHARED_GROUP}.2",
    ]
    assert all(g["partial_response_strategy"] == "warn" for g in rule["spec"]["groups"])
