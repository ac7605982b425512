"""The NVML backend, driven through a fake NVML that hands out ctypes pointer handles as pynvml does
(no GPU here; the real path is checked on a GPU machine when one is lent)."""

from __future__ import annotations

import ctypes
import time

from prometheus_client import CollectorRegistry

from tests.exporter import fake_nvml
from tests.exporter.nvml_exporter import IDENTITY, RecordingSender, exporter_for, samples
from trainguard.exporter.collectors import (
    ExporterCollector,
    GPUCollector,
    HostCollector,
    Snapshot,
    SnapshotBox,
    TrainingCollector,
)
from trainguard.exporter.nvml import handle_address


def test_readings_become_dcgm_named_metrics_with_labels() -> None:
    e = exporter_for(fake_nvml.make([fake_nvml.healthy_gpu(0), fake_nvml.healthy_gpu(1)]))
    s = samples(e)
    (labels, used), _ = s["DCGM_FI_DEV_FB_USED"]
    assert used == 60 * 1024
    assert labels == IDENTITY | {
        "gpu": "0",
        "UUID": "GPU-fake-0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "n1",
    }
    assert s["DCGM_FI_DEV_POWER_USAGE"][0][1] == 612.0
    assert s["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"][0][1] == 3
    info = s["trainguard_exporter_info"][0][0]
    assert (info["driver_version"], info["cuda_version"], info["driver_supported"]) == (
        "550.54.15",
        "12.4",
        "true",
    )


def test_not_supported_fields_are_omitted_not_zeroed() -> None:
    gpu = fake_nvml.healthy_gpu(0) | {
        "power_mw": fake_nvml.NVMLError_NotSupported,
        "remapped": fake_nvml.NVMLError_NotSupported,
    }
    s = samples(exporter_for(fake_nvml.make([gpu])))
    assert "DCGM_FI_DEV_POWER_USAGE" not in s
    assert "trainguard_gpu_remapped_rows" not in s
    assert s["DCGM_FI_DEV_GPU_TEMP"][0][1] == 66


def test_framebuffer_used_leaves_out_the_drivers_reservation() -> None:
    """As nvidia-smi and DCGM report it. Seen on a real H200: idle, version 1 said 615 MiB used where
    nvidia-smi said 0, the driver's reservation."""
    reserved = {"memory": (0, 140 * 2**30), "reserved": 615 * 2**20}
    s = samples(exporter_for(fake_nvml.make([fake_nvml.healthy_gpu(0) | reserved])))
    assert s["DCGM_FI_DEV_FB_USED"][0][1] == 0
    assert s["DCGM_FI_DEV_FB_FREE"][0][1] == 140 * 1024


def test_a_driver_without_version_2_of_the_memory_call_is_read_with_version_1() -> None:
    old = {"memory": (1 * 2**30, 70 * 2**30), "reserved": 512 * 2**20,
           "memory_v2": fake_nvml.NVMLError_FunctionNotFound}  # fmt: skip
    nvml = fake_nvml.make([fake_nvml.healthy_gpu(0) | old, fake_nvml.healthy_gpu(1) | old])
    s = samples(exporter_for(nvml))
    assert [v for _, v in s["DCGM_FI_DEV_FB_USED"]] == [1024 + 512, 1024 + 512]
    assert [v for _, v in s["DCGM_FI_DEV_FB_FREE"]] == [70 * 1024, 70 * 1024]


def test_a_gpu_lost_while_its_memory_is_read_is_lost() -> None:
    lost = fake_nvml.healthy_gpu(1) | {"memory_v2": fake_nvml.NVMLError_GpuIsLost}
    s = samples(exporter_for(fake_nvml.make([fake_nvml.healthy_gpu(0), lost])))
    assert {lbl["gpu"]: v for lbl, v in s["trainguard_gpu_lost"]} == {"0": 0, "1": 1}
    assert [v for _, v in s["DCGM_FI_DEV_FB_USED"]] == [60 * 1024]


def test_lost_gpu_is_reported_as_lost() -> None:
    lost = fake_nvml.healthy_gpu(1) | {"temp": fake_nvml.NVMLError_GpuIsLost}
    s = samples(exporter_for(fake_nvml.make([fake_nvml.healthy_gpu(0), lost])))
    assert {lbl["gpu"]: v for lbl, v in s["trainguard_gpu_lost"]} == {"0": 0, "1": 1}
    assert [lbl["gpu"] for lbl, _ in s["DCGM_FI_DEV_GPU_TEMP"]] == ["0"]
    lost_labels = next(lbl for lbl, v in s["trainguard_gpu_lost"] if v == 1)
    assert lost_labels["UUID"] == "GPU-fake-1", "the UUID enumerated at start, not one made up"


def test_handles_are_told_apart_by_address_not_identity() -> None:
    nvml = fake_nvml.make([fake_nvml.healthy_gpu(0), fake_nvml.healthy_gpu(1)])
    nvml.nvmlInit()
    a, b = nvml.nvmlDeviceGetHandleByIndex(1), nvml.nvmlDeviceGetHandleByIndex(1)
    assert a is not b and a != b, "the fake hands out a new pointer object per call, as pynvml does"
    assert handle_address(a) == handle_address(b) != handle_address(nvml.nvmlDeviceGetHandleByIndex(0))
    assert handle_address(ctypes.POINTER(fake_nvml.struct_c_nvmlDevice_t)()) is None


def test_xid_from_the_event_set_is_the_last_value() -> None:
    nvml = fake_nvml.make([fake_nvml.healthy_gpu(0), fake_nvml.healthy_gpu(1)])
    sender = RecordingSender()
    e = exporter_for(nvml, sender=sender)
    e.render()
    nvml.xid(1, 13)
    nvml.xid(1, 79)
    e.poll_hardware()
    xids = {lbl["gpu"]: v for lbl, v in samples(e)["DCGM_FI_DEV_XID_ERRORS"]}
    assert xids == {"0": 0, "1": 79}
    assert sender.alertnames() == [("GPUCriticalXid", "1")], "the fast path sees the XID too"


def test_a_gpu_that_falls_off_the_bus_keeps_its_xid_and_is_posted_as_lost() -> None:
    gpus = [fake_nvml.healthy_gpu(0), fake_nvml.healthy_gpu(1)]
    nvml = fake_nvml.make(gpus)
    sender = RecordingSender()
    e = exporter_for(nvml, sender=sender)
    e.render()
    nvml.xid(1, 79)
    for key in ("util", "memory", "temp", "uuid", "name"):  # XID 79: the GPU answers nothing any more
        gpus[1][key] = fake_nvml.NVMLError_GpuIsLost
    e.poll_hardware()
    s = samples(e)
    assert {lbl["gpu"]: v for lbl, v in s["trainguard_gpu_lost"]} == {"0": 0, "1": 1}
    xid = {lbl["gpu"]: (v, lbl["UUID"]) for lbl, v in s["DCGM_FI_DEV_XID_ERRORS"]}
    assert xid["1"] == (79, "GPU-fake-1"), "GPUCriticalXid must still see what took the GPU down"
    assert "1" not in {lbl["gpu"] for lbl, _ in s["DCGM_FI_DEV_GPU_TEMP"]}
    assert sorted(sender.alertnames()) == [("GPUCriticalXid", "1"), ("GPULost", "1")]
    e.poll_hardware()
    e.render()
    assert len(sender.sent) == 2, "edges only: a GPU still lost is not news"


def test_a_lost_gpu_without_an_xid_exports_no_made_up_zero() -> None:
    lost = fake_nvml.healthy_gpu(1) | {"temp": fake_nvml.NVMLError_GpuIsLost}
    s = samples(exporter_for(fake_nvml.make([fake_nvml.healthy_gpu(0), lost])))
    assert {lbl["gpu"] for lbl, _ in s["DCGM_FI_DEV_XID_ERRORS"]} == {"0"}


def test_old_driver_is_reported_clearly_and_not_half_collected() -> None:
    s = samples(exporter_for(fake_nvml.make([fake_nvml.healthy_gpu(0)], driver="418.67")))
    assert "DCGM_FI_DEV_GPU_TEMP" not in s
    info = s["trainguard_exporter_info"][0][0]
    assert info["driver_supported"] == "false" and info["driver_version"] == "418.67"


def test_a_hung_nvml_call_never_blocks_a_scrape() -> None:
    nvml = fake_nvml.make([fake_nvml.healthy_gpu(0)])
    e = exporter_for(nvml, timeout=0.2)
    before = e.render()
    assert b"DCGM_FI_DEV_GPU_TEMP" in before
    nvml.hang_s = 2.0
    t0 = time.monotonic()
    e.poll_hardware()  # gives up after gpu_timeout_s, keeps the last snapshot
    assert time.monotonic() - t0 < 1.0
    exposition = e.render()
    assert b"DCGM_FI_DEV_GPU_TEMP" in exposition
    s = samples(e)
    errors = {lbl["collector"]: v for lbl, v in s["trainguard_exporter_collector_errors_total"]}
    assert errors["gpu"] >= 1
    up = {lbl["collector"]: (v, lbl["error"]) for lbl, v in s["trainguard_exporter_collector_up"]}
    assert up["gpu"] == (0, "read hung for over 0.2s")


def test_registration_reads_no_snapshot_and_no_hardware() -> None:
    class ExplodingBox(SnapshotBox):
        def get(self) -> Snapshot:
            raise AssertionError("collect() ran at registration")

    registry = CollectorRegistry()
    for cls in (GPUCollector, HostCollector, TrainingCollector, ExporterCollector):
        registry.register(cls(ExplodingBox(), IDENTITY))  # calls describe() only
    names = set(registry._names_to_collectors)
    assert {"DCGM_FI_DEV_GPU_UTIL", "trainguard_train_step", "trainguard_train_nonfinite_loss_total"} <= names
