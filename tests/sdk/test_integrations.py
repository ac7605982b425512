"""trainguard.sdk.torch's fragmentation on a CUDA allocator, against a stand-in torch.cuda: no GPU
runs these tests. Everything that runs on CPU is tested on the real frameworks in
tests/sdk_frameworks (the callbacks, the loss scale, fragmentation reported as unavailable on CPU)."""

from __future__ import annotations

import importlib
import types

from tests.sdk.fakes import Cuda, Recorder


def test_torch_fragmentation_of_the_gpus_in_use(fake_torch: types.ModuleType) -> None:
    fake_torch.cuda = Cuda(available=True, count=3, used={0: (1000, 750), 1: (1000, 750)})  # type: ignore[attr-defined]
    tt = importlib.import_module("trainguard.sdk.torch")
    assert tt.fragmentation(0) == 0.25
    assert tt.fragmentation(2) is None, "nothing reserved there: not measured, not zero"
    rec = Recorder()
    assert tt.report_fragmentation(rec) == 2
    assert [(e["gpu"], e["ratio"]) for e in rec.reports("fragmentation")] == [(0, 0.25), (1, 0.25)]
