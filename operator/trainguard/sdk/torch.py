"""PyTorch helpers: allocator fragmentation and loss-scale changes. Needs torch (imported here only)."""

from __future__ import annotations

from typing import Any

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
    for device in range(torch.cuda.device_count()):
        reporter.log_fragmentation(device, fragmentation(device))


def loss_scale(scaler: Any) -> float | None:
    """The current scale of a torch.cuda.amp.GradScaler (None when it is disabled)."""
    return float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else None
