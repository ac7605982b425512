"""transformers' Trainer with TrainguardCallback, on CPU, reporting to a real exporter process."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.processes import wait_for
from tests.sdk_frameworks.conftest import Sidecar, require
from tests.sdk_frameworks.tiny import SEQ, Tokens, gpt2
from trainguard.sdk import Reporter

torch = require("torch")
transformers = require("transformers")
require("accelerate")
hf = require("trainguard.sdk.huggingface")

BATCH = 4


def reporter(sidecar: Sidecar, **kwargs: Any) -> Reporter:
    return Reporter(sidecar.endpoint, flush_interval_s=0.05, control_interval_s=0.1, **kwargs)


class Seen(transformers.TrainerCallback):  # type: ignore[misc]
    """What the Trainer itself did, to compare with what reached the exporter."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.logs: list[dict[str, Any]] = []
        self.began_at: int | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.began_at = state.global_step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.steps.append(state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        self.logs.append(dict(logs or {}))


def trainer(out: Path, callbacks: list[Any], **args: Any) -> Any:
    targs = transformers.TrainingArguments(output_dir=str(out), per_device_train_batch_size=BATCH,
                                           report_to="none", disable_tqdm=True, **args)  # fmt: skip
    return transformers.Trainer(model=gpt2(), args=targs, train_dataset=Tokens(), callbacks=callbacks)


def test_steps_loss_grad_norm_tokens_and_the_checkpoint_cadence_reach_the_exporter(
    sidecar: Sidecar, tmp_path: Path
) -> None:
    seen = Seen()
    tg = reporter(sidecar, incremental_every=4, full_every=8)
    t = trainer(
        tmp_path, [seen, hf.TrainguardCallback(tg)], max_steps=13, logging_steps=4, learning_rate=1e-3
    )
    began = time.monotonic()
    t.train()
    took = time.monotonic() - began
    tg.close()
    assert seen.steps == list(range(1, 14))
    assert sidecar.settled("trainguard_train_step", lambda v: v == 13) == 13
    loss = sidecar.value("trainguard_train_loss")
    assert loss is not None and 0 < loss < 10, "the model's cross-entropy over a 64-token vocabulary"
    trainer_grad_norms = [log["grad_norm"] for log in seen.logs if "grad_norm" in log]
    assert len(trainer_grad_norms) == 3  # logged at 4, 8 and 12
    assert sidecar.value("trainguard_train_grad_norm") == trainer_grad_norms[-1]
    tps = sidecar.value("trainguard_train_tokens_per_second_per_gpu")
    # BATCH x SEQ input tokens per step, over a step's time, which is no longer than the whole run (a
    # bound that holds on a loaded machine, where a step may take over a second)
    assert tps is not None and tps >= BATCH * SEQ / took, (tps, took)
    assert sidecar.value("trainguard_train_nonfinite_loss_total") == 0
    assert "trainguard_gpu_memory_fragmentation_ratio" not in sidecar.metrics(), "no CUDA: not measured"
    # the SDK's cadence: incremental every 4, full every 8; then the Trainer's own save at the end of
    # training (save_strategy "steps" by default), which writes everything: full
    saved = [(c["step"], c["kind"], c["path"]) for c in sidecar.control_view()["checkpoints"]]
    assert saved == [(4, "incremental", f"{tmp_path}/checkpoint-4"), (8, "full", f"{tmp_path}/checkpoint-8"),
                     (12, "incremental", f"{tmp_path}/checkpoint-12"),
                     (13, "full", f"{tmp_path}/checkpoint-13")]  # fmt: skip
    for _, _, path in saved:
        assert {"model.safetensors", "optimizer.pt", "trainer_state.json"} <= set(os.listdir(path))
    assert sidecar.value("trainguard_checkpoint_last_step", kind="full") == 13
    assert sidecar.value("trainguard_checkpoint_last_step", kind="incremental") == 12


class PauseAt(transformers.TrainerCallback):  # type: ignore[misc]
    """The operator pauses the job at `step` (its POST /v1/control on the sidecar), and this waits until
    the SDK has heard it: trainguard's callback, next in line, must stop training at this step."""

    def __init__(self, sidecar: Sidecar, tg: Reporter, step: int) -> None:
        self.sidecar, self.tg, self.step = sidecar, tg, step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            self.sidecar.operator({"pause": True})
            wait_for("the pause reaching the trainer", self.tg.should_pause, 5.0, interval=0.05)


def test_a_pause_stops_training_and_a_restarted_run_resumes_from_the_checkpoint_resume_from_names(
    sidecar: Sidecar, tmp_path: Path
) -> None:
    tg = reporter(sidecar, incremental_every=4, full_every=100)
    first = Seen()
    trainer(tmp_path, [first, PauseAt(sidecar, tg, 6), hf.TrainguardCallback(tg)], max_steps=1000).train()
    tg.close()
    assert first.steps[-1] == 6, "stopped at the step the pause reached the trainer"
    assert sidecar.settled("trainguard_train_step", lambda v: v == 6) == 6
    # the operator lifts the pause; the restarted trainer asks where to resume
    sidecar.operator({"pause": False})
    tg = reporter(sidecar, incremental_every=4, full_every=100)
    assert tg.resume_from() == tg.resume_from() | {
        "step": 4,
        "kind": "incremental",
        "path": f"{tmp_path}/checkpoint-4",
    }
    path = hf.resume_path(tg)
    second = Seen()
    trainer(tmp_path, [second, hf.TrainguardCallback(tg)], max_steps=8).train(resume_from_checkpoint=path)
    tg.close()
    assert second.began_at == 4 and second.steps == [5, 6, 7, 8], "resumed from step 4's state"
    assert sidecar.settled("trainguard_train_step", lambda v: v == 8) == 8


def test_a_diverging_run_under_the_trainers_defaults_is_counted_non_finite_within_a_few_steps(
    sidecar: Sidecar, tmp_path: Path
) -> None:
    """Default TrainingArguments: logging every 500 steps, logging_nan_inf_filter on, clipping at 1.0.
    The Trainer's own log hides the NaN; the exporter must not."""
    seen = Seen()
    tg = reporter(sidecar)
    targs = transformers.TrainingArguments(output_dir=str(tmp_path), learning_rate=1e20, max_steps=5)
    t = transformers.Trainer(
        model=gpt2(), args=targs, train_dataset=Tokens(), callbacks=[seen, hf.TrainguardCallback(tg)]
    )
    result = t.train()
    tg.close()
    assert math.isfinite(result.training_loss), "what the Trainer says: its NaN filter hid the divergence"
    assert sidecar.settled("trainguard_train_nonfinite_loss_total", lambda v: (v or 0) >= 3) >= 3


class OomAt:
    """Raises torch's own OutOfMemoryError (what the CUDA allocator raises; no GPU here to exhaust) at
    the n-th training forward of a GPT-2 block, or in the backward pass through its head."""

    def __init__(self, model: Any, n: int, where: str) -> None:
        self.calls, self.n = 0, n
        if where == "forward":
            model.transformer.h[0].register_forward_pre_hook(self.forward)
        else:
            model.lm_head.weight.register_hook(self.backward)

    def _count(self) -> None:
        self.calls += 1
        if self.calls == self.n:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total "
                                         "capacity of 79.15 GiB of which 1.2 GiB is free.")  # fmt: skip

    def forward(self, module: Any, args: Any) -> None:
        if module.training:
            self._count()

    def backward(self, grad: Any) -> None:
        self._count()


@pytest.mark.parametrize("run", ["trainer.train()", "cb.train(trainer)"])
def test_an_oom_in_the_forward_is_counted_once_either_way(sidecar: Sidecar, tmp_path: Path, run: str) -> None:
    tg = reporter(sidecar)
    cb = hf.TrainguardCallback(tg)
    t = trainer(tmp_path, [cb], max_steps=10)
    OomAt(t.model, 3, "forward")
    with pytest.raises(torch.OutOfMemoryError):
        t.train() if run == "trainer.train()" else cb.train(t)
    assert sidecar.settled("trainguard_train_oom_total", lambda v: v == 1, timeout=2.0) == 1
    tg.close()
    assert sidecar.value("trainguard_train_oom_total") == 1, "the forward hook and cb.train() count it once"


def test_an_oom_in_the_backward_reaches_the_exporter_through_cb_train_only(
    sidecar: Sidecar, tmp_path: Path
) -> None:
    """The documented limit: a Trainer tells its callbacks of no exception, and a forward hook does not
    see the backward pass."""
    tg = reporter(sidecar)
    cb = hf.TrainguardCallback(tg)
    t = trainer(tmp_path / "plain", [cb], max_steps=10)
    OomAt(t.model, 2, "backward")
    with pytest.raises(torch.OutOfMemoryError):
        t.train()
    tg.flush()
    assert sidecar.settled("trainguard_train_step", lambda v: v == 1) == 1
    assert sidecar.value("trainguard_train_oom_total") == 0, "plain trainer.train(): not seen"
    t = trainer(tmp_path / "wrapped", [cb], max_steps=10)
    OomAt(t.model, 2, "backward")
    with pytest.raises(torch.OutOfMemoryError):
        cb.train(t)
    assert sidecar.settled("trainguard_train_oom_total", lambda v: v == 1, timeout=2.0) == 1
    tg.close()


def test_cb_train_resumes_from_resume_from_as_a_timed_restore(sidecar: Sidecar, tmp_path: Path) -> None:
    tg = reporter(sidecar, incremental_every=4, full_every=100)
    trainer(tmp_path, [hf.TrainguardCallback(tg)], max_steps=5, save_strategy="no").train()
    tg.close()
    ckpt = f"{tmp_path}/checkpoint-4"
    size = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt))
    assert sidecar.settled("trainguard_checkpoint_last_size_bytes", lambda v: v == size) == size
    assert sidecar.value("trainguard_checkpoint_filesystem_size_bytes") == pytest.approx(
        os.statvfs(ckpt).f_blocks * os.statvfs(ckpt).f_frsize
    )
    tg = reporter(sidecar, incremental_every=4, full_every=100)
    seen = Seen()
    cb = hf.TrainguardCallback(tg)
    cb.train(trainer(tmp_path, [seen, cb], max_steps=6, save_strategy="no"))
    tg.close()
    assert seen.began_at == 4 and seen.steps == [5, 6], "resumed from the checkpoint resume_from() named"
    rate = sidecar.settled("trainguard_checkpoint_restore_read_bytes_per_second", lambda v: v is not None)
    assert rate is not None and rate > 0
    assert sidecar.value("trainguard_checkpoint_restoring") == 0
