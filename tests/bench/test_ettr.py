"""bench/ettr.py's simulation: what each condition does to ETTR, where the lost time goes, and how it reads
its measured inputs (and refuses to run without them)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from bench.ettr import (
    AT_CHECKPOINT,
    DAY_S,
    GANG,
    IN_PLACE,
    LLAMA3_INTERRUPTIONS,
    LLAMA3_TABLE,
    MINUTE_S,
    NOTIFY,
    REPLACE_POD,
    RESPONSES,
    RESTART_RECREATE_ALL,
    SDC_DETECT,
    SLOW_DETECT,
    SPARE_ROW,
    TARGET,
    Category,
    InputError,
    Inputs,
    NotMeasured,
    Scenario,
    cadence_sweep,
    checkpoint_bound,
    downtime_parts,
    holds_back,
    load_inputs,
    losses,
    main,
    optimum,
    rows,
    simulate,
    simulate_slow,
    summarise,
)

INPUTS = Inputs(
    detect_s={
        "xid-79": 9.0,
        "ecc-dbe": 14.0,
        "node-down": 45.0,
        "stall": 310.0,
        "pod-state": 2.0,
        "launcher": 0.2,
    },
    respond_s={RESPONSES[GANG, True]: 22.0, RESPONSES[GANG, False]: 40.0, RESPONSES[IN_PLACE, False]: 0.6},
)
SEEDS = range(1, 6)
XID = next(c for c in LLAMA3_TABLE if c.detected_by == "xid-79")
BUG = next(c for c in LLAMA3_TABLE if c.name == "Software Bug")
SDC = next(c for c in LLAMA3_TABLE if c.detected_by == "sdc")


def test_the_table_is_llama_3s_419_interruptions() -> None:
    assert sum(c.count for c in LLAMA3_TABLE) == LLAMA3_INTERRUPTIONS


def test_without_faults_ettr_is_the_checkpoint_overhead_bound() -> None:
    s = Scenario(rate_per_gpu_day=0.0, checkpoint_every_s=600, checkpoint_stall_s=30)
    r = simulate(s, INPUTS, seed=1)
    assert r.faults == 0 and r.redone_s == 0 and r.down_s == 0
    cycle = s.checkpoint_every_s + s.checkpoint_stall_s
    assert checkpoint_bound(s) == pytest.approx(600 / 630)
    assert abs(r.ettr - checkpoint_bound(s)) <= cycle / (s.days * DAY_S)


def test_the_published_rate_gives_about_the_published_number_of_faults() -> None:
    r = simulate(Scenario(), INPUTS, seed=3)
    # faults strike only while the job runs, so a little fewer than 419 in 54 wall-clock days
    assert 330 < r.faults <= 470
    assert r.productive_s + r.redone_s + r.stall_s + r.down_s == pytest.approx(r.wall_s)
    assert sum(r.parts_s.values()) == pytest.approx(r.down_s)


def test_a_seed_gives_the_same_job_and_another_seed_another() -> None:
    s = Scenario()
    assert simulate(s, INPUTS, seed=7) == simulate(s, INPUTS, seed=7)
    assert simulate(s, INPUTS, seed=7) != simulate(s, INPUTS, seed=8)


def test_a_gang_restart_costs_detection_measured_response_and_the_cited_recreate_all() -> None:
    parts = downtime_parts(XID, Scenario(), INPUTS)
    assert parts["detect"] == 9.0 and parts["respond"] == 22.0
    assert parts["restart"] == RESTART_RECREATE_ALL.value and parts["wait"] == 0.0
    crash = downtime_parts(BUG, Scenario(), INPUTS)
    assert crash["detect"] == 2.0 and crash["respond"] == 40.0  # the operator's pod watch, the Job controller


def test_in_place_takes_the_launchers_detection_and_response_and_its_own_restart_at_scale() -> None:
    s = Scenario(crash_mode=IN_PLACE, crash_restart_s=150.0)
    assert downtime_parts(BUG, s, INPUTS) == {"detect": 0.2, "detect_sdc": 0.0, "respond": 0.6, "wait": 0.0, "restart": 150.0}  # fmt: skip
    assert downtime_parts(XID, s, INPUTS)["respond"] == 22.0  # a node fault still restarts the gang


def test_a_mode_no_benchmark_measured_is_not_measured_never_guessed() -> None:
    with pytest.raises(NotMeasured, match="replace pod"):
        downtime_parts(XID, Scenario(node_mode=REPLACE_POD), INPUTS)
    with pytest.raises(ValueError, match="does not apply"):
        downtime_parts(BUG, Scenario(crash_mode=REPLACE_POD), INPUTS)
    assert isinstance(rows(INPUTS)[SPARE_ROW], str)
    measured = replace(INPUTS, respond_s={**INPUTS.respond_s, RESPONSES[REPLACE_POD, True]: 5.0})
    spare = rows(measured)[SPARE_ROW]
    assert isinstance(spare, Scenario)
    assert downtime_parts(XID, spare, measured)["respond"] == 5.0


def test_silent_data_corruption_is_counted_apart_as_assumed() -> None:
    parts = downtime_parts(SDC, Scenario(), INPUTS)
    assert parts["detect"] == 0.0 and parts["detect_sdc"] == SDC_DETECT.value


def test_slower_detection_lowers_ettr() -> None:
    fast = summarise(replace(Scenario(), detect_override_s=15.0), INPUTS, SEEDS)
    slow = summarise(replace(Scenario(), detect_override_s=15 * MINUTE_S), INPUTS, SEEDS)
    assert slow.ettr_mean < fast.ettr_mean - 0.02
    assert slow.parts_h["detect"] > fast.parts_h["detect"]


def test_a_30_minute_human_response_lowers_ettr_below_the_operators() -> None:
    operator = summarise(Scenario(), INPUTS, SEEDS)
    human = summarise(replace(Scenario(), human_s=30 * MINUTE_S), INPUTS, SEEDS)
    assert human.ettr_mean < operator.ettr_mean - 0.05


def test_without_a_spare_pool_node_faults_wait_for_a_node() -> None:
    spare = summarise(Scenario(), INPUTS, SEEDS)
    none = summarise(replace(Scenario(), spare_pool=False), INPUTS, SEEDS)
    assert none.ettr_mean < spare.ettr_mean and none.parts_h["wait"] > 0 == spare.parts_h["wait"]
    nodeless = tuple(replace(c, needs_node=False) for c in LLAMA3_TABLE)
    s = replace(Scenario(), spare_pool=False)
    assert simulate(s, INPUTS, 1, nodeless) == simulate(Scenario(), INPUTS, 1, nodeless)


def test_an_emergency_checkpoint_that_keeps_the_work_saves_the_redo() -> None:
    kept = summarise(replace(Scenario(), emergency_saves=1.0), INPUTS, SEEDS)
    base = summarise(Scenario(), INPUTS, SEEDS)
    assert kept.redone_h < base.redone_h / 2 and kept.ettr_mean > base.ettr_mean


def test_the_checkpoint_cadence_has_an_interior_optimum() -> None:
    cadences = [m * MINUTE_S for m in (1, 5, 10, 15, 30, 120)]
    sweep = cadence_sweep(Scenario(), INPUTS, SEEDS, cadences)
    best, _ = optimum(sweep)
    assert cadences[0] < best < cadences[-1]
    e = [r.ettr_mean for _, r in sweep]
    assert e[0] < max(e) and e[-1] < max(e)


def test_the_losses_account_for_all_the_time_not_kept_and_name_what_holds_a_row_back() -> None:
    r = summarise(Scenario(), INPUTS, SEEDS)
    assert sum(losses(r).values()) == pytest.approx(1 - r.ettr_mean)
    back = holds_back(r)
    assert r.ettr_mean < TARGET and back
    assert [v for _, v in back] == sorted((v for _, v in back), reverse=True)
    assert {k for k, _ in back} >= {"redone", "stall", "restart", "detect", "respond", "detect_sdc"}
    ideal = summarise(Scenario(rate_per_gpu_day=0.0, checkpoint_stall_s=1.0), INPUTS, SEEDS)
    assert ideal.ettr_mean >= TARGET and holds_back(ideal) == []


def test_each_fault_loses_its_downtime_and_at_most_a_cadence_of_work() -> None:
    table = (Category("only", 1, "xid-79", True),)
    s = Scenario(gpus=1, days=1.0, rate_per_gpu_day=24.0, checkpoint_every_s=600, checkpoint_stall_s=0.0)
    r = simulate(s, INPUTS, seed=2, table=table)
    per_fault = 9.0 + 22.0 + RESTART_RECREATE_ALL.value
    assert r.faults > 5
    assert (r.faults - 1) * per_fault <= r.down_s <= r.faults * per_fault + 1e-6  # the last may be cut short
    assert r.parts_s["restart"] == pytest.approx(r.down_s * RESTART_RECREATE_ALL.value / per_fault)
    assert 0 < r.redone_s < r.faults * 600


# ---- the measured inputs -----------------------------------------------------------------------------


def results(tmp_path: Path, **extra: Any) -> tuple[Path, Path, Path]:
    pipeline, detection, rip = tmp_path / "pipeline.json", tmp_path / "detection.json", tmp_path / "rip.json"
    classes = {k: {"median_delay_s": v} for k, v in {"xid-79": 8.5, "ecc-dbe": 14.0, "node-down": 40.0, "stall": 300.0}.items()}  # fmt: skip
    detection.write_text(json.dumps({"catalogue": {"classes": classes}}))
    pipeline.write_text(json.dumps({
        "paths": {"fast path": {"action_p50_s": 0.5, "cordon_p50_s": 1.5, "resumed_p50_s": 21.0}},
        "classes": {"oom-killed": {"paths": {"operator (pod state)": {"action_p50_s": 1.0, "resumed_p50_s": 19.0}}},
                    **extra.get("pipeline_classes", {})},
    }))  # fmt: skip
    rip.write_text(json.dumps({"cases": [
        {"fault": "oom", "mode": "in place", "action_p50_s": 0.25, "resumed_p50_s": 0.75},
        {"fault": "oom", "mode": "gang restart", "action_p50_s": 2.0, "resumed_p50_s": 50.0},
        *extra.get("cases", []),
    ]}))  # fmt: skip
    return pipeline, detection, rip


def test_measured_inputs_are_read_with_their_sources(tmp_path: Path) -> None:
    got = load_inputs(*results(tmp_path))
    assert got.detect_s["xid-79"] == 8.5 and got.sources["xid-79"].startswith("measured: detection.json")
    assert got.respond_s[RESPONSES[GANG, True]] == pytest.approx(20.5)
    assert got.detect_s["pod-state"] == 1.0 and got.respond_s[RESPONSES[GANG, False]] == pytest.approx(18.0)
    assert got.detect_s["launcher"] == 0.25 and got.respond_s[RESPONSES[IN_PLACE, False]] == pytest.approx(
        0.5
    )
    assert RESPONSES[REPLACE_POD, True] not in got.respond_s
    assert got.sources[RESPONSES[REPLACE_POD, True]].startswith("not measured")


@pytest.mark.parametrize(
    "extra",
    [
        {"cases": [{"fault": "xid-79", "mode": "replace pod, warm spare", "action_p50_s": 0.1, "resumed_p50_s": 6.1}]},
        {"pipeline_classes": {"xid-79": {"paths": {"fast path, ReplacePod": {"action_p50_s": 0.1, "resumed_p50_s": 6.1}}}}},
    ],
)  # fmt: skip
def test_a_pod_replaced_on_a_warm_spare_is_taken_where_a_result_holds_it(tmp_path: Path, extra: dict[str, Any]) -> None:  # fmt: skip
    got = load_inputs(*results(tmp_path, **extra))
    assert got.respond_s[RESPONSES[REPLACE_POD, True]] == pytest.approx(6.0)
    assert got.sources[RESPONSES[REPLACE_POD, True]].startswith("measured")


def test_a_replace_pod_case_of_a_crash_is_not_a_node_fault_figure(tmp_path: Path) -> None:
    extra = {"cases": [{"fault": "oom", "mode": "replace pod", "action_p50_s": 0.1, "resumed_p50_s": 6.1}]}
    assert RESPONSES[REPLACE_POD, True] not in load_inputs(*results(tmp_path, **extra)).respond_s


@pytest.mark.parametrize(("which", "command"), [
    (0, "python bench/pipeline.py"), (1, "python bench/detection.py"), (2, "python bench/restart_in_place.py"),
])  # fmt: skip
def test_a_missing_result_file_is_named_with_the_command_that_writes_it(tmp_path: Path, which: int, command: str) -> None:  # fmt: skip
    paths = results(tmp_path)
    paths[which].unlink()
    with pytest.raises(InputError, match=rf"{paths[which].name}: not found; it is written by `{command}"):
        load_inputs(*paths)


def test_a_result_without_a_figure_names_the_file_and_the_key(tmp_path: Path) -> None:
    pipeline, detection, rip = results(tmp_path)
    detection.write_text(json.dumps({"catalogue": {"classes": {"xid-79": {"median_delay_s": 8.5}}}}))
    with pytest.raises(InputError, match=r"detection.json: no .*'ecc-dbe'.*python bench/detection.py"):
        load_inputs(pipeline, detection, rip)
    pipeline2, detection2, rip2 = results(tmp_path)
    rip2.write_text(json.dumps({"cases": []}))
    with pytest.raises(InputError, match="no case with fault 'oom' and mode 'in place'"):
        load_inputs(pipeline2, detection2, rip2)


def test_the_script_exits_2_naming_the_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline, detection, rip = results(tmp_path)
    rip.unlink()
    argv = ["--pipeline", str(pipeline), "--detection", str(detection), "--restart-in-place", str(rip),
            "--json", str(tmp_path / "out.json"), "--runs", "1"]  # fmt: skip
    assert main(argv) == 2
    assert "rip.json: not found" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_the_script_reports_each_row_and_says_what_is_not_measured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    pipeline, detection, rip = results(tmp_path)
    out = tmp_path / "out.json"
    argv = ["--pipeline", str(pipeline), "--detection", str(detection), "--restart-in-place", str(rip),
            "--json", str(out), "--runs", "2"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["rows"][SPARE_ROW] == {"not_measured": doc["inputs"]["sources"][RESPONSES[REPLACE_POD, True]]}
    assert "not measured" in printed and "KEP-467" in printed and "TrainMover" in printed
    assert doc["target"]["met"] is False and doc["target"]["what_it_takes"] >= TARGET
    today = doc["rows"]["today: gang restart by new pods (the Job controller)"]
    assert today["holds_back"][0] in today["losses"] and today["checkpoint_every_s"] > 0


def test_the_in_place_figures_are_the_jobs_not_another_owners(tmp_path: Path) -> None:
    """restart_in_place.json holds the same fault and mode on a TrainJob too: a row of its own."""
    extra = {"cases": [{"owner": "TrainJob", "fault": "oom", "mode": "in place", "action_p50_s": 9.0, "resumed_p50_s": 19.0}]}  # fmt: skip
    got = load_inputs(*results(tmp_path, **extra))
    assert got.detect_s["launcher"] == 0.25 and got.respond_s[RESPONSES[IN_PLACE, False]] == pytest.approx(
        0.5
    )


# ---- slow, not dead ----------------------------------------------------------------------------------


def test_slow_episodes_are_paired_across_actions_and_replacing_bounds_each_slow_spell() -> None:
    base = Scenario(checkpoint_every_s=10 * MINUTE_S)
    notify = simulate_slow(NOTIFY, base, 200.0, seed=3)
    at_ckpt = simulate_slow(AT_CHECKPOINT, base, 200.0, seed=3)
    assert notify.episodes == at_ckpt.episodes > 0, "the same episodes under either action"
    assert notify.replaced == 0 and 0 < at_ckpt.replaced <= at_ckpt.episodes
    assert at_ckpt.slow_h < notify.slow_h
    longest = SLOW_DETECT.value + base.checkpoint_every_s
    assert at_ckpt.slow_h * 3600 <= at_ckpt.episodes * longest, "never slow past detection + one cadence"
    assert simulate_slow(AT_CHECKPOINT, base, 200.0, seed=3) == at_ckpt, "deterministic for a seed"


def test_replacing_costs_more_than_it_saves_when_the_slowdown_is_small_and_the_restart_dear() -> None:
    base = Scenario(checkpoint_every_s=10 * MINUTE_S)
    dear = 3 * 3600.0
    notify = simulate_slow(NOTIFY, base, dear, seed=1, factor=0.01)
    at_ckpt = simulate_slow(AT_CHECKPOINT, base, dear, seed=1, factor=0.01)
    assert at_ckpt.lost_h > notify.lost_h
    assert (
        simulate_slow(AT_CHECKPOINT, base, 200.0, seed=1, factor=0.2).lost_h
        < simulate_slow(NOTIFY, base, 200.0, seed=1, factor=0.2).lost_h
    )
