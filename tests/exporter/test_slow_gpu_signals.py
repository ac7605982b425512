"""Slow, not dead (issue 25): the PCIe link's generation and width against their maximum, the SM clock's
maximum and the throttle reasons one by one, read through the fake NVML; the faults that move exactly
those; and the sidecar's /v1/hardware view, which confirms GPUPCIeLinkDegraded, GPUClocksThrottled and
GPUClockBelowPeers while they hold and no longer once they stop."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.exporter import fake_nvml
from tests.exporter.nvml_exporter import exporter_for, samples
from tests.exporter.running import running_exporter
from tests.exporter.test_hardware_confirmation import get
from trainguard.catalog.metrics import THROTTLE_REASONS
from trainguard.exporter.degradation import BELOW_PEERS, PCIE, THROTTLED, degradations, link_share
from trainguard.exporter.faults import FaultError, Faults
from trainguard.exporter.nvml import NVMLBackend
from trainguard.exporter.readings import GPUReading
from trainguard.remediation.executor import confirms

SPEED_SERIES = (
    "DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_PCIE_LINK_WIDTH", "DCGM_FI_DEV_PCIE_MAX_LINK_GEN",
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "DCGM_FI_DEV_MAX_SM_CLOCK",
)  # fmt: skip


def test_the_link_and_the_clock_maximum_are_read_from_nvml() -> None:
    gpu = fake_nvml.healthy_gpu(0) | {"pcie_gen": 3, "pcie_width": 8, "pcie_max_gen": 4, "max_sm_clock": 1755}
    backend = NVMLBackend(fake_nvml.make([gpu]))
    (r,) = backend.read()
    assert (r.pcie_link_gen, r.pcie_link_width, r.pcie_max_link_gen, r.pcie_max_link_width) == (3, 8, 4, 16)
    assert r.sm_clock_max_mhz == 1755
    assert link_share(r) == pytest.approx(0.25), "one generation down halves a lane's rate, x8 halves again"


def test_unsupported_link_fields_are_left_out_not_zeroed() -> None:
    unsupported = {k: fake_nvml.NVMLError_NotSupported
                   for k in ("pcie_gen", "pcie_width", "pcie_max_gen", "pcie_max_width", "max_sm_clock")}  # fmt: skip
    e = exporter_for(fake_nvml.make([fake_nvml.healthy_gpu(0) | unsupported]))
    s = samples(e)
    assert not [name for name in SPEED_SERIES if name in s]
    assert s["DCGM_FI_DEV_SM_CLOCK"][0][1] == 1980, "the rest of the GPU is still read"


def reasons(s: dict[str, Any]) -> dict[str, float]:
    return {labels["reason"]: v for labels, v in s["trainguard_gpu_clock_throttle_reason"]}


def test_every_named_throttle_reason_is_its_own_series_with_nvmls_bit() -> None:
    e = exporter_for(fake_nvml.make([fake_nvml.healthy_gpu(0) | {"throttle": 0x88 | 0x04}]))
    s = samples(e)
    assert reasons(s) == {name: float(name in ("hw_slowdown", "hw_power_brake", "sw_power_cap"))
                          for name in THROTTLE_REASONS}  # fmt: skip
    assert s["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"][0][1] == 0x8C, "the bitmask is still exported"
    for name in SPEED_SERIES:
        assert s[name][0][0]["gpu"] == "0"


def test_no_reason_series_without_the_bitmask() -> None:
    e = exporter_for(
        fake_nvml.make([fake_nvml.healthy_gpu(0) | {"throttle": fake_nvml.NVMLError_NotSupported}])
    )
    assert "trainguard_gpu_clock_throttle_reason" not in samples(e)


def h100(index: int = 1, **changes: Any) -> GPUReading:
    base = GPUReading(index=index, uuid=f"GPU-{index}", model="H100", util=95.0, power_w=600.0, sm_clock_mhz=1980.0,
                      sm_clock_max_mhz=1980.0, throttle_reasons=0.0, pcie_link_gen=5.0, pcie_link_width=16.0,
                      pcie_max_link_gen=5.0, pcie_max_link_width=16.0, polled_at=1.0)  # fmt: skip
    return dataclasses.replace(base, **changes)


def moved(kind: str, r: GPUReading, percent: float | None = None) -> dict[str, tuple[Any, Any]]:
    faults = Faults()
    faults.add(kind, r.index, percent)
    (after,) = faults.apply_gpus([dataclasses.replace(r)])
    a, b = dataclasses.asdict(r), dataclasses.asdict(after)
    return {k: (a[k], b[k]) for k in a if a[k] != b[k]}


def test_pcie_downtrain_halves_the_links_lanes_and_nothing_else() -> None:
    assert moved("pcie-downtrain", h100()) == {"pcie_link_width": (16.0, 8.0)}


@pytest.mark.parametrize(
    ("kind", "bits", "percent"), [("power-brake", 0x88, 50), ("hw-slowdown", 0x08, 30), ("clock-slow", 0, 10)]
)
def test_slow_clock_faults_lower_clock_and_power_with_nvmls_reasons(
    kind: str, bits: int, percent: float
) -> None:
    m = moved(kind, h100())
    assert m["sm_clock_mhz"] == (1980.0, round(1980 * (1 - percent / 100)))
    assert m["power_w"] == (600.0, pytest.approx(600 * (1 - percent / 100)))
    assert set(m) == {"sm_clock_mhz", "power_w"} | ({"throttle_reasons"} if bits else set())
    if bits:
        assert m["throttle_reasons"][1] == bits


def test_a_slow_clock_fault_takes_its_percentage() -> None:
    assert moved("clock-slow", h100(), percent=5)["sm_clock_mhz"][1] == round(1980 * 0.95)
    with pytest.raises(FaultError, match="percent"):
        Faults().add("clock-slow", 1, 100)
    with pytest.raises(FaultError, match="percent: only"):
        Faults().add("thermal", 1, 10)


def names(found: list[dict[str, str]]) -> list[tuple[str, str, str]]:
    return sorted((d["alertname"], d["gpu"], d.get("reason", "")) for d in found)


def test_a_busy_gpus_downtrained_link_is_a_degradation_an_idle_ones_is_not() -> None:
    assert names(degradations([h100(pcie_link_width=8.0)])) == [(PCIE, "1", "")]
    assert degradations([h100(pcie_link_gen=1.0, util=0.0)]) == []
    assert degradations([h100(pcie_link_gen=4.0, pcie_max_link_gen=4.0)]) == [], "a Gen5 GPU in a Gen4 slot"


def test_throttle_reasons_that_slow_a_busy_gpu_and_those_that_do_not() -> None:
    assert names(degradations([h100(throttle_reasons=float(0x88))])) == [(THROTTLED, "1", "hw_power_brake")]
    assert names(degradations([h100(throttle_reasons=8.0)])) == [(THROTTLED, "1", "hw_slowdown")]
    assert degradations([h100(throttle_reasons=4.0, sm_clock_mhz=1900.0)]) == [], "the power cap is normal"
    assert degradations([h100(throttle_reasons=8.0, util=3.0)]) == [], "idle"


def test_clock_below_the_peers_in_view_or_below_its_own_maximum() -> None:
    peers = [h100(i) for i in range(3)]
    slow = h100(3, sm_clock_mhz=1782.0)
    assert names(degradations([*peers, slow])) == [(BELOW_PEERS, "3", "")]
    jitter = h100(3, sm_clock_mhz=1950.0)
    assert degradations([*peers, jitter]) == []
    # a node whose every GPU is braked has no faster peer in view: each is below its maximum
    braked = [h100(i, sm_clock_mhz=1188.0) for i in range(4)]
    assert names(degradations(braked)) == [(BELOW_PEERS, str(i), "") for i in range(4)]


def test_the_sidecar_confirms_a_degradation_while_it_holds_and_not_after(tmp_path: Any) -> None:
    token = tmp_path / "token"
    token.write_text("t0k3n\n")
    with running_exporter("--backend", "simulated", "--gpus", "4", "--no-host", "--enable-fault-injection",
                          "--fastpath-token-file", str(token)) as exp:  # fmt: skip
        exp.scrape()
        assert get(f"{exp.url}/v1/hardware", "t0k3n") == (200, {"faults": []}), "a healthy node: nothing"
        exp.post("/v1/faults", {"fault": "pcie-downtrain", "gpu": 1})
        exp.post("/v1/faults", {"fault": "power-brake", "gpu": 2})
        exp.post("/v1/faults", {"fault": "clock-slow", "gpu": 3, "percent": 10})
        exp.scrape()
        view = get(f"{exp.url}/v1/hardware", "t0k3n")[1]
        assert confirms(view, PCIE, "1") and not confirms(view, PCIE, "0")
        assert confirms(view, THROTTLED, "2") and not confirms(view, THROTTLED, "3")
        assert confirms(view, BELOW_PEERS, "3") and confirms(view, BELOW_PEERS, "2")
        assert not confirms(view, BELOW_PEERS, "0")
        assert all(f["holding"] for f in view["faults"])
        exp.delete("/v1/faults")
        exp.scrape()
        assert get(f"{exp.url}/v1/hardware", "t0k3n") == (200, {"faults": []}), "no longer holds"
