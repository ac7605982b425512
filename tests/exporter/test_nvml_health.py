"""Issue 9's GPU health series from the NVML backend, driven through the fake NVML (no GPU here; its
shapes are checked against the installed pynvml in test_fake_nvml_matches_pynvml.py): each series is
read from the call dcgm-exporter's field comes from, and left out where the GPU does not support it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.clock import Clock
from tests.exporter import fake_nvml
from tests.exporter.nvml_exporter import exporter_for, samples
from trainguard.exporter.nvml import NVMLBackend
from trainguard.exporter.readings import GPUReading

NEW_GPU_SERIES = (
    "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_RETIRED_PENDING", "DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
)  # fmt: skip


def backend(*gpus: dict[str, Any]) -> tuple[NVMLBackend, Clock]:
    clock = Clock(100.0)
    return NVMLBackend(fake_nvml.make(list(gpus)), clock=clock), clock


def read_one(b: NVMLBackend) -> GPUReading:
    (r,) = b.read()
    return r


def test_an_h100_reads_hbm_temperature_power_limit_pcie_and_row_remapping() -> None:
    gpu = fake_nvml.healthy_gpu(0) | {"remapped": (3, 1, 1, 0)}
    r = read_one(backend(gpu)[0])
    assert r.mem_temp_c == 71, "NVML_FI_DEV_MEMORY_TEMP through nvmlDeviceGetFieldValues"
    assert r.power_limit_w == 700.0, "mW -> W"
    assert (r.pcie_tx_bytes_per_s, r.pcie_rx_bytes_per_s) == (3_000_000 * 1024, 1_000_000 * 1024), (
        "KB/s -> B/s"
    )
    assert (r.remapped_rows_correctable, r.remapped_rows_uncorrectable) == (3, 1)
    assert (r.row_remap_pending, r.row_remap_failure) == (1, 0)
    assert r.remapped_rows_total == 4, "trainguard_gpu_remapped_rows is kept: the sum"
    assert (r.retired_sbe_pages, r.retired_dbe_pages, r.retired_pending) == (None, None, None), (
        "Ampere and newer answer NotSupported for page retirement"
    )


def test_a_v100_retires_pages_and_has_no_row_remapping() -> None:
    gpu = fake_nvml.volta_gpu(0) | {
        "retired": {"sbe": [0x1000, 0x2000], "dbe": [0x3000]},
        "retired_pending": 1,
    }
    r = read_one(backend(gpu)[0])
    assert (r.retired_sbe_pages, r.retired_dbe_pages, r.retired_pending) == (2, 1, 1)
    assert (
        r.row_remap_pending is None
        and r.remapped_rows_uncorrectable is None
        and r.remapped_rows_total is None
    )


def test_unsupported_health_fields_are_left_out_of_the_scrape_not_zeroed() -> None:
    gpu = fake_nvml.pcie_gpu(0) | {
        "mem_temp": fake_nvml.NVMLError_NotSupported,
        "power_limit_mw": fake_nvml.NVMLError_NotSupported,
        "pcie_kbps": fake_nvml.NVMLError_NotSupported,
        "remapped": fake_nvml.NVMLError_NotSupported,
    }
    e = exporter_for(fake_nvml.make([gpu]))
    e.poll_hardware()
    s = samples(e)
    assert not [name for name in NEW_GPU_SERIES if name in s]
    assert s["DCGM_FI_DEV_GPU_TEMP"][0][1] == 66, "the rest of the GPU is still read"


def test_pcie_traffic_is_sampled_for_one_gpu_per_poll_and_each_gpu_every_10_s() -> None:
    """nvmlDeviceGetPcieThroughput measures for 20 ms each way inside the call: on a real H200 it took 42
    of a poll's 45 ms. Between samples a GPU's reading carries its last one."""
    gpus = [fake_nvml.healthy_gpu(i) | {"pcie_kbps": (1000 * (i + 1), 10)} for i in range(3)]
    nvml = fake_nvml.make(gpus)
    sampled: list[int] = []
    throughput = nvml.nvmlDeviceGetPcieThroughput

    def counted(h: Any, counter: int) -> int:
        sampled.append(counter)
        return int(throughput(h, counter))

    nvml.nvmlDeviceGetPcieThroughput = counted
    clock = Clock(100.0)
    b = NVMLBackend(nvml, clock=clock)

    def tx() -> list[float | None]:
        return [r.pcie_tx_bytes_per_s for r in b.read()]

    assert tx() == [1000 * 1024, None, None], "one GPU per poll: the others wait their turn"
    clock.now += 1
    assert tx() == [1000 * 1024, 2000 * 1024, None]
    clock.now += 1
    assert tx() == [1000 * 1024, 2000 * 1024, 3000 * 1024]
    assert len(sampled) == 3 * 2, "two calls (tx, rx) per GPU sampled"
    gpus[0]["pcie_kbps"] = (5000, 10)
    for _ in range(7):  # t = 103 .. 109: every sample is younger than 10 s
        clock.now += 1
        assert tx() == [1000 * 1024, 2000 * 1024, 3000 * 1024]
    assert len(sampled) == 6
    clock.now += 1  # t = 110: GPU 0's sample is 10 s old
    assert tx() == [5000 * 1024, 2000 * 1024, 3000 * 1024]
    assert len(sampled) == 8


def test_a_zero_memory_temperature_is_a_gpu_without_an_hbm_sensor() -> None:
    r = read_one(backend(fake_nvml.pcie_gpu(0) | {"mem_temp": 0})[0])
    assert r.mem_temp_c is None


def test_a_gpu_without_nvlink_has_no_nvlink_series() -> None:
    b, clock = backend(fake_nvml.pcie_gpu(0))
    read_one(b)
    clock.now += 1
    r = read_one(b)
    assert (r.nvlink_tx_bytes_per_s, r.nvlink_rx_bytes_per_s, r.nvlink_crc_flit_total) == (None, None, None)


def test_nvlink_throughput_is_the_rate_of_the_data_counters_over_the_active_links() -> None:
    gpu = fake_nvml.healthy_gpu(0)
    links = gpu["nvlink"]
    links[17]["active"] = 0  # a link that is down is not counted
    b, clock = backend(gpu)
    first = read_one(b)
    assert first.nvlink_tx_bytes_per_s is None, "a rate needs two polls"
    for link in links:
        link["tx_kib"] += 1_000_000  # 1e6 KiB each in 2 s
        link["rx_kib"] += 500_000
    clock.now += 2
    r = read_one(b)
    assert r.nvlink_tx_bytes_per_s == 17 * 1_000_000 * 1024 / 2
    assert r.nvlink_rx_bytes_per_s == 17 * 500_000 * 1024 / 2


def test_nvlink_byte_counters_where_the_kib_counters_are_not_supported() -> None:
    """Newer drivers count NVLink bytes in NVML_FI_DEV_NVLINK_COUNT_XMIT_BYTES / RCV_BYTES."""
    gpu = fake_nvml.healthy_gpu(0)
    gpu["nvlink"] = [{"active": 1, "crc_flit": 0, "tx_bytes": 0, "rx_bytes": 0} for _ in range(18)]
    b, clock = backend(gpu)
    read_one(b)
    for link in gpu["nvlink"]:
        link["tx_bytes"] += 10**9
    clock.now += 1
    r = read_one(b)
    assert (r.nvlink_tx_bytes_per_s, r.nvlink_rx_bytes_per_s) == (18 * 10**9, 0)


def test_a_link_going_down_skips_one_rate_instead_of_a_drop() -> None:
    gpu = fake_nvml.healthy_gpu(0)
    b, clock = backend(gpu)
    read_one(b)
    for link in gpu["nvlink"]:
        link["tx_kib"] += 1000
    gpu["nvlink"][3]["active"] = 0
    clock.now += 1
    assert read_one(b).nvlink_tx_bytes_per_s is None, "other links than last poll: no honest delta"
    for link in gpu["nvlink"]:
        link["tx_kib"] += 1000
    clock.now += 1
    assert read_one(b).nvlink_tx_bytes_per_s == 17 * 1000 * 1024


def test_nvlink_crc_flit_errors_are_summed_over_the_active_links() -> None:
    gpu = fake_nvml.healthy_gpu(0)
    gpu["nvlink"][0]["crc_flit"], gpu["nvlink"][5]["crc_flit"] = 7, 3
    gpu["nvlink"][9] |= {"active": 0, "crc_flit": 1000}
    assert read_one(backend(gpu)[0]).nvlink_crc_flit_total == 10


def test_a_gpu_lost_during_the_health_reads_is_reported_lost() -> None:
    gpu = fake_nvml.healthy_gpu(0) | {"mem_temp": fake_nvml.NVMLError_GpuIsLost}
    r = read_one(backend(gpu)[0])
    assert r.lost and r.mem_temp_c is None


@pytest.mark.parametrize("key", ["nvlink", "retired", "power_limit_mw"])
def test_each_health_read_lets_a_lost_gpu_through(key: str) -> None:
    gpu = fake_nvml.volta_gpu(0) | {key: fake_nvml.NVMLError_GpuIsLost}
    assert read_one(backend(gpu)[0]).lost
