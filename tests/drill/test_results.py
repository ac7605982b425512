"""The drill's verdicts and its report."""

from __future__ import annotations

import json

import yaml

from trainguard.drill.clients import delivered, train_step
from trainguard.drill.results import (
    Cleanup,
    Outcome,
    StageResult,
    render,
    render_json,
    render_plan,
    render_table,
)
from trainguard.drill.scenarios import Stage


def outcome(*stages: StageResult, cordoned: list[str] | None = None, dry_run: bool = True) -> Outcome:
    return Outcome("nan", "ml/llama", "sidecar injection", "sidecar llama-0 (node-a)", dry_run, 30.0,
                   list(stages), Cleanup(cleared=["llama-0"], dry_run="restored (false)"), cordoned or [])  # fmt: skip


def test_a_stage_passes_within_its_target_fails_past_it_or_unseen_and_is_na_when_not_expected() -> None:
    assert StageResult(Stage.ALERT, True, 29.9, 30.0).verdict == "pass"
    assert StageResult(Stage.ALERT, True, 30.1, 30.0).verdict == "fail"
    assert StageResult(Stage.ALERT, True, None, 30.0).verdict == "fail"
    assert StageResult(Stage.RESUMED, False, None, 300.0).verdict == "n/a"


def test_the_drill_passes_only_when_every_stage_that_applies_passes() -> None:
    ok = outcome(StageResult(Stage.ALERT, True, 3.0, 30.0), StageResult(Stage.RESUMED, False, None, 300.0))
    assert ok.passed
    assert not outcome(
        StageResult(Stage.ALERT, True, 3.0, 30.0), StageResult(Stage.ACTION, True, None, 30.0)
    ).passed


def test_a_node_cordoned_in_dry_run_or_a_cleanup_problem_fails_the_drill() -> None:
    stage = StageResult(Stage.ALERT, True, 3.0, 30.0)
    assert not outcome(stage, cordoned=["node-a"]).passed
    assert outcome(stage, cordoned=["node-a"], dry_run=False).passed, "with --allow-actions it may cordon"
    o = outcome(stage)
    o.cleanup.problems.append("faults still active on llama-0")
    assert not o.passed and "faults still active on llama-0" in o.problems


def test_the_table_shows_each_stage_cleanup_and_the_result() -> None:
    text = render_table(outcome(StageResult(Stage.ALERT, True, 2.25, 30.0, "TrainingLossNonFinite active"),
                                StageResult(Stage.RESUMED, False, None, 300.0, "not expected")))  # fmt: skip
    assert "alert " in text and "2.2s" in text and "30s" in text and "pass" in text
    assert "resumed" in text and "n/a" in text
    assert "dryRun restored (false)" in text and "faults cleared on 1 sidecar(s)" in text
    assert text.rstrip().endswith("result: PASS")


def test_json_has_every_stage_with_its_verdict() -> None:
    data = json.loads(render_json(outcome(StageResult(Stage.ALERT, True, None, 30.0))))
    assert data["result"] == "fail"
    assert data["stages"] == [{"stage": "alert", "applies": True, "seconds": None, "target_s": 30.0, "note": "",
                               "verdict": "fail"}]  # fmt: skip


def test_o_prints_the_table_or_the_same_data_as_json_or_yaml() -> None:
    o = outcome(StageResult(Stage.ALERT, True, 2.25, 30.0))
    assert render(o, "table") == render_table(o)
    as_json = json.loads(render(o, "json"))
    assert yaml.safe_load(render(o, "yaml")) == as_json
    assert as_json["stages"][0]["stage"] == "alert" and as_json["result"] == "pass"


def test_a_dry_runs_plan_is_lines_or_data() -> None:
    lines = ["scenario nan: a NaN loss", "expected action: RestartGang"]
    assert (
        render_plan("nan", "ml/llama", lines, "table")
        == "scenario nan: a NaN loss\nexpected action: RestartGang\n"
    )
    data = {"scenario": "nan", "monitor": "ml/llama", "plan": lines}
    assert json.loads(render_plan("nan", "ml/llama", lines, "json")) == data
    assert yaml.safe_load(render_plan("nan", "ml/llama", lines, "yaml")) == data


def test_delivered_notifications_leave_out_the_operators_receiver_where_alertmanager_names_it() -> None:
    old = 'alertmanager_notifications_total{integration="webhook"} 5\nalertmanager_notifications_failed_total{integration="webhook"} 1\n'
    assert delivered(old) == 4
    new = (
        'alertmanager_notifications_total{integration="webhook",receiver_name="ml/llama/trainguard-operator"} 7\n'
        'alertmanager_notifications_total{integration="webhook",receiver_name="ml/llama/phone"} 2\n'
        'alertmanager_notifications_total{integration="email",receiver_name="ml/llama/email"} 1\n'
        "# HELP alertmanager_notifications_total whatever\n"
    )
    assert delivered(new) == 3


def test_the_training_step_is_read_from_the_exposition() -> None:
    text = '# TYPE trainguard_train_step gauge\ntrainguard_train_step{namespace="ml",pod="p"} 1234\n'
    assert train_step(text) == 1234
    assert train_step("trainguard_train_step_total 5\n") is None
