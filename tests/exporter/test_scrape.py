"""A real HTTP scrape of a running exporter, parsed with prometheus_client's parser: the whole
metric contract with its labels, and every fault kind moving exactly its metrics."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.exporter.running import Running, running_exporter
from tests.exporter.test_host import write as write_host
from trainguard.catalog import COMMON_LABELS, DCGM_LABELS, METRICS
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
    feed(r, range(1, 4))
    r.post("/v1/report", {"events": [
        {"type": "checkpoint", "step": 3, "kind": "full", "path": "/ckpt/3", "ok": True},
        {"type": "checkpoint", "step": 3, "kind": "incremental", "path": "/ckpt/3i", "ok": True},
        {"type": "fragmentation", "gpu": 0, "ratio": 0.12},
        {"type": "request", "latency_s": 0.05, "queue_depth": 3},
    ]})  # fmt: skip


def test_every_contract_metric_is_present_with_its_labels(tmp_path: Path) -> None:
    write_host(tmp_path, 0)  # recorded /proc and /sys of a training node (see test_host.py)
    with running_exporter("--backend", "simulated", "--gpus", "2", "--host-root", str(tmp_path)) as exp:
        full_contract(exp, tmp_path)
        scraped = exp.scrape()
    for m in METRICS:
        assert m.name in scraped, f"{m.name} missing from the scrape"
        labels, _ = scraped[m.name][0]
        expected = set(COMMON_LABELS) | set(m.labels)
        if m.is_gpu:
            expected |= set(DCGM_LABELS)
        assert set(labels) == expected, (m.name, sorted(labels))
        assert labels["training_job"] == "llama-pretrain" and labels["node"] == "gpu-node-1"
    assert scraped["trainguard_network_bandwidth_utilization_ratio"][0][1] > 0  # exact rates: test_host.py


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
}  # fmt: skip


def test_fault_table_covers_every_kind() -> None:
    assert set(FAULT_EFFECTS) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(FAULT_EFFECTS))
def test_each_fault_moves_its_metrics(exp: Running, kind: str) -> None:
    metric, labels, moved, untouched = FAULT_EFFECTS[kind]
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
    assert exp.value("DCGM_FI_DEV_GPU_TEMP", gpu="1") < 85, "DELETE /v1/faults clears every fault"


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
