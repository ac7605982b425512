"""PyTorch helpers for a plain training loop: allocator fragmentation, the loss scale, time spent in
collectives (per step, and each collective's latency), out-of-memory reports, and a timed checkpoint
load and save. Needs torch (imported here only)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from trainguard.sdk import torch_state
from trainguard.sdk.reporter import Reporter

try:
    import torch
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("trainguard.sdk.torch needs PyTorch: pip install torch") from exc


def fragmentation(device: int = 0) -> float | None:
    """(reserved - allocated) / reserved of the CUDA caching allocator; None where it cannot be
    measured (no CUDA, or nothing reserved on that device): never a made-up zero."""
    if not torch.cuda.is_available():
        return None
    stats = torch.cuda.memory_stats(device)
    reserved = float(stats.get("reserved_bytes.all.current", 0))
    allocated = float(stats.get("allocated_bytes.all.current", 0))
    return (reserved - allocated) / reserved if reserved > 0 else None


def report_fragmentation(reporter: Reporter) -> int:
    """One sample per GPU this process reserved memory on, labelled with its pod-level index; nothing
    without CUDA. Returns how many samples were sent."""
    samples = torch_state.fragmentation_by_gpu(torch, os.environ.get("CUDA_VISIBLE_DEVICES"))
    for gpu, ratio in samples.items():
        reporter.log_fragmentation(gpu, ratio)
    return len(samples)


def loss_scale(scaler: Any) -> float | None:
    """The current scale of a torch GradScaler (None when it is disabled)."""
    return torch_state.loss_scale(scaler)


class CollectiveTimer:
    """Seconds spent in collectives during a step, for log_step(allreduce_s=...), and, given a
    reporter, each collective's latency (trainguard_train_collective_seconds):

        comm = CollectiveTimer(tg)
        with comm:
            dist.all_reduce(grad)
        tg.log_step(step, allreduce_s=comm.take(), step_time_s=dt)

    With CUDA, the stream is synchronised on entry and exit so the time is the collective's own (an
    asynchronous NCCL call returns at once); on CPU (gloo) the call is synchronous."""

    def __init__(
        self, reporter: Reporter | None = None, op: str = "all_reduce", synchronize: bool | None = None
    ) -> None:
        self.reporter = reporter
        self.op = op
        self.synchronize = torch.cuda.is_available() if synchronize is None else synchronize
        self.seconds = 0.0
        self._t0 = 0.0

    def __enter__(self) -> CollectiveTimer:
        if self.synchronize:
            torch.cuda.synchronize()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.synchronize:
            torch.cuda.synchronize()
        took = time.perf_counter() - self._t0
        self.seconds += took
        if self.reporter is not None:
            self.reporter.observe_collective(took, self.op)

    def take(self) -> float:
        """The seconds accumulated since the last take()."""
        seconds, self.seconds = self.seconds, 0.0
        return seconds


def timed_all_reduce(reporter: Reporter, tensor: Any, *args: Any, **kwargs: Any) -> Any:
    """torch.distributed.all_reduce(tensor, ...), its latency observed (synchronised under CUDA, as in
    CollectiveTimer). With async_op=True the call returns a handle at once: time the wait instead."""
    with CollectiveTimer(reporter):
        return torch.distributed.all_reduce(tensor, *args, **kwargs)


def timed_comm_hook(
    reporter: Reporter, hook: Callable[[Any, Any], Any] | None = None
) -> Callable[[Any, Any], Any]:
    """A DDP communication hook that times each gradient bucket's all-reduce, from the hook's call to
    the completion of the future it returns, and otherwise is `hook` (default: DDP's own allreduce):

        ddp.register_comm_hook(state=None, hook=timed_comm_hook(tg))

    The time is observed in a callback of the future: for gloo when the all-reduce is done; for NCCL
    when torch marks the future complete (the work is enqueued on its stream, not necessarily done),
    so on GPUs prefer CollectiveTimer around an explicit, synchronised all_reduce for exact figures."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: PLC0415 - only DDP users pay it

    inner = hook or default_hooks.allreduce_hook

    def timed(state: Any, bucket: Any) -> Any:
        t0 = time.perf_counter()
        fut = inner(state, bucket)

        def done(f: Any) -> Any:
            reporter.observe_collective(time.perf_counter() - t0)
            return f.value()

        return fut.then(done)

    # DDP checks a hook's annotations against the real types (these are strings here, PEP 563)
    timed.__annotations__ = {
        "bucket": torch.distributed.GradBucket,  # type: ignore[attr-defined]
        "return": torch.futures.Future[torch.Tensor],
    }
    return timed


@contextlib.contextmanager
def reporting_oom(reporter: Reporter) -> Iterator[None]:
    """Report a CUDA out-of-memory error leaving the block (torch.OutOfMemoryError, or an older torch's
    RuntimeError saying "CUDA out of memory"), then let it propagate. A context manager or a
    decorator: `with reporting_oom(tg): trainer.train()`, or `@reporting_oom(tg)` on a step function.
    An error an integration already reported (a forward hook) is not counted again."""
    try:
        yield
    except RuntimeError as exc:
        torch_state.report_oom(reporter, exc)
        raise


def load(reporter: Reporter, path: str | os.PathLike[str], **kwargs: Any) -> Any:
    """torch.load(path, **kwargs) as a timed restore (Reporter.restore): the sidecar shows the job
    restoring, and the read throughput."""
    with reporter.restore(os.fspath(path)):
        return torch.load(path, **kwargs)


def save(
    reporter: Reporter, obj: Any, path: str | os.PathLike[str], step: int, kind: str = "full", **kwargs: Any
) -> None:
    """torch.save(obj, path, **kwargs) as a timed save (Reporter.saving): reported with the seconds it
    blocked the trainer (trainguard_checkpoint_save_seconds_total), or as failed when it raised."""
    with reporter.saving(step, kind, os.fspath(path)):
        torch.save(obj, path, **kwargs)
