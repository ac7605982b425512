"""The time a checkpoint write blocks the trainer reaches the sidecar: Reporter.saving() and
checkpoint_saved(seconds=...), and the Hugging Face, Lightning and torch integrations that time their
saves (the exporter's trainguard_checkpoint_save_seconds_total, docs/diagnosis.md "Goodput")."""

from __future__ import annotations

import importlib
import time
import types
from typing import Any

import pytest

from tests.sdk.fakes import AcceleratedOptimizer, Precision, Recorder, hf_callback_kwargs, lightning_trainer

WRITE_S = 0.05


def test_saving_reports_its_start_then_the_checkpoint_with_the_seconds_it_blocked() -> None:
    rec = Recorder()
    with rec.saving(100, "full", "/ckpt/100"):
        assert [e["type"] for e in rec.events][-1] == "saving"  # told before the write ends
        time.sleep(WRITE_S)
    (ckpt,) = rec.reports("checkpoint")
    assert (ckpt["step"], ckpt["kind"], ckpt["path"], ckpt["ok"]) == (100, "full", "/ckpt/100", True)
    assert ckpt["seconds"] >= WRITE_S


def test_a_write_that_raises_is_reported_failed_with_its_time_and_the_error_goes_on() -> None:
    rec = Recorder()
    with pytest.raises(OSError), rec.saving(7, "incremental", "/ckpt/7"):
        time.sleep(WRITE_S)
        raise OSError("disk full")
    (ckpt,) = rec.reports("checkpoint")
    assert ckpt["ok"] is False and ckpt["seconds"] >= WRITE_S


@pytest.mark.parametrize("seconds", [None, "slow", float("nan"), -1.0])
def test_a_save_time_that_is_no_duration_is_left_out_and_the_checkpoint_kept(seconds: Any) -> None:
    rec = Recorder()
    rec.checkpoint_saved(5, "full", "/ckpt/5", seconds=seconds)
    (ckpt,) = rec.reports("checkpoint")
    assert ckpt["step"] == 5 and "seconds" not in ckpt


def test_a_save_time_given_is_sent() -> None:
    rec = Recorder()
    rec.checkpoint_saved(5, "full", "/ckpt/5", seconds=12.5)
    assert rec.reports("checkpoint")[0]["seconds"] == 12.5


def test_huggingface_times_the_save_from_the_last_event_before_it(fake_torch: types.ModuleType) -> None:
    hf = importlib.import_module("trainguard.sdk.huggingface")
    rec = Recorder()
    cb = hf.TrainguardCallback(rec)
    kwargs = hf_callback_kwargs(AcceleratedOptimizer(None))
    args = types.SimpleNamespace(output_dir="/out")
    state = types.SimpleNamespace(global_step=500)
    control = types.SimpleNamespace(should_save=True, should_training_stop=False)  # HF's own cadence
    cb.on_step_begin(args, state, control, **kwargs)
    cb.on_step_end(args, state, control, **kwargs)
    assert rec.events[-1]["type"] == "saving"
    time.sleep(1.0)  # an evaluation before the save: not the save's time
    cb.on_evaluate(args, state, control, **kwargs)
    time.sleep(WRITE_S)  # the Trainer writes the checkpoint
    cb.on_save(args, state, control, **kwargs)
    (ckpt,) = rec.reports("checkpoint")
    assert ckpt["path"] == "/out/checkpoint-500" and WRITE_S <= ckpt["seconds"] < 1.0


def test_huggingface_announces_an_epoch_save_once(fake_torch: types.ModuleType) -> None:
    """save_strategy "epoch": the save is asked for at the epoch's end, after the step's."""
    hf = importlib.import_module("trainguard.sdk.huggingface")
    rec = Recorder()
    cb = hf.TrainguardCallback(rec)
    kwargs = hf_callback_kwargs(AcceleratedOptimizer(None))
    args = types.SimpleNamespace(output_dir="/out")
    state = types.SimpleNamespace(global_step=901)  # not on the SDK's own cadence (every 10 here)
    control = types.SimpleNamespace(should_save=False, should_training_stop=False)
    cb.on_step_begin(args, state, control, **kwargs)
    cb.on_step_end(args, state, control, **kwargs)
    assert rec.reports("saving") == []
    control.should_save = True  # DefaultFlowCallback.on_epoch_end
    cb.on_epoch_end(args, state, control, **kwargs)
    cb.on_epoch_end(args, state, control, **kwargs)  # told twice, announced once
    time.sleep(WRITE_S)
    cb.on_save(args, state, control, **kwargs)
    assert len(rec.reports("saving")) == 1 and rec.reports("checkpoint")[0]["seconds"] >= WRITE_S


def test_huggingface_without_a_save_announced_reports_no_time(fake_torch: types.ModuleType) -> None:
    hf = importlib.import_module("trainguard.sdk.huggingface")
    rec = Recorder()
    cb = hf.TrainguardCallback(rec)
    state = types.SimpleNamespace(global_step=3)
    control = types.SimpleNamespace(should_save=False, should_training_stop=False)
    cb.on_save(types.SimpleNamespace(output_dir="/out"), state, control)
    assert "seconds" not in rec.reports("checkpoint")[0]
    assert rec.reports("saving") == []


def test_lightning_times_its_own_saves(fake_torch: types.ModuleType) -> None:
    pl = importlib.import_module("trainguard.sdk.lightning")
    rec = Recorder()
    rec._control["checkpoint"] = "full"  # the operator asked for one
    cb = pl.TrainguardCallback(rec, grad_norm=False)
    trainer = lightning_trainer(Precision(), old_style=False)
    written: list[str] = []

    def save_checkpoint(path: str, weights_only: bool = False) -> None:
        time.sleep(WRITE_S)
        written.append(path)

    trainer.save_checkpoint = save_checkpoint
    cb.on_train_start(trainer, None)
    trainer.global_step = 1
    cb.on_train_batch_end(trainer, None, {"loss": 0.5}, None, 0)
    (ckpt,) = rec.reports("checkpoint")
    assert written == [ckpt["path"]] and ckpt["kind"] == "full" and ckpt["seconds"] >= WRITE_S
    assert len(rec.reports("saving")) == 1


def test_torch_save_is_timed(fake_torch: types.ModuleType) -> None:
    saved: list[tuple[Any, str]] = []

    def save(obj: Any, path: str) -> None:
        time.sleep(WRITE_S)
        saved.append((obj, path))

    fake_torch.save = save  # type: ignore[attr-defined]
    tt = importlib.import_module("trainguard.sdk.torch")
    rec = Recorder()
    tt.save(rec, {"w": 1}, "/ckpt/9.pt", step=9)
    (ckpt,) = rec.reports("checkpoint")
    assert saved == [({"w": 1}, "/ckpt/9.pt")]
    assert (ckpt["step"], ckpt["kind"], ckpt["seconds"] >= WRITE_S) == (9, "full", True)
