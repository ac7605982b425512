"""Fault injection (only with --enable-fault-injection): each kind moves exactly the metrics a real
fault of that kind moves, so the rules see what they would see in production."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from trainguard.exporter.readings import GPUReading, HostReading

GPU_FAULTS = ("oom-risk", "memory-hang", "thermal", "ecc-dbe", "xid-79")
TRAINING_FAULTS = ("nan-loss", "grad-explosion", "throughput-drop", "stall")
HOST_FAULTS = ("packet-loss", "swap-pressure", "disk-latency")
KINDS = GPU_FAULTS + TRAINING_FAULTS + HOST_FAULTS


class FaultError(ValueError):
    pass


@dataclass
class Faults:
    """The active faults; thread-safe, read by the poller and the SDK ingestion."""

    active: dict[str, set[int]] = field(default_factory=dict)
    dbe_added: dict[int, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, gpu: int | None = None) -> None:
        if kind not in KINDS:
            raise FaultError(f"unknown fault {kind!r}; one of: {', '.join(KINDS)}")
        if kind in GPU_FAULTS and gpu is None:
            gpu = 0
        with self.lock:
            self.active.setdefault(kind, set()).add(gpu if gpu is not None else -1)
            if kind == "ecc-dbe" and gpu is not None:
                self.dbe_added[gpu] = self.dbe_added.get(gpu, 0) + 1  # one uncorrectable error

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

    def apply_gpus(self, readings: list[GPUReading]) -> list[GPUReading]:
        with self.lock:
            active = {k: set(v) for k, v in self.active.items()}
            dbe_added = dict(self.dbe_added)
        for r in readings:
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
        # XID 79: the GPU fell off the bus. NVML then answers GPU_IS_LOST for it, so it is lost and keeps
        # only the XID that took it down, as the NVML backend reports a real one
        return [
            GPUReading(index=r.index, uuid=r.uuid, model=r.model, lost=True, last_xid=79.0)
            if r.index in active.get("xid-79", ())
            else r
            for r in readings
        ]

    def apply_host(self, h: HostReading) -> HostReading:
        if self.has("packet-loss"):
            for iface in list(h.packet_loss_ratio) or ["eth0"]:
                h.packet_loss_ratio[iface] = 0.02
        if self.has("swap-pressure"):
            h.kswapd_cpu_ratio, h.memory_used_ratio = 0.35, 0.94
        if self.has("disk-latency"):
            for dev in list(h.disk_write_latency_s) or ["nvme0n1"]:
                h.disk_write_latency_s[dev] = 0.6
        return h
