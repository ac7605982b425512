"""The sidecar records a busy GPU newly held down by a hardware throttle reason (GPUClocksThrottled) in
GET /v1/hardware, for the operator's ConfirmFault of a slowNode claim; throttling at idle is power
saving and is never recorded, and a reason already held is not recorded again."""

from __future__ import annotations

from pathlib import Path

from tests.exporter.running import running_exporter
from tests.exporter.test_hardware_confirmation import get
from trainguard.exporter.readings import GPUReading
from trainguard.exporter.slowdowns import newly_throttled, throttle_reason


def gpu(index: int = 0, util: float | None = 95.0, reasons: float | None = 0.0) -> GPUReading:
    return GPUReading(index=index, uuid=f"GPU-{index}", model="H100", util=util, throttle_reasons=reasons)


def test_each_hardware_reason_is_named_and_the_power_cap_or_idle_is_not() -> None:
    assert throttle_reason(gpu(reasons=0x08)) == "hw_slowdown"
    assert throttle_reason(gpu(reasons=0x80)) == "hw_power_brake"
    assert throttle_reason(gpu(reasons=0x40)) == "hw_thermal"
    assert throttle_reason(gpu(reasons=0x20)) == "sw_thermal"
    assert throttle_reason(gpu(reasons=0x04)) == "", (
        "the software power cap is the limit at work, not a fault"
    )
    assert throttle_reason(gpu(util=5.0, reasons=0x08)) == "", "idle: never"
    assert throttle_reason(gpu(reasons=None)) == ""


def test_only_the_edge_is_news() -> None:
    held = [gpu(0, reasons=0x08), gpu(1)]
    assert newly_throttled(None, held) == [(0, "hw_slowdown")]
    assert newly_throttled(held, held) == []
    assert newly_throttled([gpu(0, util=5.0, reasons=0x08)], held) == [(0, "hw_slowdown")], "busy again"


def test_the_sidecar_reports_a_throttled_gpu_for_the_operator_to_confirm(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t0k3n\n")
    with running_exporter("--backend", "simulated", "--gpus", "2", "--no-host", "--enable-fault-injection",
                          "--fastpath-token-file", str(token)) as exp:  # fmt: skip
        exp.scrape()
        exp.post("/v1/faults", {"fault": "thermal", "gpu": 1})  # SW and HW thermal slowdown held
        exp.scrape()
        exp.scrape()
        code, body = get(f"{exp.url}/v1/hardware", "t0k3n")
        assert code == 200
        assert [(f["alertname"], f["gpu"]) for f in body["faults"]] == [("GPUClocksThrottled", "1")]
