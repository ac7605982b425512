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
    mem_temp_c: float | None = None
    """HBM temperature; None where the GPU has no memory sensor NVML reads."""
    power_limit_w: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    nvlink_tx_bytes_per_s: float | None = None
    """Summed over the active links; None without NVLink, and on the first poll (a rate needs two)."""
    nvlink_rx_bytes_per_s: float | None = None
    nvlink_crc_flit_total: float | None = None
    retired_sbe_pages: float | None = None
    """Page retirement (Volta, Turing); Ampere and newer remap rows instead and leave these None."""
    retired_dbe_pages: float | None = None
    retired_pending: float | None = None
    remapped_rows_correctable: float | None = None
    remapped_rows_uncorrectable: float | None = None
    row_remap_pending: float | None = None
    row_remap_failure: float | None = None
    sm_clock_max_mhz: float | None = None
    """The SM clock's maximum (nvmlDeviceGetMaxClockInfo): what a busy, unthrottled GPU runs near."""
    pcie_link_gen: float | None = None
    pcie_link_width: float | None = None
    pcie_max_link_gen: float | None = None
    """The most the GPU and its slot support together: a Gen5 GPU in a Gen4 slot is not degraded at 4."""
    pcie_max_link_width: float | None = None
    polled_at: float | None = None
    """Monotonic time of the poll that read this; fault injection counts polls by it."""


@dataclass
class HostReading:
    kswapd_cpu_ratio: float | None = None
    memory_used_ratio: float | None = None
    disk_write_latency_s: dict[str, float] = field(default_factory=dict)
    packet_loss_ratio: dict[str, float] = field(default_factory=dict)
    bandwidth_utilization_ratio: dict[str, float] = field(default_factory=dict)
    disk_read_bytes_per_s: dict[str, float] = field(default_factory=dict)
    infiniband_counters: dict[tuple[str, str, str], float] = field(default_factory=dict)
    """(device, port, counter) -> value of /sys/class/infiniband/*/ports/*/counters/*."""
    roce_ecn_marked: dict[tuple[str, str], float] = field(default_factory=dict)
    """(device, port) -> hw_counters/np_ecn_marked_roce_packets: packets that arrived ECN-marked."""
    roce_cnp_sent: dict[tuple[str, str], float] = field(default_factory=dict)
    """(device, port) -> hw_counters/np_cnp_sent: congestion notifications sent back to senders."""
    roce_cnp_handled: dict[tuple[str, str], float] = field(default_factory=dict)
    """(device, port) -> hw_counters/rp_cnp_handled: notifications received, rate lowered."""
    polled_at: float | None = None
    """Monotonic time of the poll that read this; fault injection counts polls by it."""
    kswapd_visible: bool = True
    """False when <host-root>/proc shows no kswapd (the pod's own PID namespace): no swap signal."""


@dataclass
class DriverInfo:
    driver_version: str = ""
    nvml_version: str = ""
    cuda_version: str = ""
    supported: bool = True
    problem: str = ""
