"""A Hugging Face `TrainerCallback` that reports to the sidecar. Needs transformers.

    cb = TrainguardCallback()
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[cb])
    cb.train(trainer)   # resumes from resume_from() (a timed restore), reports a CUDA OOM, re-raises it

A TrainerCallback sees no exception: the Trainer has no such event. So a CUDA out-of-memory error is
caught where a callback can reach it, in the model's forward (a forward hook that runs when the
forward raises), and everywhere else in train() only through `cb.train(trainer)` (or
`with trainguard.sdk.torch.reporting_oom(cb.reporter): trainer.train()`): an OOM in the backward pass
or the optimizer step of a plain `trainer.train()` reaches no one. Each error is counted once. With
`auto_find_batch_size` the Trainer itself catches OOMs to try a smaller batch, so the forward hook
reports none there.

Likewise the Trainer loads the checkpoint inside train() before telling any callback: `cb.train()`
times the restore from the call to the Trainer's on_train_begin (loading, and placing the model).

What the Trainer logs by default hides a diverging run: it logs every 500 steps, and its
`logging_nan_inf_filter` (on by default) replaces a NaN or Inf step loss with the running mean. So the
loss reported here is the one the model returned at each optimizer step (a forward hook on the model,
training mode only, averaged over gradient-accumulation micro-batches), not the logged one. The
gradient norm is the Trainer's own (it computes it every step but hands it to callbacks only at its
logging steps): reported when it logs.

A save blocks training: the time from the last thing the Trainer told a callback before it (the step's
end, a log, an evaluation) to on_save is reported with the checkpoint (checkpoint_saved's `seconds`),
and the sidecar is told when the Trainer asks for the save (at a step's or an epoch's end), so a long
one is not counted as a stall.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from trainguard.sdk import torch_state
from trainguard.sdk.reporter import Reporter, Restore

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("trainguard.sdk.huggingface needs transformers: pip install transformers") from exc


def resume_path(reporter: Reporter) -> str | None:
    """The checkpoint directory to pass as `trainer.train(resume_from_checkpoint=...)`: the one
    resume_from() names (the operator's pin, else the newest), when it exists on this machine."""
    best = reporter.resume_from()
    path = (best or {}).get("path")
    return path if isinstance(path, str) and path and os.path.isdir(path) else None


class TrainguardCallback(TrainerCallback):  # type: ignore[misc,unused-ignore]
    def __init__(
        self,
        reporter: Reporter | None = None,
        tokens_per_step: int | None = None,
        fragmentation_every: int = torch_state.FRAGMENTATION_EVERY,
    ) -> None:
        """tokens_per_step: this process's tokens per optimizer step; by default counted from the
        `input_ids` the model is called with in training."""
        self.reporter = reporter or Reporter()
        self.tokens_per_step = tokens_per_step
        self._last_end: float | None = None  # when the previous optimizer step ended
        self._requested: tuple[int, str] | None = None  # (step, kind) of the save this callback asked for
        self._fragmentation = torch_state.Every(fragmentation_every)
        self._losses: list[Any] = []  # the model's loss tensors of this optimizer step, detached
        self._tokens = 0  # input tokens of this optimizer step
        self._hooks: list[Any] = []
        self._restore: Restore | None = None  # the load cb.train() started, until on_train_begin
        self._save_from: float | None = None
        """When the Trainer last told a callback something before a save it will make at this step (its
        step end, log or evaluation): the save's blocking time runs from there to on_save."""

    def train(self, trainer: Any, resume: bool = True, **kwargs: Any) -> Any:
        """trainer.train(**kwargs), resuming from the checkpoint resume_from() names (resume_path) when
        `resume` and it exists here, that load timed as a restore, and a CUDA out-of-memory error anywhere
        in it reported before it propagates."""
        path = resume_path(self.reporter) if resume and "resume_from_checkpoint" not in kwargs else None
        if path is not None:
            kwargs["resume_from_checkpoint"] = path
            self._restore = self.reporter.restore(path).begin()
        try:
            return trainer.train(**kwargs)
        except RuntimeError as exc:
            torch_state.report_oom(self.reporter, exc)
            raise
        finally:
            self._end_restore(ok=False)  # still open: train() failed before it began training

    # ---- the model's own loss and tokens, per optimizer step ----

    def _before_forward(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if module.training:
            ids = kwargs.get("input_ids", args[0] if args else None)
            self._tokens += int(getattr(ids, "numel", lambda: 0)())

    def _after_forward(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        if not module.training:
            return  # evaluation forwards are not training steps
        try:
            loss = output["loss"] if isinstance(output, dict) else getattr(output, "loss", None)
        except (KeyError, TypeError):
            loss = None
        if loss is not None and hasattr(loss, "detach"):
            self._losses.append(loss.detach())

    def _forward_failed(self, module: Any, args: Any, output: Any) -> None:
        """Runs even when the forward raised (always_call), inside torch's handler: the exception in
        flight is the one the forward raised."""
        if output is None:
            exc = sys.exc_info()[1]
            if exc is not None:
                torch_state.report_oom(self.reporter, exc)

    def _end_restore(self, ok: bool) -> None:
        restore, self._restore = self._restore, None
        if restore is not None:
            restore.end(ok=ok)

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self._end_restore(ok=True)  # the Trainer loaded the checkpoint before this
        self._remove_hooks()
        if model is not None and hasattr(model, "register_forward_hook"):
            self._hooks = [model.register_forward_pre_hook(self._before_forward, with_kwargs=True),
                           model.register_forward_hook(self._after_forward, with_kwargs=True)]  # fmt: skip
            if not getattr(args, "auto_find_batch_size", False):
                self._hooks.append(model.register_forward_hook(self._forward_failed, always_call=True))
        self._last_end = None

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._remove_hooks()
        self.reporter.flush()  # what the last steps reported is on the sidecar when train() returns

    def _remove_hooks(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []

    def _step_loss(self) -> float | None:
        """The mean of this step's micro-batch losses: one read-back from the device per step (the
        Trainer's own NaN filter already reads every step's loss back)."""
        losses, self._losses = self._losses, []
        if not losses:
            return None
        try:
            total = losses[0].float()
            for loss in losses[1:]:
                total = total + loss.float()
            return float(total.item()) / len(losses)
        except Exception:  # a reading is never worth a training step
            return None

    # ---- the Trainer's events ----

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._last_end is None:
            self._last_end = time.monotonic()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """Step time runs from the end of the previous optimizer step, so it includes fetching the
        batch (the Trainer prefetches a step's batches before on_step_begin)."""
        now = time.monotonic()
        step = state.global_step
        tokens, self._tokens = self._tokens, 0
        started, self._last_end = self._last_end, now
        self.reporter.log_step(step, loss=self._step_loss(), tokens=self.tokens_per_step or tokens or None,
                               step_time_s=None if started is None else now - started,
                               loss_scale=torch_state.huggingface_loss_scale(kwargs))  # fmt: skip
        if self._fragmentation.due(step):
            torch_state.report_fragmentation(self.reporter)
        if kind := self.reporter.should_checkpoint(step):
            # a save HF's own cadence already asked for at this step writes everything: a full one
            self._requested = (step, "full" if control.should_save else kind)
            control.should_save = True
        if self.reporter.should_pause():
            control.should_training_stop = True  # resume later from the checkpoint the operator kept
        self._announce_save(control)
        return control

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """save_strategy "epoch": DefaultFlowCallback asks for the save here."""
        self._announce_save(control)

    def _announce_save(self, control: Any) -> None:
        """HF's own cadence (DefaultFlowCallback runs before this callback) or ours asked for a save: the
        Trainer writes it next, after its log and evaluation; the sidecar knows from now."""
        if getattr(control, "should_save", False) and self._save_from is None:
            self._save_from = time.monotonic()
            self.reporter.save_began()

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """An evaluation before the save at this step: the save starts after it."""
        if self._save_from is not None:
            self._save_from = time.monotonic()

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        """The Trainer's gradient norm (its loss here is filtered and averaged: the step reports
        carry the model's). The loss scale travels with it: under a dynamic loss scaler a non-finite
        gradient norm is a skipped step, not a diverged run."""
        logs = logs or {}
        if self._save_from is not None:
            self._save_from = time.monotonic()
        if "grad_norm" in logs:
            self.reporter.log_step(state.global_step, grad_norm=logs["grad_norm"],
                                   loss_scale=torch_state.huggingface_loss_scale(kwargs))  # fmt: skip

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """HF writes model, optimizer and scheduler state to {output_dir}/checkpoint-{global_step}: a
        save on its own cadence is a full one; a save asked for here has the kind that was asked."""
        step = state.global_step
        requested, self._requested = self._requested, None
        kind = requested[1] if requested is not None and requested[0] == step else "full"
        began, self._save_from = self._save_from, None
        seconds = None if began is None else time.monotonic() - began
        self.reporter.checkpoint_saved(step, kind, os.path.join(args.output_dir, f"checkpoint-{step}"),
                                       seconds=seconds)  # fmt: skip
