"""Issue 9's injected faults, field by field: each moves exactly what the real fault moves and nothing
else, counters climb per poll (not per render) or once per injection and never go back down, and the
simulated backend's baseline is healthy, so the rules see normal data until a fault is injected."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest

from trainguard.exporter.faults import GPU_FAULTS, HOST_FAULTS, Faults
from trainguard.exporter.readings import GPUReading, HostReading
from trainguard.exporter.simulated import SimulatedBackend

POLLS = itertools.count(1)


def reading(index: int = 1) -> GPUReading:
    """One simulated poll of GPU `index` (a distinct poll each call)."""
    t = float(next(POLLS))
    (r,) = SimulatedBackend(gpus=2, seed=3, clock=lambda: t).read({index})
    return r


def changed(before: Any, after: Any) -> dict[str, tuple[Any, Any]]:
    a, b = dataclasses.asdict(before), dataclasses.asdict(after)
    return {k: (a[k], b[k]) for k in a if a[k] != b[k]}


def inject(kind: str, r: GPUReading, gpu: int = 1) -> dict[str, tuple[Any, Any]]:
    faults = Faults()
    faults.add(kind, gpu)
    (after,) = faults.apply_gpus([dataclasses.replace(r)])
    return changed(r, after)


def test_hbm_thermal_heats_the_memory_not_the_die() -> None:
    r = reading()
    assert inject("hbm-thermal", r) == {"mem_temp_c": (r.mem_temp_c, 98.0)}


def test_power_limit_draws_99_percent_of_the_limit_with_the_power_cap_bit_and_a_lower_clock() -> None:
    r = reading()
    moved = inject("power-limit", r)
    assert set(moved) == {"power_w", "throttle_reasons", "sm_clock_mhz"}
    assert moved["power_w"][1] == pytest.approx(0.99 * 700)
    assert int(moved["throttle_reasons"][1]) & 0x04
    assert moved["sm_clock_mhz"][1] < r.sm_clock_mhz  # type: ignore[operator]


def test_power_limit_keeps_throttle_bits_already_set() -> None:
    r = dataclasses.replace(reading(), throttle_reasons=float(0x20))
    assert inject("power-limit", r)["throttle_reasons"][1] == 0x24


def test_row_remap_pending_raises_pending_and_one_uncorrectable_row() -> None:
    r = reading()
    assert inject("row-remap-pending", r) == {
        "row_remap_pending": (0.0, 1.0),
        "remapped_rows_uncorrectable": (0.0, 1.0),
        "remapped_rows_total": (0.0, 1.0),
    }


def test_row_remap_failure_and_retired_pages_pending() -> None:
    r = reading()
    assert inject("row-remap-failure", r) == {"row_remap_failure": (0.0, 1.0)}
    assert inject("retired-pages-pending", r) == {
        "retired_pending": (0.0, 1.0),
        "retired_dbe_pages": (0.0, 1.0),
    }


def test_ecc_sbe_storm_and_pcie_saturation() -> None:
    r = reading()
    assert inject("ecc-sbe-storm", r) == {"ecc_sbe_total": (r.ecc_sbe_total, r.ecc_sbe_total + 500)}  # type: ignore[operator]
    assert inject("pcie-saturation", r) == {
        "pcie_tx_bytes_per_s": (r.pcie_tx_bytes_per_s, 30e9),
        "pcie_rx_bytes_per_s": (r.pcie_rx_bytes_per_s, 30e9),
    }


def test_a_fault_on_one_gpu_leaves_the_others_alone() -> None:
    for kind in GPU_FAULTS:
        if kind == "xid-79":
            continue  # replaces the reading: tested in test_scrape and test_xid79_drill
        r = reading(0)
        assert inject(kind, r, gpu=1) == {}, kind


def test_nvlink_crc_climbs_500_per_poll_not_per_render_and_stays_after_clear() -> None:
    faults = Faults()
    poll1 = reading()
    faults.add("nvlink-crc", 1)

    def crc(r: GPUReading) -> float | None:
        return faults.apply_gpus([dataclasses.replace(r)])[0].nvlink_crc_flit_total

    assert crc(poll1) == 500, "the poll it is injected on counts"
    assert crc(poll1) == 500, "a second render of the same poll is not another poll"
    poll2, poll3 = reading(), reading()
    assert (crc(poll2), crc(poll3), crc(poll3)) == (1000, 1500, 1500)
    faults.clear()
    assert crc(reading()) == 1500, "a counter never goes back down"


def test_once_per_injection_counters_add_up_over_injections_and_survive_clear() -> None:
    faults = Faults()
    r = reading()
    for _ in range(2):
        faults.add("ecc-sbe-storm", 1)
        faults.add("row-remap-pending", 1)
        faults.clear()
    (after,) = faults.apply_gpus([dataclasses.replace(r)])
    assert after.ecc_sbe_total == r.ecc_sbe_total + 1000  # type: ignore[operator]
    assert (after.remapped_rows_uncorrectable, after.row_remap_pending) == (2, 0), (
        "pending ends with the fault"
    )


def host(polled_at: float, ports: tuple[tuple[str, str], ...] = ()) -> HostReading:
    h = HostReading(polled_at=polled_at)
    for i, port in enumerate(ports):
        h.roce_ecn_marked[port], h.roce_cnp_sent[port], h.roce_cnp_handled[port] = 100.0 + i, 50.0, 7.0
    return h


def test_roce_congestion_climbs_on_every_roce_port_per_poll() -> None:
    faults = Faults()
    faults.add("roce-congestion", 1)  # posted with a GPU, as the scrape test does: still the host's
    ports = (("mlx5_0", "1"), ("mlx5_1", "1"))
    first = faults.apply_host(host(1.0, ports))
    assert first.roce_ecn_marked == {ports[0]: 20100, ports[1]: 20101}
    assert first.roce_cnp_sent == dict.fromkeys(ports, 20050)
    assert first.roce_cnp_handled == dict.fromkeys(ports, 7), "the senders' side is another node's"
    assert faults.apply_host(host(1.0, ports)).roce_ecn_marked[ports[0]] == 20100, "same poll"
    assert faults.apply_host(host(2.0, ports)).roce_ecn_marked[ports[0]] == 40100


def test_roce_congestion_without_a_roce_nic_shows_a_synthetic_port() -> None:
    faults = Faults()
    faults.add("roce-congestion")
    h = faults.apply_host(host(1.0))
    assert h.roce_ecn_marked == h.roce_cnp_sent == {("mlx5_0", "1"): 20000}
    assert not h.roce_cnp_handled


def test_the_new_host_fault_is_a_host_fault() -> None:
    assert "roce-congestion" in HOST_FAULTS


def test_the_simulated_baseline_is_healthy_for_every_new_series() -> None:
    b = SimulatedBackend(gpus=8, seed=0)
    for _ in range(20):
        for r in b.read():
            assert r.temp_c is not None and r.mem_temp_c is not None
            assert 2 <= r.mem_temp_c - r.temp_c <= 9 and r.mem_temp_c < 85
            assert r.power_limit_w == 700 and r.power_w is not None and r.power_w < 0.95 * 700
            assert 1e9 < (r.pcie_tx_bytes_per_s or 0) < 1e10 and 1e9 < (r.pcie_rx_bytes_per_s or 0) < 1e10
            assert (
                1e11 < (r.nvlink_tx_bytes_per_s or 0) < 2e11 and 1e11 < (r.nvlink_rx_bytes_per_s or 0) < 2e11
            )
            zeros = (r.nvlink_crc_flit_total, r.retired_sbe_pages, r.retired_dbe_pages, r.retired_pending,
                     r.row_remap_pending, r.row_remap_failure, r.remapped_rows_correctable,
                     r.remapped_rows_uncorrectable)  # fmt: skip
            assert zeros == (0,) * 8
            assert r.throttle_reasons == 0
