"""Slow, not dead (issue 25): the degradations a sidecar sees on its own GPUs now, for GET /v1/hardware.

The alerts GPUPCIeLinkDegraded, GPUClocksThrottled and GPUClockBelowPeers are a label's claim; before the
operator acts on one it asks the sidecar on that node, which answers from what NVML reads there now. So
an entry is listed only while its condition holds in the latest reading, judged by the same conditions
as the rules (render/prometheus.py) with the catalogue's default numbers: the PCIe link's bandwidth share
below its maximum, a slowing throttle reason, each on a busy GPU.

GPUClockBelowPeers is a comparison across the job, whose other GPUs this sidecar may not see. It is
confirmed while the busy GPU's clock is the threshold or more below the median of the busy GPUs this
sidecar reads (at least min_gpus of them) or below its own maximum clock: a node whose every GPU is held
low (a power brake on the node) has no faster peer in view. The rule has already judged it against the
job's other GPUs, so a job-wide clock change (which puts every GPU below its maximum) never gets here.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from trainguard.catalog.alerts import ALERTS_BY_NAME
from trainguard.catalog.metrics import SLOWING_THROTTLE_REASONS, THROTTLE_REASONS
from trainguard.exporter.readings import GPUReading

PCIE = "GPUPCIeLinkDegraded"
THROTTLED = "GPUClocksThrottled"
BELOW_PEERS = "GPUClockBelowPeers"


def _default(alert: str, param: str) -> float:
    return next(p.default for p in ALERTS_BY_NAME[alert].params if p.name == param)


@dataclass(frozen=True)
class Thresholds:
    """The catalogue's defaults: the sidecar does not know a monitor's policy, and confirms the fact."""

    busy_utilization: float = _default(THROTTLED, "utilization")
    bandwidth_ratio: float = _default(PCIE, "bandwidth_ratio")
    below_ratio: float = _default(BELOW_PEERS, "ratio")
    min_gpus: float = _default(BELOW_PEERS, "min_gpus")


def link_share(r: GPUReading) -> float | None:
    """The PCIe link's share of its full bandwidth: 2^(gen - max gen) x width / max width."""
    gen, width, max_gen, max_width = (
        r.pcie_link_gen,
        r.pcie_link_width,
        r.pcie_max_link_gen,
        r.pcie_max_link_width,
    )
    if gen is None or width is None or not max_gen or not max_width:
        return None
    return float(2 ** (gen - max_gen) * width / max_width)


def slowing_reasons(mask: int) -> list[str]:
    """The slowing throttle reasons set in NVML's bitmask, as GPUClocksThrottled labels them: hw_slowdown
    only where NVML names no cause of it."""
    held = [r for r in SLOWING_THROTTLE_REASONS if mask & THROTTLE_REASONS[r]]
    if "hw_slowdown" in held and {"hw_thermal", "hw_power_brake"} & set(held):
        held.remove("hw_slowdown")
    return held


def degradations(readings: list[GPUReading], t: Thresholds | None = None) -> list[dict[str, str]]:
    """Each degradation that holds now on these GPUs: {"alertname", "gpu", "UUID"} (and "reason")."""
    t = t or Thresholds()
    busy = [r for r in readings if not r.lost and r.util is not None and r.util > t.busy_utilization]
    clocks = [r.sm_clock_mhz for r in busy if r.sm_clock_mhz]
    median = statistics.median(clocks) if len(clocks) >= t.min_gpus else None
    out: list[dict[str, str]] = []
    for r in busy:
        ident = {"gpu": str(r.index), "UUID": r.uuid}
        share = link_share(r)
        if share is not None and share < t.bandwidth_ratio:
            out.append({"alertname": PCIE, **ident})
        mask = int(r.throttle_reasons or 0)
        out += [{"alertname": THROTTLED, **ident, "reason": reason} for reason in slowing_reasons(mask)]
        if _below(r, median, t):
            out.append({"alertname": BELOW_PEERS, **ident})
    return out


def _below(r: GPUReading, median: float | None, t: Thresholds) -> bool:
    """Below the busy peers in view, or below its own maximum: a node whose every GPU is held low (a
    power brake on the node) has no faster peer here, and is the slow one among the job's."""
    clock = r.sm_clock_mhz
    if not clock:
        return False
    keep = 1 - t.below_ratio
    below_peers = median is not None and clock <= keep * median
    return below_peers or (bool(r.sm_clock_max_mhz) and clock <= keep * float(r.sm_clock_max_mhz or 0))
