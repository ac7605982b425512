"""Lightning's Trainer with trainguard's Lightning callback, on CPU, reporting to a real exporter process."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.processes import wait_for
from tests.sdk.fakes import Recorder
from tests.sdk_frameworks.conftest import Sidecar, require
from tests.sdk_frameworks.tiny import SEQ, TinyLM, Tokens
from trainguard.sdk import Reporter

torch = require("torch")
L = require("lightning")
pl = require("trainguard.sdk.lightning")

BATCH = 4


class Module(L.LightningModule):  # type: ignore[misc]
    def __init__(self, lr: float = 1e-3, oom_at: int | None = None, nan_grad: bool = False) -> None:
        super().__init__()
        self.lm = TinyLM()
        self.gate = torch.nn.Parameter(torch.ones(1))
        self.lr, self.oom_at, self.nan_grad = lr, oom_at, nan_grad
        self.oom_error: Any = torch.OutOfMemoryError
        self.grad_norms: list[float] = []

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Any:
        if self.oom_at is not None and self.global_step == self.oom_at:
            # what the CUDA caching allocator raises; no GPU here to exhaust
            raise self.oom_error("CUDA out of memory. Tried to allocate 20.00 GiB")
        loss = self.lm.loss(batch["input_ids"])
        if self.nan_grad:  # finite loss, NaN gradient: d/dg sqrt(0 * g) = 0 * inf
            loss = loss + torch.sqrt(self.gate * 0).sum()
        return loss

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        self.grad_norms.append(float(torch.nn.utils.get_total_norm(grads)))

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.lr)

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(Tokens(), batch_size=BATCH)


def reporter(sidecar: Sidecar, **kwargs: Any) -> Reporter:
    return Reporter(sidecar.endpoint, flush_interval_s=0.05, control_interval_s=0.1, **kwargs)


def trainer(root: Path, callbacks: list[Any], **kwargs: Any) -> Any:
    """Lightning's defaults (a ModelCheckpoint included), quiet, on CPU."""
    return L.Trainer(default_root_dir=str(root), accelerator="cpu", devices=1, callbacks=callbacks,
                     enable_progress_bar=False, enable_model_summary=False, logger=False, **kwargs)  # fmt: skip


class Steps(L.Callback):  # type: ignore[misc]
    def __init__(self) -> None:
        self.steps: list[int] = []
        self.began_at: int | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.began_at = trainer.global_step

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        self.steps.append(trainer.global_step)


def test_steps_loss_grad_norm_tokens_and_the_checkpoint_cadence_reach_the_exporter(
    sidecar: Sidecar, tmp_path: Path
) -> None:
    tg = reporter(sidecar, incremental_every=4, full_every=8)
    module = Module()
    began = time.monotonic()
    trainer(tmp_path, [pl.TrainguardCallback(tg, tokens_per_batch=BATCH * SEQ)], max_steps=13).fit(module)
    took = time.monotonic() - began
    tg.close()
    assert sidecar.settled("trainguard_train_step", lambda v: v == 13) == 13
    loss = sidecar.value("trainguard_train_loss")
    assert loss is not None and 0 < loss < 10
    assert sidecar.value("trainguard_train_grad_norm") == pytest.approx(module.grad_norms[-1], rel=1e-5)
    tps = sidecar.value("trainguard_train_tokens_per_second_per_gpu")
    # BATCH x SEQ tokens over a step's time, which is no longer than the whole fit (on a loaded machine a
    # step may take over a second)
    assert tps is not None and tps >= BATCH * SEQ / took, (tps, took)
    assert sidecar.value("trainguard_train_nonfinite_loss_total") == 0
    ckpt = f"{tmp_path}/checkpoints"
    saved = [(c["step"], c["kind"], c["path"]) for c in sidecar.control_view()["checkpoints"]]
    # the SDK's cadence, then Lightning's own ModelCheckpoint at the end of the (cut short) epoch
    assert saved == [(4, "incremental", f"{ckpt}/trainguard-step=4-incremental.ckpt"),
                     (8, "full", f"{ckpt}/trainguard-step=8-full.ckpt"),
                     (12, "incremental", f"{ckpt}/trainguard-step=12-incremental.ckpt"),
                     (13, "full", f"{ckpt}/epoch=0-step=13.ckpt")]  # fmt: skip
    for _, _, path in saved:
        state = torch.load(path, weights_only=False)
        assert state["optimizer_states"] and state["global_step"] == int(
            path.split("step=")[1].split("-")[0].split(".")[0]
        )


class PauseAt(L.Callback):  # type: ignore[misc]
    """The operator pauses the job at `step`; this waits until the SDK heard it."""

    def __init__(self, sidecar: Sidecar, tg: Reporter, step: int) -> None:
        self.sidecar, self.tg, self.step = sidecar, tg, step

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == self.step:
            self.sidecar.operator({"pause": True})
            wait_for("the pause reaching the trainer", self.tg.should_pause, 5.0, interval=0.05)


def test_a_pause_stops_training_and_a_restarted_run_resumes_from_the_checkpoint_resume_from_names(
    sidecar: Sidecar, tmp_path: Path
) -> None:
    tg = reporter(sidecar, incremental_every=4, full_every=100)
    first = Steps()
    trainer(tmp_path, [first, PauseAt(sidecar, tg, 6), pl.TrainguardCallback(tg)], max_steps=1000).fit(
        Module()
    )
    tg.close()
    assert first.steps[-1] == 6, "stopped at the step the pause reached the trainer"
    assert sidecar.settled("trainguard_train_step", lambda v: v == 6) == 6
    sidecar.operator({"pause": False})
    tg = reporter(sidecar, incremental_every=4, full_every=100)
    best = tg.resume_from()
    assert best is not None and os.path.exists(best["path"])
    second = Steps()
    trainer(tmp_path, [second, pl.TrainguardCallback(tg)], max_steps=9).fit(Module(), ckpt_path=best["path"])
    tg.close()
    assert second.began_at == best["step"] and second.steps[0] == best["step"] + 1
    assert sidecar.settled("trainguard_train_step", lambda v: v == 9) == 9


def test_a_diverging_run_under_the_trainers_defaults_is_counted_non_finite_within_a_few_steps(
    sidecar: Sidecar, tmp_path: Path
) -> None:
    tg = reporter(sidecar)
    L.Trainer(default_root_dir=str(tmp_path), max_steps=5, callbacks=[pl.TrainguardCallback(tg)]).fit(
        Module(lr=1e20)
    )
    tg.close()
    assert sidecar.settled("trainguard_train_nonfinite_loss_total", lambda v: (v or 0) >= 3) >= 3


def test_a_non_finite_gradient_norm_with_a_finite_loss_counts(sidecar: Sidecar, tmp_path: Path) -> None:
    tg = reporter(sidecar)
    module = Module(nan_grad=True)
    L.Trainer(default_root_dir=str(tmp_path), max_steps=1, callbacks=[pl.TrainguardCallback(tg)]).fit(module)
    tg.close()
    assert sidecar.settled("trainguard_train_step", lambda v: v == 1) == 1
    assert sidecar.value("trainguard_train_loss") is not None, "the loss was finite"
    assert sidecar.settled("trainguard_train_nonfinite_loss_total", lambda v: v == 1) == 1


@pytest.mark.parametrize(
    "error",
    [torch.OutOfMemoryError, RuntimeError],  # RuntimeError("CUDA out of memory ..."): torch before 1.13
)
def test_a_cuda_out_of_memory_error_is_counted_by_the_exporter_before_it_propagates(
    sidecar: Sidecar, tmp_path: Path, error: type[Exception]
) -> None:
    """Raised where the allocator would raise it, in the training step (no GPU here to exhaust)."""
    tg = reporter(sidecar)
    assert sidecar.value("trainguard_train_oom_total") == 0
    module = Module(oom_at=3)
    module.oom_error = error
    with pytest.raises(error):
        trainer(tmp_path, [pl.TrainguardCallback(tg)], max_steps=10).fit(module)
    # no close(), no flush here: the report left before fit() raised (tests/exporter/test_training_signals.py
    # shows report_oom sends before it returns); this sidecar renders every 0.1 s
    assert sidecar.settled("trainguard_train_oom_total", lambda v: v == 1, timeout=2.0) == 1
    assert sidecar.value("trainguard_train_step") == 3
    tg.close()


def test_an_error_that_is_not_an_oom_is_not_counted(sidecar: Sidecar, tmp_path: Path) -> None:
    rec = Recorder()
    module = Module(oom_at=2)
    module.oom_error = lambda message: RuntimeError("CUDA error: an illegal memory access was encountered")
    with pytest.raises(RuntimeError):
        trainer(tmp_path, [pl.TrainguardCallback(rec)], max_steps=10).fit(module)
    assert rec.reports("oom") == []


def test_resuming_with_ckpt_path_is_a_timed_restore(sidecar: Sidecar, tmp_path: Path) -> None:
    tg = reporter(sidecar, incremental_every=4, full_every=100)
    trainer(tmp_path, [pl.TrainguardCallback(tg)], max_steps=5).fit(Module())
    tg.close()
    assert sidecar.value("trainguard_checkpoint_restore_read_bytes_per_second") is None, "no restore yet"
    path = f"{tmp_path}/checkpoints/trainguard-step=4-incremental.ckpt"
    size = wait_for(
        "the incremental checkpoint's size",
        lambda: sidecar.value("trainguard_checkpoint_last_size_bytes", kind="incremental"),
        10,
        interval=0.05,
    )
    assert size == os.path.getsize(path), "the SDK measured the file it saved"
    rec = Recorder()
    tg = reporter(sidecar)
    for r in (rec, tg):
        trainer(tmp_path / type(r).__name__, [pl.TrainguardCallback(r)], max_steps=6).fit(
            Module(), ckpt_path=path
        )
    tg.close()
    restores = rec.reports("restore")
    assert [(e["state"], e["path"]) for e in restores] == [("start", path), ("end", path)]
    assert restores[-1]["ok"] and restores[-1]["read_bytes_per_second"] == pytest.approx(
        os.path.getsize(path) / restores[-1]["seconds"]
    )
    rate = sidecar.settled("trainguard_checkpoint_restore_read_bytes_per_second", lambda v: v is not None)
    assert rate is not None and rate > 0
    assert sidecar.value("trainguard_checkpoint_restoring") == 0
