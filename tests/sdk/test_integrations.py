"""The framework integrations, against stand-ins for torch, transformers and lightning (none of them
is installed here; tests/sdk/fakes.py says what each stand-in carries)."""

from __future__ import annotations

import importlib
import types

from tests.sdk.fakes import Cuda, GradScaler, Recorder


def test_torch_fragmentation_and_loss_scale(fake_torch: types.ModuleType) -> None:
    fake_torch.cuda = Cuda(available=True, count=2, used={0: (1000, 750), 1: (1000, 750)})  # type: ignore[attr-defined]
    tt = importlib.import_module("trainguard.sdk.torch")
    assert tt.fragmentation(0) == 0.25
    rec = Recorder()
    tt.report_fragmentation(rec)
    assert [(e["gpu"], e["ratio"]) for e in rec.reports("fragmentation")] == [(0, 0.25), (1, 0.25)]
    assert tt.loss_scale(GradScaler(65536.0)) == 65536.0
    assert tt.loss_scale(GradScaler(enabled=False)) is None


def test_huggingface_callback(fake_torch: types.ModuleType) -> None:
    hf = importlib.import_module("trainguard.sdk.huggingface")
    rec = Recorder()
    cb = hf.TrainguardCallback(rec, tokens_per_step=4096)
    state = types.SimpleNamespace(global_step=10)
    control = types.SimpleNamespace(should_save=False, should_training_stop=False)
    cb.on_step_begin(None, state, control)
    cb.on_step_end(None, state, control)
    assert control.should_save, "step 10 is on the incremental cadence"
    cb.on_log(None, state, control, logs={"loss": 1.5, "grad_norm": 0.7})
    cb.on_save(types.SimpleNamespace(output_dir="/out"), state, control)
    reports = [e for e in rec.events if e["type"] != "hello"]
    assert [e["type"] for e in reports] == ["step", "step", "checkpoint"]
    assert reports[1]["loss"] == 1.5 and reports[2]["path"] == "/out/checkpoint-10"


def test_lightning_callback(fake_torch: types.ModuleType) -> None:
    pl = importlib.import_module("trainguard.sdk.lightning")
    rec = Recorder()
    cb = pl.TrainguardCallback(rec, tokens_per_batch=2048)
    trainer = types.SimpleNamespace(global_step=3, should_stop=False, ckpt_path="/ckpt/3")
    loss = types.SimpleNamespace(detach=lambda: types.SimpleNamespace(item=lambda: 0.5))
    cb.on_train_batch_start(trainer, None, None, 0)
    cb.on_train_batch_end(trainer, None, {"loss": loss}, None, 0)
    cb.on_save_checkpoint(trainer, None, {})
    reports = [e for e in rec.events if e["type"] != "hello"]
    assert reports[0]["loss"] == 0.5 and reports[0]["tokens"] == 2048
    assert reports[1] == reports[1] | {"type": "checkpoint", "path": "/ckpt/3", "kind": "full"}
