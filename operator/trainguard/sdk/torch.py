"""PyTorch helpers for a plain training loop: allocator fragmentation, the loss scale, time spent in
collectives, and out-of-memory reports. Needs torch (imported here only)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
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
    """Seconds spent in collectives during a step, for log_step(allreduce_s=...):

        comm = CollectiveTimer()
        with comm:
            dist.all_reduce(grad)
        tg.log_step(step, allreduce_s=comm.take(), step_time_s=dt)

    With CUDA, the stream is synchronised on entry and exit so the time is the collective's own (an
    asynchronous NCCL call returns at once); on CPU (gloo) the call is synchronous."""

    def __init__(self, synchronize: bool | None = None) -> None:
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
        self.seconds += time.perf_counter() - self._t0

    def take(self) -> float:
        """The seconds accumulated since the last take()."""
        seconds, self.seconds = self.seconds, 0.0
        return seconds


@contextlib.contextmanager
def reporting_oom(reporter: Reporter) -> Iterator[None]:
    """Report a torch.OutOfMemoryError (torch.cuda.OutOfMemoryError is the same class) leaving the
    block, then let it propagate: `with reporting_oom(tg): trainer.train()`."""
    try:
        yield
    except torch.OutOfMemoryError as exc:
        reporter.report_oom(str(exc))
        raise
