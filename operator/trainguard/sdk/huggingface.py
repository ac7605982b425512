"""A Hugging Face `TrainerCallback` that reports to the sidecar. Needs transformers."""

from __future__ import annotations

import time
from typing import Any

from trainguard.sdk.reporter import Reporter

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("trainguard.sdk.huggingface needs transformers: pip install transformers") from exc


class TrainguardCallback(TrainerCallback):  # type: ignore[misc]
    def __init__(self, reporter: Reporter | None = None, tokens_per_step: int | None = None) -> None:
        self.reporter = reporter or Reporter()
        self.tokens_per_step = tokens_per_step
        self._step_started = time.monotonic()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step_started = time.monotonic()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.reporter.log_step(state.global_step, tokens=self.tokens_per_step,
                               step_time_s=time.monotonic() - self._step_started)  # fmt: skip
        if self.reporter.should_checkpoint(state.global_step):
            control.should_save = True
        if self.reporter.should_pause():
            control.should_training_stop = True  # resume later from the checkpoint the operator kept
        return control

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        logs = logs or {}
        if "loss" in logs or "grad_norm" in logs:
            self.reporter.log_step(state.global_step, loss=logs.get("loss"), grad_norm=logs.get("grad_norm"))

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        path = f"{args.output_dir}/checkpoint-{state.global_step}"
        self.reporter.checkpoint_saved(state.global_step, "full", path)
