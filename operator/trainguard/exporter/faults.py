"""Fault injection (only with --enable-fault-injection): each kind moves exactly the metrics a real
fault of that kind moves, so the rules see what they would see in production."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from trainguard.exporter.readings import GPUReading, HostReading

GPU_FAULTS = (
    "oom-risk", "memory-hang", "thermal", "ecc-dbe", "xid-79", "hbm-thermal", "power-limit", "nvlink-crc",
    "row-remap-pending", "row-remap-failure", "retired-pages-pending", "ecc-sbe-storm", "pcie-saturation",
    "pcie-downtrain", "power-brake", "hw-slowdown", "clock-slow",
)  # fmt: skip
TRAINING_FAULTS = ("nan-loss", "grad-explosion", "throughput-drop", "stall", "oom", "collective-slow",
                   "restore-slow", "checkpoint-fs-filling", "inference-queue")  # fmt: skip
"""Applied by TrainingState (exporter/training.py): at ingestion (what a report carries) or to each
snapshot (what keeps moving while the fault lasts)."""
HOST_FAULTS = ("packet-loss", "swap-pressure", "disk-latency", "roce-congestion", "nvml-down")
"""Node-wide: nvml-down blinds every GPU of the node (apply_gpus), the others move host readings."""
KINDS = GPU_FAULTS + TRAINING_FAULTS + HOST_FAULTS


ONCE_PER_ACTIVATION = {
    "ecc-sbe-storm": ("ecc_sbe_total", 500.0),  # a burst of corrected errors
    "row-remap-pending": ("remapped_rows_uncorrectable", 1.0),  # a row waiting for the next reset
    "retired-pages-pending": ("retired_dbe_pages", 1.0),  # a page waiting to be retired
}
"""GPU counters a fault raises once each time it is injected (like ecc-dbe's DBE); they stay raised
after it is cleared, as a hardware counter does."""

PER_POLL = {"nvlink-crc": 500.0, "roce-congestion": 20000.0}
"""Counters a fault raises on every poll while it is active (and never lowers)."""

POWER_CAP_BIT = 0x04
"""nvmlClocksThrottleReasonSwPowerCap: the clocks are lowered to hold the power limit."""
SIM_POWER_LIMIT_W = 700.0
"""An H100 SXM's limit, where the GPU does not report its own."""
PCIE_SATURATED_BYTES_PER_S = 30e9
"""A Gen5 x16 link's practical ceiling is about 50 GB/s each way, Gen4's about 25: 30 GB/s is busy."""


SLOW_CLOCK_PERCENT: dict[str, float] = {"power-brake": 50.0, "hw-slowdown": 30.0, "clock-slow": 10.0}
"""The slow-not-dead faults (issue 25) that lower the SM clock, by how much (in %) unless `percent` is
given: an external power brake holds a GPU near half its clock, a hardware slowdown (a failing VRM or
sensor) lower, and clock-slow is a clock held low with no reason NVML reports."""
SLOW_CLOCK_BITS: dict[str, int] = {"power-brake": 0x08 | 0x80, "hw-slowdown": 0x08, "clock-slow": 0}
"""NVML's reasons each sets: HW slowdown with its cause (HwPowerBrakeSlowdown), HW slowdown alone, none."""


class FaultError(ValueError):
    pass


@dataclass
class Faults:
    """The active faults; thread-safe, read by the poller and the SDK ingestion."""

    active: dict[str, set[int]] = field(default_factory=dict)
    dbe_added: dict[int, float] = field(default_factory=dict)
    added: dict[tuple[str, int], float] = field(default_factory=dict)
    """(kind, gpu) -> how much a ONCE_PER_ACTIVATION or PER_POLL fault has raised its counter so far
    (gpu -1 for a host fault)."""
    seen_poll: dict[tuple[str, int], float | None] = field(default_factory=dict)
    """(kind, gpu) -> the poll a PER_POLL fault last counted: one step per poll, not per render."""
    percent: dict[tuple[str, int], float] = field(default_factory=dict)
    """(kind, gpu) -> how much a SLOW_CLOCK_PERCENT fault lowers the clock, in %."""
    oom_added: int = 0
    """`oom` activations: each is one out-of-memory error (a counter keeps it after the fault clears)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, gpu: int | None = None, percent: float | None = None) -> None:
        if kind not in KINDS:
            raise FaultError(f"unknown fault {kind!r}; one of: {', '.join(KINDS)}")
        if percent is not None and kind not in SLOW_CLOCK_PERCENT:
            raise FaultError(f"percent: only {', '.join(SLOW_CLOCK_PERCENT)} take one (got it for {kind!r})")
        if percent is not None and not 0 < percent < 100:
            raise FaultError(f"percent: how much the clock is lowered, above 0 and below 100 (got {percent})")
        if kind in GPU_FAULTS and gpu is None:
            gpu = 0
        with self.lock:
            if kind in SLOW_CLOCK_PERCENT and gpu is not None:
                self.percent[(kind, gpu)] = SLOW_CLOCK_PERCENT[kind] if percent is None else float(percent)
            self.active.setdefault(kind, set()).add(gpu if gpu is not None else -1)
            if kind == "ecc-dbe" and gpu is not None:
                self.dbe_added[gpu] = self.dbe_added.get(gpu, 0) + 1  # one uncorrectable error
            key = (kind, -1 if gpu is None or kind in HOST_FAULTS else gpu)
            if kind in ONCE_PER_ACTIVATION:
                self.added[key] = self.added.get(key, 0.0) + ONCE_PER_ACTIVATION[kind][1]
            self.seen_poll.pop(key, None)  # the poll it is injected on counts as its first step
            if kind == "oom":
                self.oom_added += 1

    def clear(self) -> None:
        with self.lock:
            self.active.clear()

    def has(self, kind: str) -> bool:
        with self.lock:
            return kind in self.active

    def gpus(self, kind: str) -> set[int]:
        with self.lock:
            return set(self.active.get(kind, ()))

    def describe(self) -> dict[str, list[int]]:
        with self.lock:
            return {k: sorted(v) for k, v in self.active.items()}

    # ---- transforms of what a poll read ----

    def _per_poll(self, kind: str, key: int, polled_at: float | None) -> float:
        """A PER_POLL fault's total so far, one step more on a poll it has not counted (lock held).
        key: the GPU, or -1 for a host fault (on for the whole host, whatever GPU it was posted with)."""
        k = (kind, key)
        on = kind in self.active if key == -1 else key in self.active.get(kind, ())
        if on and (k not in self.seen_poll or self.seen_poll[k] != polled_at):
            self.added[k] = self.added.get(k, 0.0) + PER_POLL[kind]
            self.seen_poll[k] = polled_at
        return self.added.get(k, 0.0)

    def apply_gpus(self, readings: list[GPUReading]) -> list[GPUReading]:
        with self.lock:
            active = {k: set(v) for k, v in self.active.items()}
            dbe_added = dict(self.dbe_added)
            crc = {r.index: self._per_poll("nvlink-crc", r.index, r.polled_at) for r in readings}
            added = dict(self.added)
            percent = dict(self.percent)
        for r in readings:
            self._health(r, active, added, crc[r.index])
            self._slow(r, active, percent)
            total = (r.fb_used_mib or 0) + (r.fb_free_mib or 0)
            if r.index in active.get("oom-risk", ()) and total:
                r.fb_used_mib, r.fb_free_mib = round(total * 0.97), round(total * 0.03)
            if r.index in active.get("memory-hang", ()) and total:
                r.fb_used_mib, r.fb_free_mib = round(total * 0.92), round(total * 0.08)
                r.util, r.power_w = 2.0, 110.0
            if r.index in active.get("thermal", ()):
                r.temp_c = 91.0
                r.throttle_reasons = float(0x20 | 0x40)  # SW and HW thermal slowdown
                r.sm_clock_mhz = 1410.0
            if r.index in dbe_added:
                r.ecc_dbe_total = (r.ecc_dbe_total or 0) + dbe_added[r.index]
                if r.index in active.get("ecc-dbe", ()):
                    r.last_xid = 48.0  # the driver reports a DBE as XID 48
        if "nvml-down" in active:
            # NVML stopped answering (a driver reload, a hung driver): no GPU of the node is read any more,
            # while host and training metrics keep coming; the job is blind to its GPUs
            return []
        # XID 79: the GPU fell off the bus. NVML then answers GPU_IS_LOST for it, so it is lost and keeps
        # only the XID that took it down, as the NVML backend reports a real one
        return [
            GPUReading(index=r.index, uuid=r.uuid, model=r.model, lost=True, last_xid=79.0)
            if r.index in active.get("xid-79", ())
            else r
            for r in readings
        ]

    @staticmethod
    def _health(r: GPUReading, active: dict[str, set[int]], added: dict[tuple[str, int], float],
                crc: float) -> None:  # fmt: skip
        """The GPU health faults of issue 9, and the counters they raised."""

        def on(kind: str) -> bool:
            return r.index in active.get(kind, ())

        for kind, (attr, _) in ONCE_PER_ACTIVATION.items():
            if (kind, r.index) in added:
                setattr(r, attr, (getattr(r, attr) or 0.0) + added[(kind, r.index)])
        if ("row-remap-pending", r.index) in added:  # the sum of remapped rows moves with them
            r.remapped_rows_total = (r.remapped_rows_total or 0.0) + added[("row-remap-pending", r.index)]
        if crc:
            r.nvlink_crc_flit_total = (r.nvlink_crc_flit_total or 0.0) + crc
        if on("hbm-thermal"):
            r.mem_temp_c = 98.0  # the HBM stacks, not the die: the GPU temperature stays
        if on("power-limit"):
            limit = r.power_limit_w or SIM_POWER_LIMIT_W
            r.power_w = round(limit * 0.99, 1)
            r.throttle_reasons = float(int(r.throttle_reasons or 0) | POWER_CAP_BIT)
            r.sm_clock_mhz = float(round((r.sm_clock_mhz or 1980.0) * 0.85))
        if on("row-remap-pending"):
            r.row_remap_pending = 1.0
        if on("row-remap-failure"):
            r.row_remap_failure = 1.0
        if on("retired-pages-pending"):
            r.retired_pending = 1.0
        if on("pcie-saturation"):
            r.pcie_tx_bytes_per_s = r.pcie_rx_bytes_per_s = PCIE_SATURATED_BYTES_PER_S

    @staticmethod
    def _slow(r: GPUReading, active: dict[str, set[int]], percent: dict[tuple[str, int], float]) -> None:
        """Slow, not dead (issue 25): a PCIe link trained down to half its lanes (a busy GPU's link never
        trains down on its own; an idle one may lower its generation, which is normal), and clocks held
        low with the reasons NVML would report. A lower clock draws less power."""
        if r.index in active.get("pcie-downtrain", ()) and r.pcie_max_link_width:
            r.pcie_link_width = float(max(1, int(r.pcie_max_link_width) // 2))
        for kind, bits in SLOW_CLOCK_BITS.items():
            if r.index not in active.get(kind, ()):
                continue
            keep = 1 - percent.get((kind, r.index), SLOW_CLOCK_PERCENT[kind]) / 100
            base = r.sm_clock_max_mhz or r.sm_clock_mhz or 1980.0
            r.sm_clock_mhz = float(round(min(r.sm_clock_mhz or base, base * keep)))
            if r.power_w is not None:
                r.power_w = round(r.power_w * keep, 1)
            r.throttle_reasons = float(int(r.throttle_reasons or 0) | bits)

    def apply_host(self, h: HostReading) -> HostReading:
        with self.lock:
            roce = self._per_poll("roce-congestion", -1, h.polled_at)
        if roce:
            # marked packets arrive at this node's ports, and each port answers the senders with CNPs
            ports = sorted(set(h.roce_ecn_marked) | set(h.roce_cnp_sent)) or [("mlx5_0", "1")]
            for port in ports:
                h.roce_ecn_marked[port] = h.roce_ecn_marked.get(port, 0.0) + roce
                h.roce_cnp_sent[port] = h.roce_cnp_sent.get(port, 0.0) + roce
        if self.has("packet-loss"):
            for iface in list(h.packet_loss_ratio) or ["eth0"]:
                h.packet_loss_ratio[iface] = 0.02
        if self.has("swap-pressure"):
            h.kswapd_cpu_ratio, h.memory_used_ratio = 0.35, 0.94
        if self.has("disk-latency"):
            for dev in list(h.disk_write_latency_s) or ["nvme0n1"]:
                h.disk_write_latency_s[dev] = 0.6
        return h
