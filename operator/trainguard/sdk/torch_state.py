"""What the framework callbacks read from a running PyTorch: the loss scale, allocator fragmentation,
and whether an exception is a CUDA out-of-memory error.

No torch import at module level: the Hugging Face and Lightning callbacks already require their
framework, and a loss-scale lookup is plain attribute access on objects the framework hands over.
Every function here returns None (or nothing) rather than raise: it runs inside the training loop.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
from collections.abc import Mapping
from typing import Any

FRAGMENTATION_EVERY = 50  # steps between samples: memory_stats() per device is not free


def scaler_of(*owners: Any) -> Any:
    """The first `.scaler` set on one of the owners: accelerate's AcceleratedOptimizer and Lightning's
    mixed-precision plugin keep their GradScaler there (None when fp16 loss scaling is off)."""
    for owner in owners:
        scaler = getattr(owner, "scaler", None)
        if scaler is not None:
            return scaler
    return None


def loss_scale(scaler: Any) -> float | None:
    """The current scale of a torch GradScaler; None when there is none or it is disabled (bf16, fp32).

    get_scale() reads the scale tensor back from the GPU; the frameworks already do that every step
    (accelerate compares it around optimizer.step to see whether the step was skipped)."""
    try:
        return float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else None
    except Exception:  # a reading is never worth a training step
        return None


def huggingface_loss_scale(callback_kwargs: Mapping[str, Any]) -> float | None:
    """From the kwargs a transformers Trainer passes its callbacks (optimizer, then model; no deeper)."""
    try:
        return loss_scale(scaler_of(callback_kwargs.get("optimizer"), callback_kwargs.get("model")))
    except Exception:
        return None


def lightning_loss_scale(trainer: Any) -> float | None:
    """From a Lightning Trainer: `trainer.precision_plugin` (older releases) or
    `trainer.strategy.precision_plugin` (newer)."""
    try:
        plugin = getattr(trainer, "precision_plugin", None)
        if plugin is None:
            plugin = getattr(getattr(trainer, "strategy", None), "precision_plugin", None)
        return loss_scale(scaler_of(plugin))
    except Exception:
        return None


def gpu_index(device: int, cuda_visible_devices: str | None) -> int:
    """The pod-level index of CUDA device `device`: with CUDA_VISIBLE_DEVICES=3,5 device 0 is GPU 3.
    UUIDs (or anything else) leave the CUDA index as it is."""
    ids = [part.strip() for part in (cuda_visible_devices or "").split(",") if part.strip()]
    if device < len(ids) and all(part.isdigit() for part in ids):
        return int(ids[device])
    return device


def fragmentation_by_gpu(torch: Any, cuda_visible_devices: str | None = None) -> dict[int, float]:
    """(reserved - allocated) / reserved of the CUDA caching allocator, per GPU this process reserved
    memory on. Empty without CUDA: no device, no figure (never a made-up zero)."""
    if not torch.cuda.is_available():
        return {}
    out: dict[int, float] = {}
    for device in range(torch.cuda.device_count()):
        stats = torch.cuda.memory_stats(device)
        reserved = float(stats.get("reserved_bytes.all.current", 0))
        allocated = float(stats.get("allocated_bytes.all.current", 0))
        if reserved > 0:  # a device this process does not use is another rank's to report
            out[gpu_index(device, cuda_visible_devices)] = (reserved - allocated) / reserved
    return out


def report_fragmentation(reporter: Any) -> None:
    """Send one fragmentation sample per GPU in use; nothing where torch or CUDA is absent."""
    try:
        torch = importlib.import_module("torch")
        samples = fragmentation_by_gpu(torch, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except Exception:
        return
    for gpu, ratio in samples.items():
        reporter.log_fragmentation(gpu, ratio)


class Every:
    """True once per `every` steps (the first call included), however often a step number repeats:
    Lightning calls its batch hook several times per optimizer step under gradient accumulation."""

    def __init__(self, every: int = FRAGMENTATION_EVERY) -> None:
        self.every = max(1, every)
        self.last: int | None = None

    def due(self, step: int) -> bool:
        if self.last is not None and 0 <= step - self.last < self.every:
            return False
        self.last = step
        return True


OOM_TEXT = "CUDA out of memory"
"""What torch's CUDA allocator says; before torch 1.13 it raised a plain RuntimeError with this text."""
_REPORTED = "_trainguard_oom_reported"


def is_oom(exc: BaseException) -> bool:
    """torch.OutOfMemoryError (torch.cuda.OutOfMemoryError is the same class), or the RuntimeError of
    an older torch saying "CUDA out of memory". By class name: no torch import here."""
    if any(
        cls.__name__ == "OutOfMemoryError" and cls.__module__.startswith("torch") for cls in type(exc).__mro__
    ):
        return True
    return isinstance(exc, RuntimeError) and OOM_TEXT in str(exc)


def oom_device(exc: BaseException, cuda_visible_devices: str | None = None) -> int | None:
    """The pod-level GPU index an OOM names ("... GPU 0 has a total capacity of ..."), else None."""
    match = re.search(r"\bGPU (\d+)\b", str(exc))
    return gpu_index(int(match.group(1)), cuda_visible_devices) if match else None


def report_oom(reporter: Any, exc: BaseException) -> bool:
    """Report `exc` when it is an out-of-memory error not reported yet; True when it is one. The mark on
    the exception keeps the same error from being counted twice on its way up (a forward hook, then
    a wrapper around train())."""
    if not is_oom(exc):
        return False
    if getattr(exc, _REPORTED, False):
        return True
    with contextlib.suppress(Exception):  # some exceptions refuse new attributes: count it anyway
        setattr(exc, _REPORTED, True)
    reporter.report_oom(oom_device(exc, os.environ.get("CUDA_VISIBLE_DEVICES")), str(exc))
    return True
