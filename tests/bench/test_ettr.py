"""bench/ettr.py's simulation: what each condition does to ETTR, and how it reads its measured inputs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from bench.ettr import (
    DAY_S,
    LLAMA3_INTERRUPTIONS,
    LLAMA3_TABLE,
    MINUTE_S,
    Inputs,
    Scenario,
    cadence_sweep,
    checkpoint_bound,
    load_inputs,
    optimum,
    simulate,
    summarise,
)

INPUTS = Inputs(
    detect_s={"xid-79": 9.0, "ecc-dbe": 14.0, "node-down": 45.0, "stall": 310.0, "pod-state": 2.0},
    respond_node_s=22.0,
    respond_restart_s=20.0,
)
SEEDS = range(1, 6)


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


def test_a_seed_gives_the_same_job_and_another_seed_another() -> None:
    s = Scenario()
    assert simulate(s, INPUTS, seed=7) == simulate(s, INPUTS, seed=7)
    assert simulate(s, INPUTS, seed=7) != simulate(s, INPUTS, seed=8)


def test_slower_detection_lowers_ettr() -> None:
    fast = summarise(replace(Scenario(), detect_override_s=15.0), INPUTS, SEEDS)
    slow = summarise(replace(Scenario(), detect_override_s=15 * MINUTE_S), INPUTS, SEEDS)
    assert slow.ettr_mean < fast.ettr_mean - 0.02
    assert slow.down_h > fast.down_h


def test_a_30_minute_human_response_lowers_ettr_below_the_operators() -> None:
    operator = summarise(Scenario(), INPUTS, SEEDS)
    human = summarise(replace(Scenario(), human_s=30 * MINUTE_S), INPUTS, SEEDS)
    assert human.ettr_mean < operator.ettr_mean - 0.05


def test_without_a_spare_pool_node_faults_wait_for_a_node() -> None:
    spare = summarise(Scenario(), INPUTS, SEEDS)
    none = summarise(replace(Scenario(), spare_pool=False), INPUTS, SEEDS)
    assert none.ettr_mean < spare.ettr_mean
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


def test_measured_inputs_are_read_and_the_rest_said_to_be_assumed(tmp_path: Path) -> None:
    pipeline, detection = tmp_path / "pipeline.json", tmp_path / "detection.json"
    assert load_inputs(pipeline, detection).sources["xid-79"].startswith("assumed")
    detection.write_text(json.dumps({"catalogue": {"classes": {"xid-79": {"median_delay_s": 8.5}}}}))
    pipeline.write_text(json.dumps({
        "paths": {"fast path": {"action_p50_s": 0.5, "cordon_p50_s": 1.5, "resumed_p50_s": 21.0}},
        "classes": {"oom-killed": {"paths": {"operator (pod state)": {"action_p50_s": 1.0, "resumed_p50_s": 19.0}}}},
    }))  # fmt: skip
    got = load_inputs(pipeline, detection)
    assert got.detect_s["xid-79"] == 8.5 and got.sources["xid-79"].startswith("measured")
    assert got.sources["ecc-dbe"].startswith("assumed")
    assert got.respond_node_s == pytest.approx(20.5)
    assert got.detect_s["pod-state"] == 1.0 and got.respond_restart_s == pytest.approx(18.0)
