"""prometheus_client custom collectors over the latest snapshot.

collect() is state-free: it turns the snapshot the poller stored into metric families and reads
no hardware. describe() lists the families without a snapshot, so registration touches nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trainguard import __version__
from trainguard.catalog import METRICS_BY_NAME
from trainguard.exporter.readings import DriverInfo, GPUReading, HostReading
from trainguard.exporter.training import TrainingView

IDENTITY = ("namespace", "pod", "node", "training_job")
GPU_LABELS = ("gpu", "UUID", "modelName", "Hostname")

GPU_FIELDS: tuple[tuple[str, str], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "util"),
    ("DCGM_FI_DEV_FB_USED", "fb_used_mib"),
    ("DCGM_FI_DEV_FB_FREE", "fb_free_mib"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "mem_copy_util"),
    ("DCGM_FI_DEV_GPU_TEMP", "temp_c"),
    ("DCGM_FI_DEV_POWER_USAGE", "power_w"),
    ("DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz"),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "throttle_reasons"),
    ("DCGM_FI_DEV_XID_ERRORS", "last_xid"),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc_sbe_total"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc_dbe_total"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "pcie_replay_total"),
)


@dataclass
class Snapshot:
    gpus: list[GPUReading] = field(default_factory=list)
    host: HostReading = field(default_factory=HostReading)
    training: TrainingView = field(default_factory=TrainingView)
    driver: DriverInfo = field(default_factory=DriverInfo)
    backend: str = "nvml"
    errors: dict[str, float] = field(default_factory=dict)
    fastpath: dict[str, int] = field(default_factory=dict)


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


def _help(name: str) -> str:
    return METRICS_BY_NAME[name].help


def _gauge(name: str, labels: tuple[str, ...], help_: str | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_ or _help(name), labels=list(labels))


def _counter(name: str, labels: tuple[str, ...], help_: str | None = None) -> CounterMetricFamily:
    # prometheus_client appends _total to a counter's samples; the family is named without it
    return CounterMetricFamily(name.removesuffix("_total"), help_ or _help(name), labels=list(labels))


class _Base(Collector):
    def __init__(self, box: SnapshotBox, identity: dict[str, str]) -> None:
        self.box = box
        self.identity = [identity.get(k, "") for k in IDENTITY]

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self.box.get())

    def _families(self, snap: Snapshot | None = None) -> Iterator[Metric]:
        raise NotImplementedError


class GPUCollector(_Base):
    """The dcgm-exporter-named GPU metrics; counters keep dcgm-exporter's gauge-style names."""

    def _families(self, snap: Snapshot | None = None) -> Iterator[Metric]:
        labels = (*IDENTITY, *GPU_LABELS)
        fams = {name: _gauge(name, labels) for name, _ in GPU_FIELDS}
        lost = _gauge(
            "trainguard_gpu_lost", (*IDENTITY, "gpu", "UUID"), "1 when NVML reports the GPU as lost."
        )
        remapped = _gauge("trainguard_gpu_remapped_rows", labels, "Rows remapped after memory errors.")
        if snap is not None and snap.driver.supported:
            host = self.identity[2]
            for r in snap.gpus:
                if r.lost:
                    lost.add_metric([*self.identity, str(r.index), r.uuid], 1.0)
                    continue
                values = [*self.identity, str(r.index), r.uuid, r.model, host]
                for name, attr in GPU_FIELDS:
                    value = getattr(r, attr)
                    if value is not None:  # unsupported: left out, never zero
                        fams[name].add_metric(values, float(value))
                if r.remapped_rows_total is not None:
                    remapped.add_metric(values, r.remapped_rows_total)
        yield from fams.values()
        yield lost
        yield remapped


class HostCollector(_Base):
    def _families(self, snap: Snapshot | None = None) -> Iterator[Metric]:
        kswapd = _gauge("trainguard_host_kswapd_cpu_ratio", IDENTITY)
        memory = _gauge("trainguard_host_memory_used_ratio", IDENTITY)
        disk = _gauge("trainguard_host_disk_write_latency_seconds", (*IDENTITY, "device"))
        loss = _gauge("trainguard_network_packet_loss_ratio", (*IDENTITY, "interface"))
        util = _gauge("trainguard_network_bandwidth_utilization_ratio", (*IDENTITY, "interface"))
        ib = _counter("trainguard_infiniband_port_counter_total", (*IDENTITY, "device", "port", "counter"),
                      "Raw InfiniBand port counters from /sys/class/infiniband.")  # fmt: skip
        if snap is not None:
            h = snap.host
            if h.kswapd_cpu_ratio is not None:
                kswapd.add_metric(self.identity, h.kswapd_cpu_ratio)
            if h.memory_used_ratio is not None:
                memory.add_metric(self.identity, h.memory_used_ratio)
            for dev, v in sorted(h.disk_write_latency_s.items()):
                disk.add_metric([*self.identity, dev], v)
            for iface, v in sorted(h.packet_loss_ratio.items()):
                loss.add_metric([*self.identity, iface], v)
            for iface, v in sorted(h.bandwidth_utilization_ratio.items()):
                util.add_metric([*self.identity, iface], v)
            for (dev, port, name), v in sorted(h.infiniband_counters.items()):
                ib.add_metric([*self.identity, dev, port, name], v)
        yield from (kswapd, memory, disk, loss, util, ib)


class TrainingCollector(_Base):
    GAUGES: tuple[tuple[str, str], ...] = (
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
    )

    def _families(self, snap: Snapshot | None = None) -> Iterator[Metric]:
        gauges = {name: _gauge(name, IDENTITY) for name, _ in self.GAUGES}
        nonfinite = _counter("trainguard_train_nonfinite_loss_total", IDENTITY)
        scale_updates = _counter("trainguard_train_loss_scale_updates_total", IDENTITY)
        frag = _gauge("trainguard_gpu_memory_fragmentation_ratio", (*IDENTITY, "gpu"))
        ckpt_ts = _gauge("trainguard_checkpoint_last_success_timestamp_seconds", (*IDENTITY, "kind"))
        ckpt_step = _gauge("trainguard_checkpoint_last_step", (*IDENTITY, "kind"))
        if snap is not None:
            t = snap.training
            for name, attr in self.GAUGES:
                value = getattr(t, attr)
                if value is not None:
                    gauges[name].add_metric(self.identity, float(value))
            # counters exist from the start at zero, so the first increase is visible to rate()
            nonfinite.add_metric(self.identity, t.nonfinite_total)
            scale_updates.add_metric(self.identity, t.loss_scale_updates_total)
            for gpu, v in sorted(t.fragmentation.items()):
                frag.add_metric([*self.identity, gpu], v)
            for kind, v in sorted(t.checkpoint_ts.items()):
                ckpt_ts.add_metric([*self.identity, kind], v)
            for kind, v in sorted(t.checkpoint_step.items()):
                ckpt_step.add_metric([*self.identity, kind], v)
        yield from gauges.values()
        yield from (nonfinite, scale_updates, frag, ckpt_ts, ckpt_step)


class ExporterCollector(_Base):
    """The exporter's own health: versions, collector errors, fast-path results."""

    def _families(self, snap: Snapshot | None = None) -> Iterator[Metric]:
        info = _gauge("trainguard_exporter_info", (*IDENTITY, "version", "backend", "driver_version", "nvml_version",
                                                   "cuda_version", "driver_supported"),
                      "Exporter and driver versions; driver_supported=false means GPU metrics are not collected.")  # fmt: skip
        errors = _counter("trainguard_exporter_collector_errors_total", (*IDENTITY, "collector"),
                          "Failed or timed-out polls, per collector.")  # fmt: skip
        fast = _counter("trainguard_exporter_fastpath_events_total", (*IDENTITY, "result"),
                        "Fast-path P0 events by delivery result.")  # fmt: skip
        if snap is not None:
            d = snap.driver
            info.add_metric([*self.identity, __version__, snap.backend, d.driver_version, d.nvml_version,
                             d.cuda_version, str(d.supported).lower()], 1.0)  # fmt: skip
            for name in ("gpu", "host", "training"):
                errors.add_metric([*self.identity, name], snap.errors.get(name, 0.0))
            for result, n in sorted(snap.fastpath.items()):
                fast.add_metric([*self.identity, result], float(n))
        yield from (info, errors, fast)
