"""The NVML backend, driven through a fake NVML (no GPU here; the real path is checked on a GPU
machine when one is lent, see the closing notes)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tests.exporter import fake_nvml
from trainguard.exporter.app import Exporter, ExporterConfig
from trainguard.exporter.collectors import (
    ExporterCollector,
    GPUCollector,
    HostCollector,
    Snapshot,
    SnapshotBox,
    TrainingCollector,
)
from trainguard.exporter.faults import Faults
from trainguard.exporter.nvml import NVMLBackend
from trainguard.exporter.training import TrainingState

IDENTITY = {"namespace": "ml", "pod": "p-0", "node": "n1", "training_job": "j"}


def samples(exporter: Exporter) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(exporter.render().decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def exporter_for(nvml: object, timeout: float = 3.0) -> Exporter:
    backend = NVMLBackend(nvml)  # type: ignore[arg-type]
    faults = Faults()
    e = Exporter(ExporterConfig(IDENTITY, gpu_timeout_s=timeout), backend, None, TrainingState(faults=faults), faults,
                 CollectorRegistry())  # fmt: skip
    e.poll_hardware()
    return e


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


def test_lost_gpu_is_reported_as_lost() -> None:
    lost = fake_nvml.healthy_gpu(1) | {"temp": fake_nvml.NVMLError_GpuIsLost}
    s = samples(exporter_for(fake_nvml.make([fake_nvml.healthy_gpu(0), lost])))
    assert [lbl["gpu"] for lbl, _ in s["trainguard_gpu_lost"]] == ["1"]
    assert [lbl["gpu"] for lbl, _ in s["DCGM_FI_DEV_GPU_TEMP"]] == ["0"]


def test_xid_from_the_event_set_is_the_last_value() -> None:
    nvml = fake_nvml.make([fake_nvml.healthy_gpu(0), fake_nvml.healthy_gpu(1)])
    e = exporter_for(nvml)
    nvml.xid(1, 13)
    nvml.xid(1, 79)
    e.poll_hardware()
    xids = {lbl["gpu"]: v for lbl, v in samples(e)["DCGM_FI_DEV_XID_ERRORS"]}
    assert xids == {"0": 0, "1": 79}


def test_old_driver_is_reported_clearly_and_not_half_collected() -> None:
    s = samples(exporter_for(fake_nvml.make([fake_nvml.healthy_gpu(0)], driver="418.67")))
    assert "DCGM_FI_DEV_GPU_TEMP" not in s
    info = s["trainguard_exporter_info"][0][0]
    assert info["driver_supported"] == "false" and info["driver_version"] == "418.67"


def test_a_hung_nvml_call_never_blocks_a_scrape() -> None:
    e = exporter_for(fake_nvml.make([fake_nvml.healthy_gpu(0)]), timeout=0.2)
    before = e.render()
    assert b"DCGM_FI_DEV_GPU_TEMP" in before
    e.backend.nvml = fake_nvml.make([fake_nvml.healthy_gpu(0)], hang_s=2.0)  # type: ignore[union-attr]
    e.backend.handles = [e.backend.nvml.nvmlDeviceGetHandleByIndex(0)]  # type: ignore[union-attr]
    t0 = time.monotonic()
    e.poll_hardware()  # gives up after gpu_timeout_s, keeps the last snapshot
    assert time.monotonic() - t0 < 1.0
    exposition = e.render()
    assert b"DCGM_FI_DEV_GPU_TEMP" in exposition
    errors = {lbl["collector"]: v for lbl, v in samples(e)["trainguard_exporter_collector_errors_total"]}
    assert errors["gpu"] >= 1


def test_registration_reads_no_snapshot_and_no_hardware() -> None:
    class ExplodingBox(SnapshotBox):
        def get(self) -> Snapshot:
            raise AssertionError("collect() ran at registration")

    registry = CollectorRegistry()
    for cls in (GPUCollector, HostCollector, TrainingCollector, ExporterCollector):
        registry.register(cls(ExplodingBox(), IDENTITY))  # calls describe() only
    names = set(registry._names_to_collectors)
    assert {"DCGM_FI_DEV_GPU_UTIL", "trainguard_train_step", "trainguard_train_nonfinite_loss_total"} <= names
