"""A plain PyTorch loop with torch.amp.GradScaler and trainguard.sdk.torch, on CPU, reporting to a real
exporter process."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from tests.sdk.fakes import Recorder
from tests.sdk_frameworks.conftest import Sidecar, require
from tests.sdk_frameworks.tiny import TinyLM, Tokens
from trainguard.sdk import Reporter

torch = require("torch")
tt = require("trainguard.sdk.torch")


def test_grad_scaler_changes_are_reported_as_they_happen(sidecar: Sidecar) -> None:
    """An fp16 overflow (an Inf loss here, every 5th step) makes the scaler skip the step and halve its
    scale; its growth interval of 3 clean steps doubles it again. Each change is one update."""
    tg = Reporter(sidecar.endpoint, flush_interval_s=0.05)
    model = TinyLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=3)
    data = Tokens()
    scales: list[float] = []
    for step in range(1, 21):
        ids = data[step]["input_ids"].unsqueeze(0)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model.loss(ids)
        overflow = step % 5 == 0
        scaler.scale(loss * (math.inf if overflow else 1.0)).backward()
        scaler.unscale_(opt)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        scales.append(tt.loss_scale(scaler))
        tg.log_step(step, loss=float(loss), grad_norm=float(grad_norm), loss_scale=scales[-1])
    tg.close()
    changes = sum(a != b for a, b in itertools.pairwise(scales))
    assert changes >= 6, scales
    assert sidecar.settled("trainguard_train_step", lambda v: v == 20) == 20
    assert sidecar.value("trainguard_train_loss_scale_updates_total") == changes
    assert sidecar.value("trainguard_train_loss_scale") == scales[-1]
    assert sidecar.value("trainguard_train_nonfinite_loss_total") == 0, (
        "an overflow the scaler skipped is not a diverged run, though the gradient norm was Inf"
    )


def test_on_cpu_fragmentation_is_not_available_rather_than_zero(sidecar: Sidecar) -> None:
    model = TinyLM()
    model.loss(Tokens()[0]["input_ids"].unsqueeze(0)).backward()
    assert torch.cuda.memory_stats(0) == {}, "what torch answers without a GPU: no statistics, no error"
    assert tt.fragmentation(0) is None
    tg = Reporter(sidecar.endpoint, flush_interval_s=0.05)
    assert tt.report_fragmentation(tg) == 0
    tg.log_step(1, loss=1.0)
    tg.close()
    assert sidecar.settled("trainguard_train_step", lambda v: v == 1) == 1
    assert "trainguard_gpu_memory_fragmentation_ratio" not in sidecar.metrics()


def test_reporting_oom_reports_the_real_exception_type_and_re_raises(tmp_path: Path) -> None:
    """torch.cuda.OutOfMemoryError as the CUDA allocator raises it (no GPU here to exhaust)."""
    rec = Recorder()
    with pytest.raises(torch.cuda.OutOfMemoryError), tt.reporting_oom(rec):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    with pytest.raises(RuntimeError), tt.reporting_oom(rec):
        raise RuntimeError("not an OOM")
    assert [e["message"] for e in rec.reports("oom")] == ["CUDA out of memory. Tried to allocate 2.00 GiB"]
