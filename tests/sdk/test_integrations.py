"""The framework integrations, against minimal stand-ins for torch, transformers and lightning
(none of them is installed here; the stand-ins carry only what the integrations call)."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from trainguard.sdk import Reporter


class Recorder(Reporter):
    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:9", start=False, incremental_every=10, full_every=100)
        self.events: list[dict[str, Any]] = []

    def _put(self, event: dict[str, Any]) -> None:
        self.events.append(event)


@pytest.fixture
def fake_frameworks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        memory_stats=lambda device: {"reserved_bytes.all.current": 1000, "allocated_bytes.all.current": 750},
        device_count=lambda: 2,
    )
    transformers = types.ModuleType("transformers")
    transformers.TrainerCallback = object  # type: ignore[attr-defined]
    lightning = types.ModuleType("lightning")
    pytorch = types.ModuleType("lightning.pytorch")
    callbacks = types.ModuleType("lightning.pytorch.callbacks")
    callbacks.Callback = object  # type: ignore[attr-defined]
    for name, mod in {"torch": torch, "transformers": transformers, "lightning": lightning,
                      "lightning.pytorch": pytorch, "lightning.pytorch.callbacks": callbacks}.items():  # fmt: skip
        monkeypatch.setitem(sys.modules, name, mod)
    for name in ("trainguard.sdk.torch", "trainguard.sdk.huggingface", "trainguard.sdk.lightning"):
        sys.modules.pop(name, None)
    yield
    for name in ("trainguard.sdk.torch", "trainguard.sdk.huggingface", "trainguard.sdk.lightning"):
        sys.modules.pop(name, None)


def test_torch_fragmentation_and_loss_scale(fake_frameworks: None) -> None:
    tt = importlib.import_module("trainguard.sdk.torch")
    assert tt.fragmentation(0) == 0.25
    rec = Recorder()
    tt.report_fragmentation(rec)
    assert [(e["gpu"], e["ratio"]) for e in rec.events] == [(0, 0.25), (1, 0.25)]
    scaler = types.SimpleNamespace(is_enabled=lambda: True, get_scale=lambda: 65536.0)
    assert tt.loss_scale(scaler) == 65536.0


def test_huggingface_callback(fake_frameworks: None) -> None:
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
    kinds = [e["type"] for e in rec.events]
    assert kinds == ["step", "step", "checkpoint"]
    assert rec.events[1]["loss"] == 1.5 and rec.events[2]["path"] == "/out/checkpoint-10"


def test_lightning_callback(fake_frameworks: None) -> None:
    pl = importlib.import_module("trainguard.sdk.lightning")
    rec = Recorder()
    cb = pl.TrainguardCallback(rec, tokens_per_batch=2048)
    trainer = types.SimpleNamespace(global_step=3, should_stop=False, ckpt_path="/ckpt/3")
    loss = types.SimpleNamespace(detach=lambda: types.SimpleNamespace(item=lambda: 0.5))
    cb.on_train_batch_start(trainer, None, None, 0)
    cb.on_train_batch_end(trainer, None, {"loss": loss}, None, 0)
    cb.on_save_checkpoint(trainer, None, {})
    assert rec.events[0]["loss"] == 0.5 and rec.events[0]["tokens"] == 2048
    assert rec.events[1] == rec.events[1] | {"type": "checkpoint", "path": "/ckpt/3", "kind": "full"}
