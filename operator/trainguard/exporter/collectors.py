"""prometheus_client custom collectors over the latest snapshot.

collect() is state-free: it turns the snapshot the poller stored into metric families and reads
no hardware. describe() lists the families without a snapshot, so registration touches nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.core import Metric as Family
from prometheus_client.registry import Collector

from trainguard import __version__
from trainguard.catalog import COMMON_LABELS, DCGM_LABELS, METRICS, METRICS_BY_NAME, Metric, MetricType
from trainguard.catalog.metrics import THROTTLE_REASONS
from trainguard.exporter.assignment import Assignment
from trainguard.exporter.readings import DriverInfo, GPUReading, HostReading
from trainguard.exporter.training import TrainingView

GPU_VALUES: dict[str, Callable[[GPUReading], float | None]] = {
    "DCGM_FI_DEV_GPU_UTIL": lambda r: r.util,
    "DCGM_FI_DEV_FB_USED": lambda r: r.fb_used_mib,
    "DCGM_FI_DEV_FB_FREE": lambda r: r.fb_free_mib,
    "DCGM_FI_DEV_MEM_COPY_UTIL": lambda r: r.mem_copy_util,
    "DCGM_FI_DEV_GPU_TEMP": lambda r: r.temp_c,
    "DCGM_FI_DEV_POWER_USAGE": lambda r: r.power_w,
    "DCGM_FI_DEV_SM_CLOCK": lambda r: r.sm_clock_mhz,
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": lambda r: r.throttle_reasons,
    "DCGM_FI_DEV_XID_ERRORS": lambda r: r.last_xid,
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": lambda r: r.ecc_sbe_total,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": lambda r: r.ecc_dbe_total,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": lambda r: r.pcie_replay_total,
    "trainguard_gpu_remapped_rows": lambda r: r.remapped_rows_total,
    "DCGM_FI_DEV_MEMORY_TEMP": lambda r: r.mem_temp_c,
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": lambda r: r.power_limit_w,
    "DCGM_FI_PROF_PCIE_TX_BYTES": lambda r: r.pcie_tx_bytes_per_s,
    "DCGM_FI_PROF_PCIE_RX_BYTES": lambda r: r.pcie_rx_bytes_per_s,
    "DCGM_FI_PROF_NVLINK_TX_BYTES": lambda r: r.nvlink_tx_bytes_per_s,
    "DCGM_FI_PROF_NVLINK_RX_BYTES": lambda r: r.nvlink_rx_bytes_per_s,
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": lambda r: r.nvlink_crc_flit_total,
    "DCGM_FI_DEV_RETIRED_SBE": lambda r: r.retired_sbe_pages,
    "DCGM_FI_DEV_RETIRED_DBE": lambda r: r.retired_dbe_pages,
    "DCGM_FI_DEV_RETIRED_PENDING": lambda r: r.retired_pending,
    "DCGM_FI_DEV_ROW_REMAP_PENDING": lambda r: r.row_remap_pending,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda r: r.row_remap_failure,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": lambda r: r.remapped_rows_correctable,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": lambda r: r.remapped_rows_uncorrectable,
    "DCGM_FI_DEV_PCIE_LINK_GEN": lambda r: r.pcie_link_gen,
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": lambda r: r.pcie_link_width,
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": lambda r: r.pcie_max_link_gen,
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": lambda r: r.pcie_max_link_width,
    "DCGM_FI_DEV_MAX_SM_CLOCK": lambda r: r.sm_clock_max_mhz,
}
"""A GPU reading's value for each per-GPU family of the catalogue (GPU_FAMILIES), by metric name."""

THROTTLE_FAMILY = "trainguard_gpu_clock_throttle_reason"
"""The bitmask broken out per reason: one series per reason, from the same reading."""
GPU_FAMILIES: tuple[Metric, ...] = tuple(
    m for m in METRICS if m.is_gpu and m.name not in ("trainguard_gpu_lost", THROTTLE_FAMILY)
)
"""Per-GPU families read from a reading; a lost GPU keeps only its XID (what took it down)."""

LOST_GPU_VALUES = ("DCGM_FI_DEV_XID_ERRORS",)


@dataclass
class Snapshot:
    gpus: list[GPUReading] = field(default_factory=list)
    host: HostReading = field(default_factory=HostReading)
    training: TrainingView = field(default_factory=TrainingView)
    driver: DriverInfo = field(default_factory=DriverInfo)
    backend: str = "nvml"
    errors: dict[str, float] = field(default_factory=dict)
    fastpath: dict[str, int] | None = None
    """Delivery results; None when no fast path is configured."""
    collectors: dict[str, str] = field(default_factory=dict)
    """collector -> "" when it delivers, else a short reason (collector_up 0); absent: not running."""
    assignment: Assignment | None = None
    """This pod's GPUs; None without a GPU backend."""
    trace_id: str = ""
    """The run's trace id (--trace-id), for the alerts' correlation annotations."""


class SnapshotBox:
    """Holds the latest snapshot; swapped whole by the poller, read whole by collectors."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snap = Snapshot()

    def get(self) -> Snapshot:
        with self._lock:
            return self._snap

    def set(self, snap: Snapshot) -> None:
        with self._lock:
            self._snap = snap


def labels_of(m: Metric) -> tuple[str, ...]:
    """The labels a family carries: the common ones, then the catalogue's extra ones."""
    return (*COMMON_LABELS, *(x for x in m.labels if x not in COMMON_LABELS))


def family(name: str) -> GaugeMetricFamily | CounterMetricFamily:
    """An empty family whose type, help and labels come from the catalogue entry `name`.

    dcgm-exporter's counters keep their names (no _total), so they are typed gauge here; the
    trainguard counters end in _total, which prometheus_client appends to the samples itself."""
    m = METRICS_BY_NAME[name]
    labels = list(labels_of(m))
    if m.type == MetricType.COUNTER and name.endswith("_total"):
        return CounterMetricFamily(name.removesuffix("_total"), m.help, labels=labels)
    return GaugeMetricFamily(name, m.help, labels=labels)


class _Base(Collector):
    def __init__(self, box: SnapshotBox, identity: dict[str, str]) -> None:
        self.box = box
        self.identity = [identity.get(k, "") for k in COMMON_LABELS]

    def describe(self) -> Iterator[Family]:
        yield from self._families()

    def collect(self) -> Iterator[Family]:
        yield from self._families(self.box.get())

    def _families(self, snap: Snapshot | None = None) -> Iterator[Family]:
        raise NotImplementedError


class GPUCollector(_Base):
    """The dcgm-exporter-named GPU metrics of this pod's GPUs, and whether each is lost."""

    def _families(self, snap: Snapshot | None = None) -> Iterator[Family]:
        fams = {m.name: family(m.name) for m in GPU_FAMILIES}
        lost = family("trainguard_gpu_lost")
        reasons = family(THROTTLE_FAMILY)
        if snap is not None and snap.driver.supported:
            host = self.identity[COMMON_LABELS.index("node")]
            for r in snap.gpus:
                gpu = {"gpu": str(r.index), "UUID": r.uuid, "modelName": r.model, "Hostname": host}
                values = [*self.identity, *(gpu[x] for x in DCGM_LABELS)]
                lost.add_metric(values, 1.0 if r.lost else 0.0)
                for name, fam in fams.items():
                    if r.lost and name not in LOST_GPU_VALUES:
                        continue
                    value = GPU_VALUES[name](r)
                    if value is not None:  # unsupported: left out, never zero
                        fam.add_metric(values, float(value))
                if r.throttle_reasons is not None and not r.lost:
                    mask = int(r.throttle_reasons)
                    for reason, bit in THROTTLE_REASONS.items():
                        reasons.add_metric([*values, reason], 1.0 if mask & bit else 0.0)
        yield from fams.values()
        yield lost
        yield reasons


class HostCollector(_Base):
    def _families(self, snap: Snapshot | None = None) -> Iterator[Family]:
        kswapd = family("trainguard_host_kswapd_cpu_ratio")
        memory = family("trainguard_host_memory_used_ratio")
        disk = family("trainguard_host_disk_write_latency_seconds")
        disk_read = family("trainguard_host_disk_read_bytes_per_second")
        loss = family("trainguard_network_packet_loss_ratio")
        util = family("trainguard_network_bandwidth_utilization_ratio")
        ib = family("trainguard_infiniband_port_counter_total")
        roce = {
            "trainguard_network_ecn_marked_packets_total": "roce_ecn_marked",
            "trainguard_network_cnp_sent_total": "roce_cnp_sent",
            "trainguard_network_cnp_handled_total": "roce_cnp_handled",
        }
        roce_fams = {name: family(name) for name in roce}
        if snap is not None:
            h = snap.host
            if h.kswapd_cpu_ratio is not None:
                kswapd.add_metric(self.identity, h.kswapd_cpu_ratio)
            if h.memory_used_ratio is not None:
                memory.add_metric(self.identity, h.memory_used_ratio)
            for dev, v in sorted(h.disk_write_latency_s.items()):
                disk.add_metric([*self.identity, dev], v)
            for dev, v in sorted(h.disk_read_bytes_per_s.items()):
                disk_read.add_metric([*self.identity, dev], v)
            for iface, v in sorted(h.packet_loss_ratio.items()):
                loss.add_metric([*self.identity, iface], v)
            for iface, v in sorted(h.bandwidth_utilization_ratio.items()):
                util.add_metric([*self.identity, iface], v)
            for (dev, port, name), v in sorted(h.infiniband_counters.items()):
                ib.add_metric([*self.identity, dev, port, name], v)
            for name, attr in roce.items():
                counters: dict[tuple[str, str], float] = getattr(h, attr)
                for (dev, port), v in sorted(counters.items()):
                    roce_fams[name].add_metric([*self.identity, dev, port], v)
        yield from (kswapd, memory, disk, disk_read, loss, util, ib, *roce_fams.values())


def histogram(name: str) -> HistogramMetricFamily:
    """An empty histogram family from the catalogue entry `name` (its buckets are in the entry)."""
    m = METRICS_BY_NAME[name]
    return HistogramMetricFamily(name, m.help, labels=list(labels_of(m)))


def cumulative_buckets(bounds: tuple[float, ...], counts: list[float]) -> list[tuple[str, float]]:
    """(le, cumulative count) pairs as Prometheus wants them, +Inf last, from per-bucket counts; `le`
    written as prometheus_client writes it (0.001, 2.5, 60.0)."""
    out: list[tuple[str, float]] = []
    total = 0.0
    for le, n in zip((*(repr(float(b)) for b in bounds), "+Inf"), counts, strict=True):
        total += n
        out.append((le, total))
    return out


class TrainingCollector(_Base):
    GAUGES: tuple[tuple[str, str], ...] = (
        ("trainguard_train_start_timestamp_seconds", "start_ts"),
        ("trainguard_train_step", "step"),
        ("trainguard_train_last_step_timestamp_seconds", "last_step_ts"),
        ("trainguard_train_loss", "loss"),
        ("trainguard_train_grad_norm", "grad_norm"),
        ("trainguard_train_tokens_per_second_per_gpu", "tokens_per_second_per_gpu"),
        ("trainguard_train_loss_scale", "loss_scale"),
        ("trainguard_train_dataloader_wait_ratio", "dataloader_wait_ratio"),
        ("trainguard_train_allreduce_time_ratio", "allreduce_time_ratio"),
        ("trainguard_inference_latency_seconds", "inference_latency_s"),
        ("trainguard_inference_queue_depth", "inference_queue_depth"),
        ("trainguard_inference_kv_cache_hit_ratio", "inference_kv_cache_hit_ratio"),
        ("trainguard_checkpoint_filesystem_avail_bytes", "checkpoint_fs_avail_bytes"),
        ("trainguard_checkpoint_filesystem_size_bytes", "checkpoint_fs_size_bytes"),
        ("trainguard_checkpoint_restore_read_bytes_per_second", "restore_read_bytes_per_s"),
    )
    COLLECTIVES = "trainguard_train_collective_seconds"

    def _families(self, snap: Snapshot | None = None) -> Iterator[Family]:
        gauges = {name: family(name) for name, _ in self.GAUGES}
        nonfinite = family("trainguard_train_nonfinite_loss_total")
        scale_updates = family("trainguard_train_loss_scale_updates_total")
        frag = family("trainguard_gpu_memory_fragmentation_ratio")
        ckpt_ts = family("trainguard_checkpoint_last_success_timestamp_seconds")
        ckpt_step = family("trainguard_checkpoint_last_step")
        ckpt_size = family("trainguard_checkpoint_last_size_bytes")
        restoring = family("trainguard_checkpoint_restoring")
        oom = family("trainguard_train_oom_total")
        step_s = family("trainguard_train_step_seconds_total")
        step_collective_s = family("trainguard_train_step_collective_seconds_total")
        stall_s = family("trainguard_train_stall_seconds_total")
        save_s = family("trainguard_checkpoint_save_seconds_total")
        collectives = histogram(self.COLLECTIVES)
        if snap is not None:
            t = snap.training
            for name, attr in self.GAUGES:
                value = getattr(t, attr)
                if value is not None:
                    gauges[name].add_metric(self.identity, float(value))
            # counters exist from the start at zero, so the first increase is visible to rate()
            nonfinite.add_metric(self.identity, t.nonfinite_total)
            scale_updates.add_metric(self.identity, t.loss_scale_updates_total)
            oom.add_metric(self.identity, t.oom_total)
            step_s.add_metric(self.identity, t.step_seconds_total)
            step_collective_s.add_metric(self.identity, t.step_collective_seconds_total)
            stall_s.add_metric(self.identity, t.stall_seconds_total)
            save_s.add_metric(self.identity, t.checkpoint_save_seconds_total)
            restoring.add_metric(self.identity, 1.0 if t.restoring else 0.0)  # 0 from the start, as counters
            bounds = METRICS_BY_NAME[self.COLLECTIVES].buckets
            for op, h in sorted(t.collectives.items()):
                collectives.add_metric([*self.identity, op], cumulative_buckets(bounds, h.counts), h.sum)
            for kind, v in sorted(t.checkpoint_size_bytes.items()):
                ckpt_size.add_metric([*self.identity, kind], v)
            for gpu, v in sorted(t.fragmentation.items()):
                frag.add_metric([*self.identity, gpu], v)
            for kind, v in sorted(t.checkpoint_ts.items()):
                ckpt_ts.add_metric([*self.identity, kind], v)
            for kind, v in sorted(t.checkpoint_step.items()):
                ckpt_step.add_metric([*self.identity, kind], v)
        yield from gauges.values()
        yield from (nonfinite, scale_updates, frag, ckpt_ts, ckpt_step, ckpt_size, restoring, oom)
        yield from (step_s, step_collective_s, stall_s, save_s)
        yield collectives


COLLECTORS = ("gpu", "host", "training")
"""Collectors that poll, each with an error counter."""
UP = ("gpu", "host", "kswapd", "training")
"""What collector_up reports on: the collectors, and kswapd (the host's swap signal), which a pod's
own PID namespace hides while the rest of the host collector delivers."""
FASTPATH_RESULTS = ("sent", "failed", "unauthorized", "rejected", "dropped")


class ExporterCollector(_Base):
    """The exporter's own health: versions, collectors up or not (and why), errors, which GPUs are
    this pod's, fast-path results."""

    def _families(self, snap: Snapshot | None = None) -> Iterator[Family]:
        info = family("trainguard_exporter_info")
        up = family("trainguard_exporter_collector_up")
        errors = family("trainguard_exporter_collector_errors_total")
        assigned = family("trainguard_exporter_gpus_assigned")
        fast = family("trainguard_exporter_fastpath_events_total")
        if snap is not None:
            d = snap.driver
            info.add_metric([*self.identity, __version__, snap.backend, d.driver_version, d.nvml_version,
                             d.cuda_version, str(d.supported).lower(), snap.trace_id], 1.0)  # fmt: skip
            for name in COLLECTORS:
                errors.add_metric([*self.identity, name], snap.errors.get(name, 0.0))
            for name in UP:
                if name in snap.collectors:
                    problem = snap.collectors[name]
                    up.add_metric([*self.identity, name, problem], 0.0 if problem else 1.0)
            a = snap.assignment
            if a is not None:
                assigned.add_metric([*self.identity, a.source], float(len(a.indices or ())))
            if snap.fastpath is not None:
                for result in sorted(set(FASTPATH_RESULTS) | set(snap.fastpath)):
                    fast.add_metric([*self.identity, result], float(snap.fastpath.get(result, 0)))
        yield from (info, up, errors, assigned, fast)
