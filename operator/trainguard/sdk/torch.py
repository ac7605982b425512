"""PyTorch helpers: allocator fragmentation and loss-scale changes. Needs torch (imported here only)."""

from __future__ import annotations

import os
from typing import Any

from trainguard.sdk import torch_state
from trainguard.sdk.reporter import Reporter

try:
    import torch
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("trainguard.sdk.torch needs PyTorch: pip install torch") from exc


def fragmentation(device: int = 0) -> float:
    """(reserved - allocated) / reserved of the CUDA caching allocator; 0 when nothing is reserved."""
    stats = torch.cuda.memory_stats(device)
    reserved = float(stats.get("reserved_bytes.all.current", 0))
    allocated = float(stats.get("allocated_bytes.all.current", 0))
    return (reserved - allocated) / reserved if reserved > 0 else 0.0


def report_fragmentation(reporter: Reporter) -> None:
    """One sample per GPU this process reserved memory on, labelled with its pod-level index;
    nothing without CUDA."""
    for gpu, ratio in torch_state.fragmentation_by_gpu(torch, os.environ.get("CUDA_VISIBLE_DEVICES")).items():
        reporter.log_fragmentation(gpu, ratio)


def loss_scale(scaler: Any) -> float | None:
    """The current scale of a torch GradScaler (None when it is disabled)."""
    return torch_state.loss_scale(scaler)
