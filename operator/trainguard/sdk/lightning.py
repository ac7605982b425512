"""A Lightning `Callback` that reports to the sidecar. Needs lightning (or pytorch_lightning)."""

from __future__ import annotations

import time
from typing import Any

from trainguard.sdk import torch_state
from trainguard.sdk.reporter import Reporter

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # pragma: no cover - depends on the environment
    try:
        from pytorch_lightning.callbacks import Callback
    except ImportError as exc:
        raise ImportError("trainguard.sdk.lightning needs lightning: pip install lightning") from exc


class TrainguardCallback(Callback):  # type: ignore[misc]
    def __init__(
        self,
        reporter: Reporter | None = None,
        tokens_per_batch: int | None = None,
        fragmentation_every: int = torch_state.FRAGMENTATION_EVERY,
    ) -> None:
        self.reporter = reporter or Reporter()
        self.tokens_per_batch = tokens_per_batch
        self._started = time.monotonic()
        self._fragmentation = torch_state.Every(fragmentation_every)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._started = time.monotonic()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss: Any = outputs.get("loss") if isinstance(outputs, dict) else outputs
        value = (
            None if loss is None else float(loss.detach().item()) if hasattr(loss, "detach") else float(loss)
        )
        step = trainer.global_step
        self.reporter.log_step(step, loss=value, tokens=self.tokens_per_batch, step_time_s=time.monotonic() - self._started,
                               loss_scale=torch_state.lightning_loss_scale(trainer))  # fmt: skip
        if self._fragmentation.due(step):
            torch_state.report_fragmentation(self.reporter)
        if self.reporter.should_pause():
            trainer.should_stop = True

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self.reporter.checkpoint_saved(trainer.global_step, "full", getattr(trainer, "ckpt_path", None) or "")
