"""A Lightning `Callback` that reports to the sidecar. Needs lightning (or pytorch_lightning).

    cb = TrainguardCallback(dirpath="checkpoints")
    trainer = Trainer(callbacks=[cb])
    best = cb.reporter.resume_from()
    trainer.fit(model, ckpt_path=(best or {}).get("path"))

One report per optimizer step (gradient-accumulation micro-batches are averaged), with the loss the
training step returned, the gradient norm before clipping (computed here: Lightning computes none
unless asked), the fp16 loss scale and fragmentation where CUDA exists. Checkpoints on the SDK's
cadence are saved here, with `trainer.save_checkpoint`, once the file is written; a save by another
checkpoint callback (ModelCheckpoint) is reported once it is written, as full. The SDK's own saves are
timed (Reporter.saving: the seconds the trainer was blocked); another callback's are not. A CUDA out-of-memory
error is reported before Lightning raises it (on_exception). Resuming with `fit(ckpt_path=...)` is timed
as a restore (Reporter.restore): the callback wraps the strategy's load_checkpoint from setup() on, so the
figure is the file's load alone.
"""

from __future__ import annotations

import os
import time
from typing import Any

from trainguard.sdk import torch_state
from trainguard.sdk.reporter import Reporter

try:
    import torch
    from lightning.pytorch.callbacks import Callback
except ImportError:  # pragma: no cover - depends on the environment
    try:
        import torch
        from pytorch_lightning.callbacks import Callback  # type: ignore[assignment,unused-ignore]
    except ImportError as exc:
        raise ImportError("trainguard.sdk.lightning needs lightning: pip install lightning") from exc


def total_grad_norm(parameters: Any) -> Any:
    """The L2 norm of all gradients, as a tensor (no read-back from the device here)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return None
    norms = torch._foreach_norm(grads, 2.0)
    return torch.linalg.vector_norm(torch.stack([n.to(norms[0].device) for n in norms]), 2.0)


class TrainguardCallback(Callback):  # type: ignore[misc,unused-ignore]
    def __init__(
        self,
        reporter: Reporter | None = None,
        tokens_per_batch: int | None = None,
        fragmentation_every: int = torch_state.FRAGMENTATION_EVERY,
        dirpath: str | None = None,
        grad_norm: bool = True,
    ) -> None:
        """dirpath: where the SDK's checkpoints go (default: {default_root_dir}/checkpoints).
        grad_norm: compute the gradient norm each optimizer step (one pass over the gradients)."""
        self.reporter = reporter or Reporter()
        self.tokens_per_batch = tokens_per_batch
        self.dirpath = dirpath
        self.grad_norm = grad_norm
        self._fragmentation = torch_state.Every(fragmentation_every)
        self._last_end: float | None = None
        self._step: int | None = None  # the optimizer step last reported
        self._losses: list[Any] = []
        self._batches = 0
        self._norm: Any = None
        self._saved: dict[int, str] = {}  # id(checkpoint callback) -> the path it last saved, reported

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Lightning loads a checkpoint after setup (strategy.load_checkpoint), before any hook that
        would see it start: wrap that call, once per strategy."""
        strategy: Any = getattr(trainer, "strategy", None)
        load = getattr(strategy, "load_checkpoint", None)
        if load is None or getattr(load, "_trainguard_timed", False):
            return
        reporter = self.reporter

        def timed_load(checkpoint_path: Any, *args: Any, **kwargs: Any) -> Any:
            with reporter.restore(os.fspath(checkpoint_path)):
                return load(checkpoint_path, *args, **kwargs)

        timed_load._trainguard_timed = True  # type: ignore[attr-defined]
        try:
            strategy.load_checkpoint = timed_load
        except AttributeError:  # a strategy that refuses new attributes: restores are not timed
            return

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._step = trainer.global_step  # a resumed run starts past the checkpoint's step
        self._last_end = time.monotonic()
        self._saved = {
            id(cb): getattr(cb, "_last_checkpoint_saved", "") for cb in trainer.checkpoint_callbacks
        }

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        """After backward (and the fp16 unscale), before clipping and the step."""
        if self.grad_norm:
            try:
                self._norm = total_grad_norm(pl_module.parameters())
            except Exception:  # a reading is never worth a training step
                self._norm = None

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss: Any = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None:
            self._losses.append(loss.detach() if hasattr(loss, "detach") else loss)
        self._batches += 1
        step = trainer.global_step
        if step == self._step:
            return  # a micro-batch of an optimizer step still accumulating
        self._step = step
        now = time.monotonic()
        started, self._last_end = self._last_end, now
        batches, self._batches = self._batches, 0
        norm, self._norm = self._norm, None
        scale = torch_state.lightning_loss_scale(trainer)
        self.reporter.log_step(step, loss=self._mean_loss(), grad_norm=_read(norm),
                               tokens=None if self.tokens_per_batch is None else self.tokens_per_batch * batches,
                               step_time_s=None if started is None else now - started, loss_scale=scale)  # fmt: skip
        if self._fragmentation.due(step):
            torch_state.report_fragmentation(self.reporter)
        if kind := self.reporter.should_checkpoint(step):
            path = os.path.join(self.dirpath or os.path.join(trainer.default_root_dir, "checkpoints"),
                                f"trainguard-step={step}-{kind}.ckpt")  # fmt: skip
            with self.reporter.saving(step, kind, path):  # timed: the trainer is blocked while it writes
                trainer.save_checkpoint(path)  # every rank calls it; rank 0 writes
        self._report_other_saves(trainer)
        if self.reporter.should_pause():
            trainer.should_stop = True  # resume later from the checkpoint the operator kept

    def _mean_loss(self) -> float | None:
        losses, self._losses = self._losses, []
        if not losses:
            return None
        try:
            return sum(float(_read(x)) for x in losses) / len(losses)
        except (TypeError, ValueError):
            return None

    def _report_other_saves(self, trainer: Any) -> None:
        """ModelCheckpoint writes its file after the on_save_checkpoint hooks: a save it made is
        reported the next time this callback runs, once the file exists."""
        for cb in trainer.checkpoint_callbacks:
            path = getattr(cb, "_last_checkpoint_saved", "") or ""
            if path and path != self._saved.get(id(cb)):
                self._saved[id(cb)] = path
                step = getattr(cb, "_last_global_step_saved", trainer.global_step)
                self.reporter.checkpoint_saved(step, "full", path)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._report_other_saves(trainer)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._report_other_saves(trainer)
        self.reporter.flush()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        torch_state.report_oom(self.reporter, exception)  # a CUDA OOM, once; sent at once
        self.reporter.flush()


def _read(value: Any) -> Any:
    """A tensor's value (one read-back), or the value as it is."""
    if value is not None and hasattr(value, "item"):
        try:
            return value.item()
        except Exception:
            return None
    return value
