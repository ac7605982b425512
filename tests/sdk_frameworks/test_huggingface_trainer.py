"""transformers' Trainer with TrainguardCallback, on CPU, reporting to a real exporter process."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from tests.sdk_frameworks.conftest import Sidecar, require, wait_for
from tests.sdk_frameworks.tiny import SEQ, Tokens, gpt2
from trainguard.sdk import Reporter

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
    t.train()
    tg.close()
    assert seen.steps == list(range(1, 14))
    assert sidecar.settled("trainguard_train_step", lambda v: v == 13) == 13
    loss = sidecar.value("trainguard_train_loss")
    assert loss is not None and 0 < loss < 10, "the model's cross-entropy over a 64-token vocabulary"
    trainer_grad_norms = [log["grad_norm"] for log in seen.logs if "grad_norm" in log]
    assert len(trainer_grad_norms) == 3  # logged at 4, 8 and 12
    assert sidecar.value("trainguard_train_grad_norm") == trainer_grad_norms[-1]
    tps = sidecar.value("trainguard_train_tokens_per_second_per_gpu")
    assert tps is not None and tps > BATCH * SEQ, "BATCH x SEQ input tokens per step, many steps a second"
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
            wait_for(self.tg.should_pause, 5.0, "the pause reaching the trainer")


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
