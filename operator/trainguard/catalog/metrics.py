"""The metric contract (docs/architecture.md, "The metric contract"): names, types, units and labels.

GPU metrics keep NVIDIA dcgm-exporter's names so existing rules and dashboards keep working on
clusters that already run it; trainguard's own metrics carry the `trainguard_` prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class MetricType(StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"
    """A Prometheus histogram: `<name>_bucket` (cumulative, by `le`), `<name>_sum` and `<name>_count`."""


@dataclass(frozen=True)
class Metric:
    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()
    """Labels beyond COMMON_LABELS (and DCGM_LABELS for GPU metrics)."""
    buckets: tuple[float, ...] = ()
    """A histogram's finite upper bounds (`le`), ascending; +Inf is implied."""

    @property
    def is_gpu(self) -> bool:
        """A per-GPU series: it carries DCGM_LABELS."""
        return self.name.startswith("DCGM_FI_") or set(DCGM_LABELS) <= set(self.labels)


COMMON_LABELS: tuple[str, ...] = ("namespace", "pod", "node", "training_job")
"""Every series a sidecar exports carries these; rules select on namespace and training_job."""

DCGM_LABELS: tuple[str, ...] = ("gpu", "UUID", "modelName", "Hostname")

_G = MetricType.GAUGE
_C = MetricType.COUNTER
_H = MetricType.HISTOGRAM

COLLECTIVE_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
"""Upper bounds of trainguard_train_collective_seconds: 1 ms to 60 s, about x2.5 apart (1-2.5-5 per
decade), so a p99 read by histogram_quantile is within a factor of 2.5 wherever it lands: an
intra-node all-reduce of a few MB takes milliseconds, a large one across nodes up to seconds, and a
collective stuck behind a straggler or a flapping link tens of seconds (NCCL's own timeout is minutes)."""

METRICS: tuple[Metric, ...] = (
    # GPU, dcgm-exporter names
    Metric("DCGM_FI_DEV_GPU_UTIL", _G, "GPU utilization (in %).", DCGM_LABELS),
    Metric("DCGM_FI_DEV_FB_USED", _G, "Framebuffer memory used (in MiB).", DCGM_LABELS),
    Metric("DCGM_FI_DEV_FB_FREE", _G, "Framebuffer memory free (in MiB).", DCGM_LABELS),
    Metric("DCGM_FI_DEV_MEM_COPY_UTIL", _G, "Memory utilization (in %).", DCGM_LABELS),
    Metric("DCGM_FI_DEV_GPU_TEMP", _G, "GPU temperature (in C).", DCGM_LABELS),
    Metric("DCGM_FI_DEV_POWER_USAGE", _G, "Power draw (in W).", DCGM_LABELS),
    Metric("DCGM_FI_DEV_SM_CLOCK", _G, "SM clock frequency (in MHz).", DCGM_LABELS),
    Metric(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", _G, "Current clock throttle reasons (bitmask).", DCGM_LABELS
    ),
    Metric("DCGM_FI_DEV_XID_ERRORS", _G, "Value of the last XID error encountered.", DCGM_LABELS),
    Metric(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", _C, "Total number of single-bit volatile ECC errors.", DCGM_LABELS
    ),
    Metric(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", _C, "Total number of double-bit volatile ECC errors.", DCGM_LABELS
    ),
    Metric("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", _C, "Total number of PCIe retries.", DCGM_LABELS),
    Metric(
        "trainguard_gpu_lost",
        _G,
        "1 when NVML reports the GPU as lost (fallen off the bus), else 0.",
        DCGM_LABELS,
    ),
    Metric(
        "trainguard_gpu_remapped_rows",
        _G,
        "Rows remapped after memory errors (correctable and not).",
        DCGM_LABELS,
    ),
    # GPU health (issue 9), dcgm-exporter names and units; absent where the GPU does not support them
    Metric("DCGM_FI_DEV_MEMORY_TEMP", _G, "Memory (HBM) temperature (in C).", DCGM_LABELS),
    Metric("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", _G, "Power limit the driver enforces (in W).", DCGM_LABELS),
    Metric(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        _G,
        "PCIe transmit throughput (in bytes per second): a 20 ms sample, taken anew every 10 s.",
        DCGM_LABELS,
    ),
    Metric(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        _G,
        "PCIe receive throughput (in bytes per second): a 20 ms sample, taken anew every 10 s.",
        DCGM_LABELS,
    ),
    Metric(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        _G,
        "NVLink transmit data throughput over all active links (in bytes per second); absent without NVLink.",
        DCGM_LABELS,
    ),
    Metric(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        _G,
        "NVLink receive data throughput over all active links (in bytes per second); absent without NVLink.",
        DCGM_LABELS,
    ),
    Metric(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        _C,
        "NVLink flow-control CRC errors, summed over the active links.",
        DCGM_LABELS,
    ),
    Metric(
        "DCGM_FI_DEV_RETIRED_SBE",
        _C,
        "Pages retired for multiple single-bit errors (pre-Ampere; Ampere and newer remap rows).",
        DCGM_LABELS,
    ),
    Metric(
        "DCGM_FI_DEV_RETIRED_DBE",
        _C,
        "Pages retired for a double-bit error (pre-Ampere; Ampere and newer remap rows).",
        DCGM_LABELS,
    ),
    Metric(
        "DCGM_FI_DEV_RETIRED_PENDING",
        _G,
        "1 when a page waits to be retired at the next GPU reset, else 0 (pre-Ampere).",
        DCGM_LABELS,
    ),
    Metric(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        _G,
        "1 when a row remap waits for the next GPU reset, else 0 (Ampere and newer).",
        DCGM_LABELS,
    ),
    Metric(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        _G,
        "1 when a row could not be remapped (no spare rows left): drain the GPU, else 0.",
        DCGM_LABELS,
    ),
    Metric("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", _C, "Rows remapped for correctable errors.", DCGM_LABELS),
    Metric(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", _C, "Rows remapped for uncorrectable errors.", DCGM_LABELS
    ),
    # slow, not dead (issue 25): links trained down, clocks held low; dcgm-exporter names where it has them
    Metric("DCGM_FI_DEV_PCIE_LINK_GEN", _G, "PCIe current link generation.", DCGM_LABELS),
    Metric("DCGM_FI_DEV_PCIE_LINK_WIDTH", _G, "PCIe current link width (lanes).", DCGM_LABELS),
    Metric(
        "DCGM_FI_DEV_PCIE_MAX_LINK_GEN",
        _G,
        "PCIe max link generation the GPU and its slot support together (a Gen5 GPU in a Gen4 slot: 4).",
        DCGM_LABELS,
    ),
    Metric("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", _G, "PCIe max link width (lanes).", DCGM_LABELS),
    Metric("DCGM_FI_DEV_MAX_SM_CLOCK", _G, "Maximum SM clock frequency (in MHz).", DCGM_LABELS),
    Metric(
        "trainguard_gpu_clock_throttle_reason",
        _G,
        "1 while NVML reports this clock-throttle reason, else 0: one series per named reason of "
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (gpu_idle 0x1, applications_clocks 0x2, sw_power_cap 0x4, "
        "hw_slowdown 0x8, sync_boost 0x10, sw_thermal 0x20, hw_thermal 0x40, hw_power_brake 0x80, "
        "display_clock 0x100).",
        (*DCGM_LABELS, "reason"),
    ),
    # training
    Metric(
        "trainguard_train_start_timestamp_seconds",
        _G,
        "Unix time the training process started, from the SDK's hello (the earliest started_at); absent "
        "until a trainer says hello: the reference for a step or checkpoint that has not happened yet.",
    ),
    Metric("trainguard_train_step", _G, "Last completed global step."),
    Metric("trainguard_train_last_step_timestamp_seconds", _G, "Unix time at which that step completed."),
    Metric("trainguard_train_loss", _G, "Last finite training loss."),
    Metric("trainguard_train_nonfinite_loss_total", _C, "Steps whose loss was NaN or Inf."),
    Metric("trainguard_train_grad_norm", _G, "Last gradient norm."),
    Metric(
        "trainguard_train_tokens_per_second_per_gpu", _G, "Training throughput in tokens per second per GPU."
    ),
    Metric("trainguard_train_loss_scale", _G, "Mixed-precision loss scale."),
    Metric("trainguard_train_loss_scale_updates_total", _C, "Loss-scale changes."),
    Metric("trainguard_train_dataloader_wait_ratio", _G, "Share of step time spent waiting for data."),
    Metric("trainguard_train_allreduce_time_ratio", _G, "Share of step time spent in collectives."),
    Metric(
        "trainguard_train_step_seconds_total",
        _C,
        "Seconds of the steps the trainer reported (log_step's step_time_s, else the time between step "
        "reports), summed over its processes; 0 from the start.",
    ),
    Metric(
        "trainguard_train_step_collective_seconds_total",
        _C,
        "Seconds of those steps spent in collectives (log_step's allreduce_s), summed: peers wait there for a "
        "straggler, so a rank's share of step time outside them is its own pace (StragglerRank); 0 from the start.",
    ),
    Metric(
        "trainguard_train_stall_seconds_total",
        _C,
        "Seconds the trainer made no step beyond its typical gap between steps (the median of the last 16), "
        "once a gap passes 5 times that (30 s at least): a stall, seen before and without any alert. Checkpoint "
        "writes it reported are left out, and so is the time before its first steps and after a restore or a "
        "restart (the operator's records count those); counted while the gap is open; 0 from the start.",
    ),
    Metric(
        "trainguard_train_oom_total",
        _C,
        "CUDA out-of-memory errors inside the trainer, reported by the SDK (its framework integrations or "
        "Reporter.report_oom); 0 from the start.",
    ),
    Metric(
        "trainguard_train_collective_seconds",
        _H,
        "Latency of collectives (all-reduce by default) timed by the SDK around the call, per op; "
        "buckets 1ms to 60s.",
        ("op",),
        COLLECTIVE_BUCKETS,
    ),
    Metric(
        "trainguard_gpu_memory_fragmentation_ratio",
        _G,
        "(reserved - allocated) / reserved of the framework allocator.",
        ("gpu",),
    ),
    # the job
    Metric(
        "trainguard_checkpoint_last_success_timestamp_seconds",
        _G,
        "Unix time of the last successful checkpoint.",
        ("kind",),
    ),
    Metric("trainguard_checkpoint_last_step", _G, "Step of the last successful checkpoint.", ("kind",)),
    Metric(
        "trainguard_checkpoint_last_size_bytes",
        _G,
        "Bytes of the last successful checkpoint of that kind (files under its path, measured by the SDK).",
        ("kind",),
    ),
    Metric(
        "trainguard_checkpoint_save_seconds_total",
        _C,
        "Wall-clock seconds the trainer was blocked writing checkpoints (checkpoint_saved(seconds=...) or "
        "Reporter.saving()), failed saves too; saves of the pod's processes that overlap count once; 0 from "
        "the start.",
    ),
    Metric(
        "trainguard_checkpoint_filesystem_avail_bytes",
        _G,
        "Bytes available to the trainer on the filesystem of the last checkpoint written (statvfs by the SDK).",
    ),
    Metric(
        "trainguard_checkpoint_filesystem_size_bytes",
        _G,
        "Size in bytes of the filesystem of the last checkpoint written (statvfs by the SDK).",
    ),
    Metric(
        "trainguard_checkpoint_restoring",
        _G,
        "1 while the trainer is loading a checkpoint (Reporter.restore), else 0.",
    ),
    Metric(
        "trainguard_checkpoint_restore_read_bytes_per_second",
        _G,
        "Read throughput of the ongoing or last checkpoint restore, in bytes per second (measured by the SDK).",
    ),
    # host
    Metric("trainguard_host_kswapd_cpu_ratio", _G, "kswapd CPU time as a share of one core."),
    Metric("trainguard_host_memory_used_ratio", _G, "Share of host memory in use."),
    Metric("trainguard_host_disk_write_latency_seconds", _G, "Mean write latency per device.", ("device",)),
    Metric(
        "trainguard_host_disk_read_bytes_per_second",
        _G,
        "Read throughput per whole disk, from /proc/diskstats between two polls.",
        ("device",),
    ),
    Metric(
        "trainguard_network_packet_loss_ratio", _G, "Share of packets dropped or in error.", ("interface",)
    ),
    Metric(
        "trainguard_network_bandwidth_utilization_ratio",
        _G,
        "Link utilisation as a share of its speed.",
        ("interface",),
    ),
    Metric(
        "trainguard_infiniband_port_counter_total",
        _C,
        "Raw InfiniBand port counters from /sys/class/infiniband.",
        ("device", "port", "counter"),
    ),
    Metric(
        "trainguard_network_ecn_marked_packets_total",
        _C,
        "RoCE packets that arrived ECN-marked (congestion on the path), per RDMA port (np_ecn_marked_roce_packets).",
        ("device", "port"),
    ),
    Metric(
        "trainguard_network_cnp_sent_total",
        _C,
        "Congestion notification packets this RoCE port sent back to senders (np_cnp_sent).",
        ("device", "port"),
    ),
    Metric(
        "trainguard_network_cnp_handled_total",
        _C,
        "Congestion notification packets this RoCE port received and slowed down for (rp_cnp_handled).",
        ("device", "port"),
    ),
    # inference mode
    Metric("trainguard_inference_latency_seconds", _G, "Mean request latency."),
    Metric("trainguard_inference_queue_depth", _G, "Pending requests."),
    Metric("trainguard_inference_kv_cache_hit_ratio", _G, "Share of KV-cache lookups that hit."),
    # the exporter itself
    Metric(
        "trainguard_exporter_info",
        _G,
        "Exporter and driver versions; driver_supported=false means GPU metrics are not collected. trace_id "
        "is the run's id (the Job's), which a monitor's own group's alerts carry as an annotation "
        "(`trainguard report` looks it up for the shared group's).",
        (
            "version",
            "backend",
            "driver_version",
            "nvml_version",
            "cuda_version",
            "driver_supported",
            "trace_id",
        ),
    ),
    Metric(
        "trainguard_exporter_collector_up",
        _G,
        "1 when a collector (gpu, host, training) delivers its metrics, else 0 with the reason in error; "
        "collector kswapd is 1 when the host's kswapd (the swap signal) is visible, else 0 with why.",
        ("collector", "error"),
    ),
    Metric(
        "trainguard_exporter_collector_errors_total",
        _C,
        "Failed or timed-out polls, per collector.",
        ("collector",),
    ),
    Metric(
        "trainguard_exporter_gpus_assigned",
        _G,
        "GPUs of this pod whose series are exported, and how they were learnt (source=unknown: none yet).",
        ("source",),
    ),
    Metric(
        "trainguard_exporter_fastpath_events_total",
        _C,
        "Fast-path P0 events by delivery result.",
        ("result",),
    ),
)
"""Every family the exporter sidecar emits (a test scrapes it and compares), with its help text."""

METRICS_BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}

THROTTLE_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clock": 0x100,
}
"""NVML's clock-throttle reasons (nvmlClocksThrottleReason*), by the `reason` label of
trainguard_gpu_clock_throttle_reason, with their bit in DCGM_FI_DEV_CLOCK_THROTTLE_REASONS."""
SLOWING_THROTTLE_REASONS: tuple[str, ...] = ("hw_slowdown", "hw_power_brake", "hw_thermal", "sw_thermal")
"""The reasons that slow a busy GPU below what its load asks for (GPUClocksThrottled): not idle, not the
power cap a heavy load reaches by design, not clocks a person set. hw_thermal and hw_power_brake are causes
of hw_slowdown, which NVML sets with them: hw_slowdown alone means a cause NVML does not name."""

GOODPUT_METRICS: tuple[Metric, ...] = (
    Metric(
        "trainguard_job_lost_seconds_total",
        _C,
        "Training time lost per job by cause, from its remediation records: restart (a remediation that stops "
        "training, from the alert to its last step), maintenance (the same for a planned move off a node a person "
        "cordoned, drained or annotated) and redone_work (the work since the checkpoint a restart resumed from, "
        "done again); an instant lost to several counts once, in that order. Counted a minute behind.",
        ("cause",),
    ),
    Metric(
        "trainguard_job_productive_seconds_total",
        _C,
        "Time since the monitor's creation not lost to a cause the records tell (a stall before its alert, "
        "checkpoint writes and slow ranks are counted by the sidecars instead: trainguard:job_lost:ratio). "
        "Counted a minute behind.",
    ),
    Metric(
        "trainguard_job_ettr_ratio",
        _G,
        "Effective training time ratio over the last 24 hours (or since the monitor's creation): productive "
        "over wall time, from the records' causes (trainguard:job_ettr:ratio adds the sidecars', over an hour).",
    ),
    Metric(
        "trainguard_job_restarts_redo_unknown",
        _G,
        "Restarts among the records kept whose redone work is not counted (no checkpoint named, as in a "
        "restart in place): the time lost is a lower bound while this is above 0.",
    ),
)
"""The operator's goodput families (controller/metrics.py, GoodputCollector; docs/diagnosis.md,
"Goodput"), exported by the leader with the labels namespace and training_job (not COMMON_LABELS: they
are per job, not per pod) and those in `labels`."""

GOODPUT_METRICS_BY_NAME: dict[str, Metric] = {m.name: m for m in GOODPUT_METRICS}

MONITOR_NAMESPACE_LABEL = "monitor_namespace"
"""The monitor's namespace on the series below: the scrape of the operator sets `namespace` to its own."""
MONITOR_ALERT_THRESHOLD = "trainguard_monitor_alert_threshold"
MONITOR_ALERT_ENABLED = "trainguard_monitor_alert_enabled"
MONITOR_SETTING = "trainguard_monitor_setting"
MONITOR_SETTINGS_PUBLISHED = "trainguard_monitor_settings_published"

RULE_SETTINGS_METRICS: tuple[Metric, ...] = (
    Metric(
        MONITOR_ALERT_THRESHOLD,
        _G,
        "A param of a monitor's enabled alert, after its mode and AlertPolicies, where it differs from the "
        "catalogue's default (which the shared rules use without it).",
        (MONITOR_NAMESPACE_LABEL, "training_job", "alertname", "param"),
    ),
    Metric(
        MONITOR_ALERT_ENABLED,
        _G,
        "0: the monitor's mode or an AlertPolicy turns the alert off (an alert without the series is on).",
        (MONITOR_NAMESPACE_LABEL, "training_job", "alertname"),
    ),
    Metric(
        MONITOR_SETTING,
        _G,
        "A number of the monitor's spec the shared rules read (sigma, min_stddev_ratio, warmup_steps, "
        "checkpoint_timeout_seconds, checkpoint_full_every_steps, inference) where it differs from a default "
        "monitor's; own_group, for every monitor: 1 when its rules are a group of its own, else 0.",
        (MONITOR_NAMESPACE_LABEL, "training_job", "setting"),
    ),
    Metric(
        MONITOR_SETTINGS_PUBLISHED,
        _G,
        "Monitors the operator publishes settings for; present while it publishes (the shared rules keep "
        "the last values while it is absent).",
    ),
)
"""What the operator serves for the shared rule group (render/shared.py, controller/rule_settings.py),
with --rule-form shared; not the sidecar's (METRICS)."""
