"""Plain records of what one poll read. None means "not supported here", never zero."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GPUDevice:
    """A GPU as enumerated at start: what identifies it even once it stops answering."""

    index: int
    uuid: str
    model: str


@dataclass
class GPUReading:
    index: int
    uuid: str
    model: str
    lost: bool = False
    util: float | None = None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    mem_copy_util: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    throttle_reasons: float | None = None
    last_xid: float | None = None
    ecc_sbe_total: float | None = None
    ecc_dbe_total: float | None = None
    pcie_replay_total: float | None = None
    remapped_rows_total: float | None = None


@dataclass
class HostReading:
    kswapd_cpu_ratio: float | None = None
    memory_used_ratio: float | None = None
    disk_write_latency_s: dict[str, float] = field(default_factory=dict)
    packet_loss_ratio: dict[str, float] = field(default_factory=dict)
    bandwidth_utilization_ratio: dict[str, float] = field(default_factory=dict)
    infiniband_counters: dict[tuple[str, str, str], float] = field(default_factory=dict)
    """(device, port, counter) -> value of /sys/class/infiniband/*/ports/*/counters/*."""
    kswapd_visible: bool = True
    """False when <host-root>/proc shows no kswapd (the pod's own PID namespace): no swap signal."""


@dataclass
class DriverInfo:
    driver_version: str = ""
    nvml_version: str = ""
    cuda_version: str = ""
    supported: bool = True
    problem: str = ""
