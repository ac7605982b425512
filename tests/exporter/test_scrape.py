"""A real HTTP scrape of a running exporter, parsed with prometheus_client's parser: the whole
metric contract with its labels, and every fault kind moving exactly its metrics."""

from __future__ import annotations

import contextlib
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.exporter.running import Running, running_exporter
from tests.exporter.test_host import write as write_host
from tests.processes import free_port
from trainguard.catalog import COMMON_LABELS, DCGM_LABELS, METRICS, MetricType
from trainguard.exporter.faults import KINDS

STEP = {"type": "step", "loss": 2.0, "grad_norm": 1.0, "tokens": 65536, "loss_scale": 1024.0,
        "dataloader_wait_s": 0.05, "allreduce_s": 0.08, "step_time_s": 1.0}  # fmt: skip


@pytest.fixture
def exp() -> Iterator[Running]:
    with running_exporter("--backend", "simulated", "--gpus", "2", "--enable-fault-injection",
                          "--poll-interval", "0.1") as r:  # fmt: skip
        yield r


def feed(r: Running, steps: range) -> None:
    r.post("/v1/report", {"events": [STEP | {"step": s, "ts": time.time()} for s in steps]})


def full_contract(r: Running, host_root: Path) -> None:
    write_host(host_root, 1)  # the second recorded /proc state: rates now exist
    r.exporter.poll_hardware()
    # an SDK-using trainer says hello first: only then is the job's start exported
    r.post("/v1/report", {"events": [{"type": "hello", "started_at": time.time() - 60, "pid": 4242}]})
    feed(r, range(1, 4))
    r.post("/v1/report", {"events": [
        {"type": "checkpoint", "step": 3, "kind": "full", "path": "/ckpt/3", "ok": True},
        {"type": "checkpoint", "step": 3, "kind": "incremental", "path": "/ckpt/3i", "ok": True},
        {"type": "fragmentation", "gpu": 0, "ratio": 0.12},
        {"type": "request", "latency_s": 0.05, "queue_depth": 3, "kv_cache_hit_ratio": 0.8},
        # issue 9: what the SDK measures of a checkpoint, a restore, collectives and an OOM
        {"type": "checkpoint", "step": 3, "kind": "full", "path": "/ckpt/3", "ok": True, "size_bytes": 4e9,
         "fs_avail_bytes": 6e12, "fs_size_bytes": 1e13},
        {"type": "restore", "state": "start", "pid": 4242, "path": "/ckpt/3"},
        {"type": "restore", "state": "end", "pid": 4242, "path": "/ckpt/3", "ok": True,
         "read_bytes_per_second": 9e8},
        {"type": "collectives", "le": [0.001, 0.01], "ops": {"all_reduce": {"counts": [2, 1, 0], "sum": 0.008}}},
        {"type": "oom", "device": 0, "message": "CUDA out of memory"},
    ]})  # fmt: skip


@contextlib.contextmanager
def full_scrape(host_root: Path) -> Iterator[Running]:
    """Every collector on: GPUs, a recorded host (see test_host.py) with an InfiniBand port, training
    reports of every kind, and a fast path (to nowhere)."""
    write_host(host_root, 0)
    port = host_root / "sys/class/infiniband/mlx5_0/ports/1"
    (port / "counters").mkdir(parents=True)
    (port / "counters/port_rcv_errors").write_text("0\n")
    # a long poll interval: only the polls of full_contract, so the rates have a delta
    with running_exporter("--backend", "simulated", "--gpus", "2", "--host-root", str(host_root),
                          "--fastpath-url", f"http://127.0.0.1:{free_port()}/v1/events",
                          "--poll-interval", "3600") as exp:  # fmt: skip
        full_contract(exp, host_root)
        yield exp


def test_every_catalogue_metric_is_present_with_its_labels(tmp_path: Path) -> None:
    with full_scrape(tmp_path) as exp:
        scraped = exp.scrape()
    for m in METRICS:
        sample = f"{m.name}_count" if m.type == MetricType.HISTOGRAM else m.name  # _bucket has le too
        assert sample in scraped, f"{m.name} missing from the scrape"
        labels, _ = scraped[sample][0]
        expected = set(COMMON_LABELS) | set(m.labels)
        if m.is_gpu:
            expected |= set(DCGM_LABELS)
        assert set(labels) == expected, (m.name, sorted(labels))
        assert labels["training_job"] == "llama-pretrain" and labels["node"] == "gpu-node-1"
    assert scraped["trainguard_network_bandwidth_utilization_ratio"][0][1] > 0  # exact rates: test_host.py


def test_the_families_a_scrape_emits_are_the_catalogues(tmp_path: Path) -> None:
    """A family renamed or added in the exporter alone would be a series no rule or doc knows of."""
    with full_scrape(tmp_path) as exp:
        exp.exporter.render()
        with urllib.request.urlopen(f"{exp.url}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", text, re.MULTILINE))
    assert set(helps) == {m.name for m in METRICS}
    for m in METRICS:
        assert helps[m.name] == m.help, m.name


def test_training_values_from_reports(exp: Running) -> None:
    feed(exp, range(1, 3))
    assert exp.value("trainguard_train_step") == 2
    assert exp.value("trainguard_train_tokens_per_second_per_gpu") == 65536 / 1.0 / 2
    assert exp.value("trainguard_train_dataloader_wait_ratio") == pytest.approx(0.05)
    exp.post(
        "/v1/report", {"events": [STEP | {"step": 3, "loss": "nan"}, STEP | {"step": 4, "loss_scale": 512.0}]}
    )
    assert exp.value("trainguard_train_nonfinite_loss_total") == 1
    assert exp.value("trainguard_train_loss") == 2.0, "the last finite loss is kept"
    assert exp.value("trainguard_train_loss_scale_updates_total") == 1


# what each fault must move (metric, labels, check) and a metric it must leave alone
FAULT_EFFECTS = {
    "oom-risk": ("DCGM_FI_DEV_FB_USED", {"gpu": "1"}, lambda before, after: after > before, "DCGM_FI_DEV_GPU_TEMP"),
    "memory-hang": ("DCGM_FI_DEV_GPU_UTIL", {"gpu": "1"}, lambda b, a: a <= 5, "DCGM_FI_DEV_GPU_TEMP"),
    "thermal": ("DCGM_FI_DEV_GPU_TEMP", {"gpu": "1"}, lambda b, a: a > 85, "DCGM_FI_DEV_FB_USED"),
    "ecc-dbe": ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", {"gpu": "1"}, lambda b, a: a == b + 1, "DCGM_FI_DEV_GPU_TEMP"),
    "xid-79": ("DCGM_FI_DEV_XID_ERRORS", {"gpu": "1"}, lambda b, a: a == 79, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
    "nan-loss": ("trainguard_train_nonfinite_loss_total", {}, lambda b, a: a > b, "trainguard_train_grad_norm"),
    "grad-explosion": ("trainguard_train_grad_norm", {}, lambda b, a: a >= 50 * b, "trainguard_train_loss"),
    "throughput-drop": ("trainguard_train_tokens_per_second_per_gpu", {}, lambda b, a: a < 0.5 * b, "trainguard_train_grad_norm"),
    "stall": ("trainguard_train_step", {}, lambda b, a: a == b, "DCGM_FI_DEV_GPU_TEMP"),
    "packet-loss": ("trainguard_network_packet_loss_ratio", {}, lambda b, a: a > 0.001, "trainguard_host_kswapd_cpu_ratio"),
    "swap-pressure": ("trainguard_host_kswapd_cpu_ratio", {}, lambda b, a: a > 0.05, "trainguard_network_packet_loss_ratio"),
    "disk-latency": ("trainguard_host_disk_write_latency_seconds", {}, lambda b, a: a > 0.2, "trainguard_host_kswapd_cpu_ratio"),
    # issue 9, GPU health and RoCE congestion (exact effects, field by field: test_health_faults.py)
    "hbm-thermal": ("DCGM_FI_DEV_MEMORY_TEMP", {"gpu": "1"}, lambda b, a: a == 98, "DCGM_FI_DEV_GPU_TEMP"),
    "power-limit": ("DCGM_FI_DEV_POWER_USAGE", {"gpu": "1"}, lambda b, a: a == 693.0, "DCGM_FI_DEV_GPU_TEMP"),
    "nvlink-crc": ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", {"gpu": "1"}, lambda b, a: a >= b + 500 and a % 500 == 0, "DCGM_FI_DEV_GPU_TEMP"),
    "row-remap-pending": ("DCGM_FI_DEV_ROW_REMAP_PENDING", {"gpu": "1"}, lambda b, a: b == 0 and a == 1, "DCGM_FI_DEV_GPU_TEMP"),
    "row-remap-failure": ("DCGM_FI_DEV_ROW_REMAP_FAILURE", {"gpu": "1"}, lambda b, a: b == 0 and a == 1, "DCGM_FI_DEV_GPU_TEMP"),
    "retired-pages-pending": ("DCGM_FI_DEV_RETIRED_PENDING", {"gpu": "1"}, lambda b, a: b == 0 and a == 1, "DCGM_FI_DEV_GPU_TEMP"),
    "ecc-sbe-storm": ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", {"gpu": "1"}, lambda b, a: b + 500 <= a <= b + 502, "DCGM_FI_DEV_GPU_TEMP"),
    "pcie-saturation": ("DCGM_FI_PROF_PCIE_TX_BYTES", {"gpu": "1"}, lambda b, a: a == 30e9, "DCGM_FI_DEV_GPU_TEMP"),
    "roce-congestion": ("trainguard_network_ecn_marked_packets_total", {}, lambda b, a: a >= b + 20000, "trainguard_network_packet_loss_ratio"),
    # issue 25, slow not dead (exact effects, field by field: test_slow_gpu_signals.py)
    "pcie-downtrain": ("DCGM_FI_DEV_PCIE_LINK_WIDTH", {"gpu": "1"}, lambda b, a: b == 16 and a == 8, "DCGM_FI_DEV_GPU_TEMP"),
    "power-brake": ("trainguard_gpu_clock_throttle_reason", {"gpu": "1", "reason": "hw_power_brake"}, lambda b, a: b == 0 and a == 1, "DCGM_FI_DEV_GPU_TEMP"),
    "hw-slowdown": ("trainguard_gpu_clock_throttle_reason", {"gpu": "1", "reason": "hw_slowdown"}, lambda b, a: b == 0 and a == 1, "DCGM_FI_DEV_GPU_TEMP"),
    "clock-slow": ("DCGM_FI_DEV_SM_CLOCK", {"gpu": "1"}, lambda b, a: a == round(0.9 * b), "DCGM_FI_DEV_GPU_TEMP"),
    # issue 9, training signals the SDK reports (exact effects: test_training_signals.py)
    "oom": ("trainguard_train_oom_total", {}, lambda b, a: a == b + 1, "trainguard_train_grad_norm"),
    "collective-slow": ("trainguard_train_collective_seconds_sum", {"op": "all_reduce"}, lambda b, a: a >= b + 2.0, "trainguard_train_grad_norm"),
    "restore-slow": ("trainguard_checkpoint_restore_read_bytes_per_second", {}, lambda b, a: a == 50e6, "trainguard_train_grad_norm"),
    "checkpoint-fs-filling": ("trainguard_checkpoint_filesystem_avail_bytes", {}, lambda b, a: a <= 5 * 2**40, "trainguard_train_grad_norm"),
    "inference-queue": ("trainguard_inference_queue_depth", {}, lambda b, a: a == 500, "trainguard_train_grad_norm"),
}  # fmt: skip


BLINDING = {"nvml-down"}
"""Faults that remove series rather than move them: test_nvml_down_fault.py."""


def test_fault_table_covers_every_kind() -> None:
    assert set(FAULT_EFFECTS) | BLINDING == set(KINDS)


@pytest.mark.parametrize("kind", sorted(FAULT_EFFECTS))
def test_each_fault_moves_its_metrics(exp: Running, kind: str) -> None:
    metric, labels, moved_, untouched = FAULT_EFFECTS[kind]
    moved: Callable[[float, float], bool] = moved_
    feed(exp, range(1, 4))
    before = exp.value(metric, **labels) or 0.0
    other_before = exp.value(untouched, gpu="1") if untouched.startswith("DCGM") else exp.value(untouched)
    exp.post("/v1/faults", {"fault": kind, "gpu": 1})
    feed(exp, range(4, 6))
    after = exp.value(metric, **labels)
    assert after is not None and moved(before, after), (kind, before, after)
    other_after = exp.value(untouched, gpu="1") if untouched.startswith("DCGM") else exp.value(untouched)
    if untouched == "DCGM_FI_DEV_GPU_TEMP":
        assert other_after is not None and other_after < 85, f"{kind} must not heat the GPU"
    elif untouched in ("trainguard_train_loss", "trainguard_train_grad_norm"):
        assert other_after == other_before, f"{kind} must not move {untouched}"
    exp.delete("/v1/faults")
    cleared = exp.value("DCGM_FI_DEV_GPU_TEMP", gpu="1")
    assert cleared is not None and cleared < 85, "DELETE /v1/faults clears every fault"


def test_unknown_fault_is_a_400_naming_the_kinds(exp: Running) -> None:
    with pytest.raises(urllib.error.HTTPError) as exc:
        exp.post("/v1/faults", {"fault": "meteor"})
    assert exc.value.code == 400
    assert "oom-risk" in exc.value.read().decode()


def test_fault_injection_is_off_by_default() -> None:
    with (
        running_exporter("--backend", "simulated", "--gpus", "1") as r,
        pytest.raises(urllib.error.HTTPError) as exc,
    ):
        r.post("/v1/faults", {"fault": "thermal"})
    assert exc.value.code == 404


def test_healthz(exp: Running) -> None:
    with urllib.request.urlopen(f"{exp.url}/healthz") as resp:
        assert resp.status == 200
