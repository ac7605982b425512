"""The Hugging Face and Lightning callbacks report the fp16 loss scale every step and the allocator's
fragmentation every FRAGMENTATION_EVERY steps, only where CUDA exists.

Stand-ins (tests/sdk/fakes.py), because what these read needs a GPU: fp16 loss scaling in accelerate
and Lightning runs on CUDA only, and the allocator statistics are CUDA's. The callbacks on CPU, and
fragmentation reported as unavailable there, are tested on the real frameworks in tests/sdk_frameworks."""

from __future__ import annotations

import importlib
import types

import pytest

from tests.sdk.fakes import (
    AcceleratedOptimizer,
    Cuda,
    GradScaler,
    MixedPrecision,
    Precision,
    Recorder,
    hf_callback_kwargs,
    lightning_trainer,
)
from trainguard.sdk import torch_state


def hf_steps(cb: object, steps: range, optimizer: object) -> None:
    for n in steps:
        state = types.SimpleNamespace(global_step=n)
        control = types.SimpleNamespace(should_save=False, should_training_stop=False)
        cb.on_step_begin(None, state, control, **hf_callback_kwargs(optimizer))  # type: ignore[attr-defined]
        cb.on_step_end(None, state, control, **hf_callback_kwargs(optimizer))  # type: ignore[attr-defined]


def test_huggingface_reports_the_fp16_loss_scale(fake_torch: types.ModuleType) -> None:
    hf = importlib.import_module("trainguard.sdk.huggingface")
    rec = Recorder()
    cb = hf.TrainguardCallback(rec)
    scaler = GradScaler(65536.0)
    hf_steps(cb, range(1, 3), AcceleratedOptimizer(scaler))
    scaler.update(32768.0)  # an overflow halved it
    hf_steps(cb, range(3, 4), AcceleratedOptimizer(scaler))
    assert [e.get("loss_scale") for e in rec.reports("step")] == [65536.0, 65536.0, 32768.0]


@pytest.mark.parametrize("scaler", [None, GradScaler(enabled=False)], ids=["bf16", "disabled"])
def test_huggingface_without_loss_scaling_reports_no_scale(
    fake_torch: types.ModuleType, scaler: GradScaler | None
) -> None:
    hf = importlib.import_module("trainguard.sdk.huggingface")
    rec = Recorder()
    hf_steps(hf.TrainguardCallback(rec), range(1, 3), AcceleratedOptimizer(scaler))
    assert [e.get("loss_scale") for e in rec.reports("step")] == [None, None]


@pytest.mark.parametrize(
    "old_style", [True, False], ids=["trainer.precision_plugin", "strategy.precision_plugin"]
)
@pytest.mark.parametrize(
    ("plugin", "expected"),
    [(MixedPrecision("16-mixed", GradScaler(1024.0)), 1024.0), (MixedPrecision("bf16-mixed", None), None),
     (Precision(), None)],
    ids=["16-mixed", "bf16-mixed", "32-true"],
)  # fmt: skip
def test_lightning_reports_the_loss_scale_of_its_precision_plugin(
    fake_torch: types.ModuleType, old_style: bool, plugin: object, expected: float | None
) -> None:
    pl = importlib.import_module("trainguard.sdk.lightning")
    rec = Recorder()
    cb = pl.TrainguardCallback(rec)
    trainer = lightning_trainer(plugin, old_style=old_style, global_step=0)
    cb.on_train_start(trainer, None)
    trainer.global_step = 1
    cb.on_train_batch_end(trainer, None, {"loss": 0.5}, None, 0)
    assert rec.reports("step")[0].get("loss_scale") == expected


def test_huggingface_samples_fragmentation_of_the_gpus_in_use_every_50_steps(
    fake_torch: types.ModuleType,
) -> None:
    fake_torch.cuda = Cuda(available=True, count=2, used={1: (4000, 3000)})  # type: ignore[attr-defined]
    hf = importlib.import_module("trainguard.sdk.huggingface")
    rec = Recorder()
    hf_steps(hf.TrainguardCallback(rec), range(1, 121), AcceleratedOptimizer(None))
    assert [(e["gpu"], e["ratio"]) for e in rec.reports("fragmentation")] == [(1, 0.25)] * 3, (
        "steps 1, 51 and 101; GPU 0 is another rank's"
    )
    assert fake_torch.cuda.stats_calls == 3 * 2


def test_lightning_samples_fragmentation_once_per_50_optimizer_steps_under_accumulation(
    fake_torch: types.ModuleType,
) -> None:
    fake_torch.cuda = Cuda(available=True, count=1, used={0: (1000, 900)})  # type: ignore[attr-defined]
    pl = importlib.import_module("trainguard.sdk.lightning")
    rec = Recorder()
    cb = pl.TrainguardCallback(rec)
    for batch_idx in range(400):  # 4 batches per optimizer step
        trainer = lightning_trainer(Precision(), old_style=False, global_step=batch_idx // 4)
        cb.on_train_batch_end(trainer, None, {"loss": 0.5}, None, batch_idx)
    assert [e["ratio"] for e in rec.reports("fragmentation")] == pytest.approx([0.1, 0.1])


def test_fragmentation_carries_the_pod_level_gpu_index(
    fake_torch: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_torch.cuda = Cuda(available=True, count=1, used={0: (1000, 500)})  # type: ignore[attr-defined]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    rec = Recorder()
    torch_state.report_fragmentation(rec)
    assert [(e["gpu"], e["ratio"]) for e in rec.reports("fragmentation")] == [(3, 0.5)]
    assert torch_state.gpu_index(1, "2,5") == 5
    assert torch_state.gpu_index(0, "GPU-8f2c,GPU-11aa") == 0, "UUIDs: the CUDA index stays"
    assert torch_state.gpu_index(0, None) == 0


def test_a_scaler_that_fails_costs_the_reading_not_the_step() -> None:
    class Broken:
        def is_enabled(self) -> bool:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    assert torch_state.loss_scale(Broken()) is None
    assert torch_state.huggingface_loss_scale({"optimizer": AcceleratedOptimizer(Broken())}) is None  # type: ignore[arg-type]
