"""Stand-in torch, transformers and lightning modules, for what needs a GPU (see tests/sdk/fakes.py)."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from tests.sdk.fakes import Cuda

INTEGRATIONS = ("trainguard.sdk.torch", "trainguard.sdk.huggingface", "trainguard.sdk.lightning")


@pytest.fixture
def fake_torch(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """Injects torch, transformers and lightning; the torch returned has a CPU-only `cuda` that tests
    replace with a Cuda stand-in where they need GPUs."""
    torch = types.ModuleType("torch")
    torch.cuda = Cuda(available=False)  # type: ignore[attr-defined]
    transformers = types.ModuleType("transformers")
    transformers.TrainerCallback = object  # type: ignore[attr-defined]
    lightning = types.ModuleType("lightning")
    pytorch = types.ModuleType("lightning.pytorch")
    callbacks = types.ModuleType("lightning.pytorch.callbacks")
    callbacks.Callback = object  # type: ignore[attr-defined]
    for name, mod in {"torch": torch, "transformers": transformers, "lightning": lightning,
                      "lightning.pytorch": pytorch, "lightning.pytorch.callbacks": callbacks}.items():  # fmt: skip
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name in INTEGRATIONS:
        sys.modules.pop(name, None)
    yield torch
    for name in INTEGRATIONS:
        sys.modules.pop(name, None)
