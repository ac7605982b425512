"""The GPU slowdowns a sidecar records for the operator to confirm (GET /v1/hardware): clocks held down
by a hardware throttle reason while the GPU is busy. A minimal detector: it records the edge (a reason
newly held on a busy GPU), and the entry answers a GPUClocksThrottled claim for the hour the sidecar keeps
its hardware faults. Throttling at idle is power saving, never recorded."""

from __future__ import annotations

from trainguard.exporter.readings import GPUReading

THROTTLE_REASONS = {0x08: "hw_slowdown", 0x80: "hw_power_brake", 0x40: "hw_thermal", 0x20: "sw_thermal"}
"""nvmlClocksThrottleReason bits that mean the hardware slowed the GPU (the catalogue's `reason` label)."""
BUSY_UTIL = 50.0
"""GPU utilisation (%) at and above which the GPU is busy."""


def throttle_reason(reading: GPUReading) -> str:
    """The first hardware throttle reason a busy GPU holds, or ""."""
    if reading.util is not None and reading.util < BUSY_UTIL:
        return ""
    bits = int(reading.throttle_reasons or 0)
    return next((name for bit, name in THROTTLE_REASONS.items() if bits & bit), "")


def newly_throttled(previous: list[GPUReading] | None, current: list[GPUReading]) -> list[tuple[int, str]]:
    """(gpu, reason) of each GPU that holds a hardware throttle reason now and did not at the last render."""
    before = {r.index: throttle_reason(r) for r in previous or []}
    return [(r.index, reason) for r in current if (reason := throttle_reason(r)) and not before.get(r.index)]
