"""A Hugging Face `TrainerCallback` that reports to the sidecar. Needs transformers."""

from __future__ import annotations

import os
import time
from typing import Any

from trainguard.sdk import torch_state
from trainguard.sdk.reporter import Reporter

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("trainguard.sdk.huggingface needs transformers: pip install transformers") from exc


class TrainguardCallback(TrainerCallback):  # type: ignore[misc]
    def __init__(
        self,
        reporter: Reporter | None = None,
        tokens_per_step: int | None = None,
        fragmentation_every: int = torch_state.FRAGMENTATION_EVERY,
    ) -> None:
        self.reporter = reporter or Reporter()
        self.tokens_per_step = tokens_per_step
        self._step_started = time.monotonic()
        self._requested: tuple[int, str] | None = None  # (step, kind) of the save this callback asked for
        self._fragmentation = torch_state.Every(fragmentation_every)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step_started = time.monotonic()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        step = state.global_step
        self.reporter.log_step(step, tokens=self.tokens_per_step, step_time_s=time.monotonic() - self._step_started,
                               loss_scale=torch_state.huggingface_loss_scale(kwargs))  # fmt: skip
        if self._fragmentation.due(step):
            torch_state.report_fragmentation(self.reporter)
        if kind := self.reporter.should_checkpoint(step):
            # a save HF's own cadence already asked for at this step writes everything: a full one
            self._requested = (step, "full" if control.should_save else kind)
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
        """HF writes model, optimizer and scheduler state to {output_dir}/checkpoint-{global_step}: a
        save on its own cadence is a full one; a save asked for here has the kind that was asked."""
        step = state.global_step
        requested, self._requested = self._requested, None
        kind = requested[1] if requested is not None and requested[0] == step else "full"
        self.reporter.checkpoint_saved(step, kind, os.path.join(args.output_dir, f"checkpoint-{step}"))
