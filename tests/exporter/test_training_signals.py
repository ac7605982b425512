"""The issue-9 training signals end to end: the SDK's Reporter sends them to an exporter running here,
and /metrics (parsed by prometheus_client) shows them: out-of-memory errors, collective latency as a
real Prometheus histogram, the KV-cache hit ratio, checkpoint storage and restores."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.exporter.running import Running, running_exporter
from trainguard.catalog import METRICS_BY_NAME
from trainguard.exporter.training import TrainingState
from trainguard.sdk import Reporter
from trainguard.sdk import reporter as reporter_module
from trainguard.sdk.collectives import BUCKETS

HIST = "trainguard_train_collective_seconds"


@pytest.fixture
def exp() -> Iterator[Running]:
    with running_exporter("--backend", "none", "--no-host", "--enable-fault-injection") as r:
        yield r


@pytest.fixture
def tg(exp: Running) -> Iterator[Reporter]:
    reporter = Reporter(exp.url, flush_interval_s=0.05)
    yield reporter
    reporter.close()


def wait_value(exp: Running, name: str, ok: object, timeout: float = 5.0, **labels: str) -> float | None:
    deadline = time.monotonic() + timeout
    while True:
        value = exp.value(name, **labels)
        if callable(ok) and ok(value):
            return value
        assert time.monotonic() < deadline, f"{name}{labels} is {value!r}"
        time.sleep(0.05)


def histogram(exp: Running, op: str = "all_reduce") -> tuple[dict[str, float], float, float]:
    """(le -> cumulative count, sum, count) of one op's series."""
    scraped = exp.scrape()
    buckets = {lbl["le"]: v for lbl, v in scraped.get(f"{HIST}_bucket", []) if lbl["op"] == op}
    total = next(v for lbl, v in scraped[f"{HIST}_sum"] if lbl["op"] == op)
    count = next(v for lbl, v in scraped[f"{HIST}_count"] if lbl["op"] == op)
    return buckets, total, count


# ---- out of memory ----


def test_the_oom_counter_exists_at_zero_and_counts_each_report_at_once(exp: Running) -> None:
    assert exp.value("trainguard_train_oom_total") == 0, "0 from the start: increase() sees the first one"
    tg = Reporter(exp.url, start=False)  # no background thread: report_oom itself must send
    tg.report_oom(0, "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79 GiB")
    assert exp.value("trainguard_train_oom_total") == 1, "sent before report_oom returned"
    tg.report_oom(device="not a gpu")  # type: ignore[arg-type]
    assert exp.value("trainguard_train_oom_total") == 2, "a bad device does not lose the OOM"
    tg.close()


def test_the_oom_fault_adds_one_per_activation_and_keeps_it(exp: Running) -> None:
    exp.post("/v1/faults", {"fault": "oom"})
    exp.post("/v1/faults", {"fault": "oom"})
    assert exp.value("trainguard_train_oom_total") == 2
    exp.delete("/v1/faults")
    assert exp.value("trainguard_train_oom_total") == 2, "a counter does not go back when the fault clears"


# ---- collective latency ----


def test_the_catalogue_and_the_sdk_agree_on_the_buckets() -> None:
    buckets = METRICS_BY_NAME[HIST].buckets
    assert buckets == BUCKETS
    assert list(buckets) == sorted(buckets) and buckets[0] == 0.001 and buckets[-1] == 60.0


def test_collectives_are_a_prometheus_histogram_per_op(exp: Running, tg: Reporter) -> None:
    buckets, total, count = histogram(exp)
    assert count == 0 and total == 0 and set(buckets.values()) == {0.0}, "all_reduce exists from the start"
    assert len(buckets) == len(BUCKETS) + 1 and "+Inf" in buckets
    for seconds in (0.0004, 0.001, 0.003, 0.2, 0.2, 90.0):
        tg.observe_collective(seconds)
    with tg.collective("all_gather") as timed:
        time.sleep(0.01)
    tg.flush()
    buckets, total, count = histogram(exp)
    assert count == 6 and total == pytest.approx(90.4044)
    assert buckets["0.001"] == 2, "le is inclusive: 1 ms is in the 1 ms bucket"
    assert buckets["0.005"] == 3 and buckets["0.25"] == 5 and buckets["60.0"] == 5 and buckets["+Inf"] == 6
    gather, gather_sum, gather_count = histogram(exp, "all_gather")
    assert gather_count == 1 and gather_sum == pytest.approx(timed.seconds) and timed.seconds >= 0.01
    # the block took what the clock says (10 ms, or more on a loaded machine): counted from its own bucket up
    assert gather == {le: float(timed.seconds <= float(le)) for le in gather}, (timed.seconds, gather)


def test_counts_accumulate_across_flushes_and_bad_observations_cost_only_themselves(
    exp: Running, tg: Reporter
) -> None:
    tg.observe_collective(0.002)
    tg.flush()
    tg.observe_collective(0.002)
    tg.observe_collective(math.nan)
    tg.observe_collective(-1.0)
    tg.observe_collective("slow")  # type: ignore[arg-type]
    tg.flush()
    _, total, count = histogram(exp)
    assert count == 2 and total == pytest.approx(0.004)
    assert tg.dropped == 3


def test_an_sdk_with_other_bounds_never_looks_faster_than_it_was(exp: Running) -> None:
    """Each count lands in the exporter's first bucket at or above the SDK bucket's upper bound."""
    exp.post("/v1/report", {"events": [{"type": "collectives", "le": [0.003, 0.7],
                                        "ops": {"all_reduce": {"counts": [4, 2, 1], "sum": 30.0}}}]})  # fmt: skip
    buckets, total, count = histogram(exp)
    picked = [buckets[le] for le in ("0.0025", "0.005", "0.5", "1.0", "60.0")]
    assert picked == [0, 4, 4, 6, 6]
    assert buckets["+Inf"] == 7 and count == 7 and total == 30.0


@pytest.mark.parametrize(
    "report",
    [
        {"le": [0.1], "ops": {"all_reduce": {"counts": [1], "sum": 0.1}}},  # one count short
        {"le": [0.1], "ops": {"all_reduce": {"counts": [1, -1], "sum": 0.1}}},
        {"le": ["x"], "ops": {"all_reduce": {"counts": [1, 0], "sum": 0.1}}},
        {"le": [0.1], "ops": {"all_reduce": {"counts": [1, 0], "sum": "nan"}}},
        {"le": [0.1], "ops": [1, 0]},
    ],
)
def test_a_malformed_histogram_report_changes_nothing(exp: Running, report: dict[str, object]) -> None:
    exp.post("/v1/report", {"events": [{"type": "collectives", **report}]})
    _, total, count = histogram(exp)
    assert (count, total) == (0, 0)


def test_collective_slow_makes_every_collective_take_two_seconds(exp: Running, tg: Reporter) -> None:
    for _ in range(20):
        tg.observe_collective(0.002)
    tg.flush()
    t0 = time.monotonic()
    exp.post("/v1/faults", {"fault": "collective-slow"})
    first = histogram(exp)[2]
    # one more for each whole second the scrape came after the injection (none, unless the machine stalled)
    late = int(time.monotonic() - t0)
    assert 21 <= first <= 21 + late, "one slow observation as soon as the fault is seen"
    for _ in range(10):
        tg.observe_collective(0.002)  # what the trainer timed: slowed by the fabric
    tg.flush()
    time.sleep(1.1)
    buckets, total, count = histogram(exp)
    assert count >= 32, "and one more per second of the fault, trainer or not"
    slow = count - 20
    assert buckets["1.0"] == 20 and buckets["2.5"] == count
    assert total == pytest.approx(20 * 0.002 + 2.0 * slow)
    exp.delete("/v1/faults")
    time.sleep(1.1)
    assert histogram(exp)[2] == count, "no slow observations after the fault"


# ---- inference ----


def test_the_kv_cache_hit_ratio_goes_with_the_inference_report(exp: Running, tg: Reporter) -> None:
    tg.log_inference(latency_s=0.05, queue_depth=3, kv_cache_hit_ratio=0.82)
    tg.flush()
    assert exp.value("trainguard_inference_kv_cache_hit_ratio") == pytest.approx(0.82)
    assert exp.value("trainguard_inference_queue_depth") == 3
    tg.log_inference(kv_cache_hit_ratio=0.5)
    tg.log_request(0.07, 9)  # the older call still reports latency and depth
    tg.flush()
    assert exp.value("trainguard_inference_kv_cache_hit_ratio") == pytest.approx(0.5)
    assert exp.value("trainguard_inference_latency_seconds") == pytest.approx(0.07)
    assert exp.value("trainguard_inference_queue_depth") == 9
    tg.log_inference(kv_cache_hit_ratio=0.9)
    tg.flush()
    assert exp.value("trainguard_inference_queue_depth") == 9, "a field not sent is not cleared"
    exp.post("/v1/faults", {"fault": "inference-queue"})
    assert exp.value("trainguard_inference_queue_depth") == 500
    exp.delete("/v1/faults")
    assert exp.value("trainguard_inference_queue_depth") == 9


# ---- checkpoint storage ----


def test_a_checkpoint_report_carries_its_size_and_its_filesystem(
    exp: Running, tg: Reporter, tmp_path: Path
) -> None:
    ckpt = tmp_path / "checkpoint-40"
    (ckpt / "shards").mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"m" * 70_000)
    (ckpt / "shards" / "optimizer-0.pt").write_bytes(b"o" * 30_000)
    single = tmp_path / "incremental-50.json"
    single.write_bytes(b"{}" * 500)
    assert exp.value("trainguard_checkpoint_filesystem_avail_bytes") is None, "nothing measured yet"
    tg.checkpoint_saved(40, "full", str(ckpt))
    tg.checkpoint_saved(50, "incremental", str(single))
    st = os.statvfs(tmp_path)
    size = wait_value(exp, "trainguard_checkpoint_filesystem_size_bytes", lambda v: v is not None)
    assert size == st.f_blocks * st.f_frsize
    avail = exp.value("trainguard_checkpoint_filesystem_avail_bytes")
    assert avail is not None and abs(avail - st.f_bavail * st.f_frsize) < 0.01 * size
    assert exp.value("trainguard_checkpoint_last_size_bytes", kind="full") == 100_000
    assert exp.value("trainguard_checkpoint_last_size_bytes", kind="incremental") == 1000


def test_a_checkpoint_the_trainer_cannot_see_reports_no_storage(exp: Running, tg: Reporter) -> None:
    tg.checkpoint_saved(7, "full", "s3://bucket/run/checkpoint-7")
    assert wait_value(exp, "trainguard_checkpoint_last_step", lambda v: v == 7, kind="full") == 7
    assert exp.value("trainguard_checkpoint_last_size_bytes", kind="full") is None
    assert exp.value("trainguard_checkpoint_filesystem_avail_bytes") is None


def test_checkpoint_fs_filling_empties_a_10_tib_filesystem_from_half(exp: Running) -> None:
    # the fault drains by the clock: each reading is taken somewhere between the times around it
    t0 = time.monotonic()
    exp.post("/v1/faults", {"fault": "checkpoint-fs-filling"})
    first = exp.value("trainguard_checkpoint_filesystem_avail_bytes")
    t1 = time.monotonic()
    time.sleep(1.0)
    t2 = time.monotonic()
    later = exp.value("trainguard_checkpoint_filesystem_avail_bytes")
    t3 = time.monotonic()
    size = exp.value("trainguard_checkpoint_filesystem_size_bytes")
    assert size == 10 * 2**40
    assert first is not None and later is not None
    per_s, slack = 0.02 * size, 1e-3 * size  # slack: the exporter's clock against this one's
    assert 0.5 * size - per_s * (t1 - t0) - slack <= first <= 0.5 * size
    assert per_s * (t2 - t1) - slack <= first - later <= per_s * (t3 - t0) + slack, (
        "2% of the size per second"
    )
    assert exp.value("trainguard_checkpoint_last_size_bytes", kind="full") == 2**40


# ---- restore ----


def slow_read(path: Path, seconds: float, chunks: int = 10) -> bytes:
    """Read a file in chunks over about `seconds`: a checkpoint on slow storage."""
    out = b""
    with path.open("rb", buffering=0) as f:
        size = path.stat().st_size
        for _ in range(chunks):
            out += f.read(size // chunks + 1)
            time.sleep(seconds / chunks)
    return out


def test_a_restore_shows_restoring_and_its_read_throughput_while_it_loads(
    exp: Running, tg: Reporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reporter_module, "RESTORE_PROGRESS_EVERY_S", 0.3)
    ckpt = tmp_path / "full-100.pt"
    ckpt.write_bytes(os.urandom(4_000_000))
    assert exp.value("trainguard_checkpoint_restoring") == 0, "0 from the start"
    assert exp.value("trainguard_checkpoint_restore_read_bytes_per_second") is None
    seen: list[tuple[float | None, float | None]] = []
    took: list[float] = []

    def load() -> bytes:
        with tg.restore(str(ckpt)) as r:
            data = slow_read(ckpt, 0.6)
            # the Reporter's thread reports progress every RESTORE_PROGRESS_EVERY_S and flushes it: read what the
            # exporter shows once it has come, still loading (not after a sleep that a slow thread overruns)
            rate = "trainguard_checkpoint_restore_read_bytes_per_second"
            progress = wait_value(exp, rate, lambda v: v is not None, timeout=10)
            seen.append((exp.value("trainguard_checkpoint_restoring"), progress))
        assert r.seconds is not None
        took.append(r.seconds)
        return data

    assert len(load()) == 4_000_000
    restoring, progress = seen[0]
    assert restoring == 1
    assert progress is not None and progress > 0, "progress reported while loading"
    final = wait_value(exp, "trainguard_checkpoint_restoring", lambda v: v == 0)
    assert final == 0
    rate = exp.value("trainguard_checkpoint_restore_read_bytes_per_second")
    assert took[0] >= 0.6, took  # the slow read alone
    assert rate == pytest.approx(4_000_000 / took[0]), "size over the time the load took"


def test_a_failed_restore_ends_restoring(exp: Running, tg: Reporter, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError), tg.restore(str(tmp_path / "gone.pt")):
        (tmp_path / "gone.pt").read_bytes()
    tg.flush()
    assert exp.value("trainguard_checkpoint_restoring") == 0


def test_restore_slow_shows_a_restore_reading_50_mb_per_second(exp: Running) -> None:
    exp.post("/v1/faults", {"fault": "restore-slow"})
    assert exp.value("trainguard_checkpoint_restoring") == 1
    assert exp.value("trainguard_checkpoint_restore_read_bytes_per_second") == 50e6
    exp.delete("/v1/faults")
    assert exp.value("trainguard_checkpoint_restoring") == 0


def test_no_series_is_exported_twice(exp: Running, tg: Reporter, tmp_path: Path) -> None:
    """Prometheus refuses a duplicate sample of a scrape: every (name, labels) appears once."""
    (tmp_path / "full-3.json").write_text("{}")
    tg.checkpoint_saved(3, "full", str(tmp_path / "full-3.json"))
    tg.log_fragmentation(0, 0.1)
    tg.observe_collective(0.01)
    tg.flush()
    wait_value(exp, "trainguard_checkpoint_last_size_bytes", lambda v: v is not None, kind="full")
    scraped = exp.scrape()
    for name, samples in scraped.items():
        keys = [tuple(sorted(labels.items())) for labels, _ in samples]
        assert len(keys) == len(set(keys)), f"{name} has a series twice"
    assert len(scraped["trainguard_checkpoint_last_step"]) == 1


def test_the_control_view_shows_the_trainers_step_and_its_duration() -> None:
    """What the operator reads to judge a gang stuck on a lost peer (remediation/executor.py)."""
    t = TrainingState(clock=lambda: 1000.0)
    assert (t.control_view()["step"], t.control_view()["step_time_s"]) == (None, None), "no step yet"
    t.ingest({"type": "step", "step": 41, "loss": 1.0, "step_time_s": 0.25})
    t.ingest({"type": "step", "step": 42, "loss": 1.0, "step_time_s": 0.5})
    assert (t.control_view()["step"], t.control_view()["step_time_s"]) == (42, 0.5)


# ---- a rank's own pace (StragglerRank) ----


def test_step_and_collective_seconds_count_from_zero_and_add_up_each_step(exp: Running, tg: Reporter) -> None:
    """Both counters exist before the first step (rate() sees the first one), then sum each step's time
    and its collective time, capped at the step's own duration."""
    assert exp.value("trainguard_train_step_seconds_total") == 0.0
    assert exp.value("trainguard_train_step_collective_seconds_total") == 0.0
    tg.log_step(1, step_time_s=1.0, allreduce_s=0.25)
    tg.log_step(2, step_time_s=1.5, allreduce_s=0.5)
    tg.log_step(3, step_time_s=0.5, allreduce_s=2.0)  # a clock glitch: no more than the step itself
    tg.log_step(4, step_time_s=1.0)  # no collective time reported: the step alone
    wait_value(exp, "trainguard_train_step_seconds_total", lambda v: v == 4.0)
    assert exp.value("trainguard_train_step_collective_seconds_total") == 1.25


def test_step_seconds_come_from_the_reports_own_times_without_step_time() -> None:
    now = [100.0]
    state = TrainingState(clock=lambda: now[0])
    state.ingest({"type": "step", "step": 1, "ts": 100.0})
    state.ingest({"type": "step", "step": 2, "ts": 102.0, "allreduce_s": 0.5})
    view = state.snapshot()
    assert (view.step_seconds_total, view.step_collective_seconds_total) == (2.0, 0.5)
