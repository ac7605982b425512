"""A plain PyTorch loop with torch.amp.GradScaler and trainguard.sdk.torch, on CPU, reporting to a real
exporter process."""

from __future__ import annotations

import itertools
import math
import time
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


def test_reporting_oom_counts_the_real_exception_types_once_and_re_raises(sidecar: Sidecar) -> None:
    """torch.cuda.OutOfMemoryError as the CUDA allocator raises it (no GPU here to exhaust), and the
    RuntimeError an older torch raised; around a block and as a decorator; nested, counted once."""
    tg = Reporter(sidecar.endpoint, flush_interval_s=0.05)
    with pytest.raises(torch.cuda.OutOfMemoryError), tt.reporting_oom(tg), tt.reporting_oom(tg):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert sidecar.settled("trainguard_train_oom_total", lambda v: v == 1) == 1

    @tt.reporting_oom(tg)
    def step() -> None:
        torch.empty(4).add_(1)
        raise RuntimeError(
            "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity)"
        )

    with pytest.raises(RuntimeError):
        step()
    with pytest.raises(RuntimeError), tt.reporting_oom(tg):
        raise RuntimeError("not an OOM")
    with pytest.raises(KeyError), tt.reporting_oom(tg):
        raise KeyError("nor this")
    assert sidecar.settled("trainguard_train_oom_total", lambda v: v == 2) == 2
    tg.close()
    assert sidecar.value("trainguard_train_oom_total") == 2


def test_load_is_a_timed_restore_of_a_real_checkpoint(sidecar: Sidecar, tmp_path: Path) -> None:
    model = TinyLM()
    path = tmp_path / "full-10.pt"
    torch.save({"model": model.state_dict(), "step": 10}, path)
    rec = Recorder()
    state = tt.load(rec, path, weights_only=True)
    assert state["step"] == 10 and set(state["model"]) == set(model.state_dict())
    start, end = rec.reports("restore")
    assert (start["state"], end["state"], end["path"], end["ok"]) == ("start", "end", str(path), True)
    assert end["read_bytes_per_second"] == pytest.approx(path.stat().st_size / end["seconds"])
    tg = Reporter(sidecar.endpoint, flush_interval_s=0.05)
    tt.load(tg, path, weights_only=True)
    tg.close()
    rate = sidecar.settled("trainguard_checkpoint_restore_read_bytes_per_second", lambda v: v is not None)
    assert rate is not None and rate > 0
    assert sidecar.value("trainguard_checkpoint_restoring") == 0


def test_collective_timer_observes_each_collective_into_the_histogram(sidecar: Sidecar) -> None:
    tg = Reporter(sidecar.endpoint, flush_interval_s=0.05)
    comm = tt.CollectiveTimer(tg)
    spans = []
    for _ in range(3):
        began = time.perf_counter()
        with comm:
            time.sleep(0.004)
        spans.append(time.perf_counter() - began)  # the timer's own span lies inside this one
    assert comm.take() >= 0.012
    tg.close()
    count = sidecar.settled("trainguard_train_collective_seconds_count", lambda v: v == 3)
    assert count == 3
    buckets = {lbl["le"]: v for lbl, v in sidecar.metrics()["trainguard_train_collective_seconds_bucket"]}
    # each collective took at least its 4 ms sleep; those we saw end within 10 ms are at most 10 ms (a
    # loaded machine may overrun a sleep into the next bucket: counted, not a failure)
    assert buckets["0.0025"] == 0 and buckets["+Inf"] == 3
    assert buckets["0.01"] >= sum(1 for s in spans if s <= 0.01)
