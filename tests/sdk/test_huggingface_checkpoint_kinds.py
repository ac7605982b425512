"""The Hugging Face callback reports each save with the kind that was asked for at its step."""

from __future__ import annotations

import importlib
import types
from typing import Any

from tests.sdk.fakes import Recorder


def run_steps(cb: Any, steps: range, hf_saves_at: tuple[int, ...] = ()) -> None:
    """What transformers' Trainer does per optimizer step: on_step_begin, on_step_end (its own
    DefaultFlowCallback runs first and sets should_save on HF's save_steps cadence), then the save
    and on_save when should_save is set (CallbackHandler.on_save clears should_save first)."""
    args = types.SimpleNamespace(output_dir="/out")
    for n in steps:
        state = types.SimpleNamespace(global_step=n)
        control = types.SimpleNamespace(should_save=n in hf_saves_at, should_training_stop=False)
        cb.on_step_begin(args, state, control)
        cb.on_step_end(args, state, control)
        if control.should_save:
            control.should_save = False
            cb.on_save(args, state, control)


def test_saves_on_the_reporter_cadence_keep_their_kind(fake_torch: types.ModuleType) -> None:
    hf = importlib.import_module("trainguard.sdk.huggingface")
    rec = Recorder()  # incremental every 10, full every 100
    run_steps(hf.TrainguardCallback(rec), range(1, 101))
    saved = [(c["step"], c["kind"], c["path"]) for c in rec.reports("checkpoint")]
    assert saved == [(n, "incremental", f"/out/checkpoint-{n}") for n in range(10, 100, 10)] + [
        (100, "full", "/out/checkpoint-100")
    ]


def test_a_save_on_hf_own_cadence_is_full(fake_torch: types.ModuleType) -> None:
    hf = importlib.import_module("trainguard.sdk.huggingface")
    rec = Recorder()
    run_steps(hf.TrainguardCallback(rec), range(1, 21), hf_saves_at=(15, 20))
    saved = [(c["step"], c["kind"]) for c in rec.reports("checkpoint")]
    assert saved == [(10, "incremental"), (15, "full"), (20, "full")], (
        "HF writes model, optimizer and scheduler: at 20 the incremental asked for is inside a full save"
    )
