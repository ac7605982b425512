"""The catalogue matches the public contracts of docs/architecture.md: the metrics and the alerts."""

from __future__ import annotations

from pathlib import Path

from trainguard.catalog import ALERTS, ALERTS_BY_NAME, METRICS, SEVERITIES, Scope
from trainguard.catalog.markdown import alerts_markdown
from trainguard.render.prometheus import EXPRESSIONS

CONTRACT_ALERTS = {
    # name: (severity, for)
    "TrainingLossNonFinite": ("P0", "0s"),
    "TrainingJobStalled": ("P0", "0s"),
    # docs/architecture.md (1m before issue 8's loop acted on it, 30s before issue 25's 30 s for a P0)
    "GPUNodeDown": ("P0", "0s"),
    "GPUDoubleBitECCError": ("P0", "0s"),
    "GPUCriticalXid": ("P0", "0s"),
    "GPULost": ("P0", "0s"),  # added by review (issue 7): trainguard_gpu_lost was read by nothing
    "GPUOutOfMemory": ("P0", "0s"),  # issue 9: an OOM inside the trainer reached no one
    "TrainingThroughputDrop": ("P1", "5m"),
    "GPUMemoryCritical": ("P1", "10s"),
    "GPUMemoryHang": ("P1", "1m"),
    "GPUThermalThrottling": ("P1", "1m"),
    "NetworkPacketLossHigh": ("P1", "1m"),
    "GradientExplosion": ("P1", "1m"),
    "CheckpointStale": ("P1", "5m"),
    "StragglerRank": ("P1", "1m"),
    "InferenceLatencyHigh": ("P1", "2m"),
    "GPUMemoryPressure": ("P2", "2m"),
    "GPUMemoryFragmentationHigh": ("P2", "5m"),
    "TrainingThroughputDeviation": ("P2", "5m"),
    "TrainingLossOscillation": ("P2", "5m"),
    "GradientVanishing": ("P2", "5m"),
    "LossScaleUnstable": ("P2", "0s"),
    "AllReduceTimeRatioHigh": ("P2", "5m"),
    "DataLoaderSlow": ("P2", "5m"),
    "HostSwapPressure": ("P2", "2m"),
    "DiskWriteLatencyHigh": ("P2", "5m"),
    "NetworkPacketLoss": ("P2", "5m"),
    "NetworkBandwidthSaturation": ("P2", "10m"),
    "GPUSingleBitECCErrorsHigh": ("P1", "0s"),  # issue 9: over the daily threshold isolates the node
    "TrainguardExporterDown": ("P2", "2m"),  # docs/architecture.md: an unreachable sidecar alone
    "GPUMemoryHigh": ("P3", "5m"),
    # issue 9: the signals that reached no one, the memory tiers, early training, prediction
    "GPUMemorySustainedHigh": ("P1", "10m"),
    "GPUMemoryTemperatureHigh": ("P1", "1m"),
    "GPURowRemapPending": ("P1", "0s"),
    "GPURowRemapFailure": ("P1", "0s"),
    "GPURetiredPagesPending": ("P1", "0s"),
    "CheckpointStorageFillingUp": ("P1", "5m"),
    "TrainingLossDivergingEarly": ("P1", "2m"),
    "RackThermalEvent": ("P1", "2m"),
    "MonitoringDataMissing": ("P1", "10m"),
    "InferenceQueueDepthHigh": ("P1", "2m"),
    "GPUMemoryGrowthPredicted": ("P2", "10m"),
    "CollectiveLatencyHigh": ("P2", "5m"),
    "NetworkCongestion": ("P2", "5m"),
    "NVLinkCRCErrors": ("P2", "0s"),
    "CheckpointRestoreSlow": ("P2", "1m"),
    "GPUPowerCapped": ("P3", "10m"),
    # issue 25: slow, not dead (held: a thermal blip or a link retraining is not news)
    "GPUPCIeLinkDegraded": ("P1", "3m"),
    "GPUClocksThrottled": ("P1", "2m"),
    "GPUClockBelowPeers": ("P1", "5m"),
}

CONTRACT_METRICS = {
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "trainguard_train_step", "trainguard_train_last_step_timestamp_seconds", "trainguard_train_loss",
    "trainguard_train_nonfinite_loss_total", "trainguard_train_grad_norm",
    "trainguard_train_tokens_per_second_per_gpu", "trainguard_train_loss_scale",
    "trainguard_train_loss_scale_updates_total", "trainguard_train_dataloader_wait_ratio",
    "trainguard_train_allreduce_time_ratio", "trainguard_gpu_memory_fragmentation_ratio",
    "trainguard_train_step_seconds_total", "trainguard_train_step_collective_seconds_total",
    "trainguard_train_stall_seconds_total", "trainguard_checkpoint_save_seconds_total",
    "trainguard_checkpoint_last_success_timestamp_seconds", "trainguard_checkpoint_last_step",
    "trainguard_host_kswapd_cpu_ratio", "trainguard_host_memory_used_ratio",
    "trainguard_host_disk_write_latency_seconds", "trainguard_network_packet_loss_ratio",
    "trainguard_network_bandwidth_utilization_ratio", "trainguard_inference_latency_seconds",
    "trainguard_inference_queue_depth",
    # added by review (issue 7): a job's start, a lost GPU, and the exporter's own health
    "trainguard_train_start_timestamp_seconds", "trainguard_gpu_lost", "trainguard_gpu_remapped_rows",
    "trainguard_infiniband_port_counter_total", "trainguard_exporter_info", "trainguard_exporter_collector_up",
    "trainguard_exporter_collector_errors_total", "trainguard_exporter_gpus_assigned",
    "trainguard_exporter_fastpath_events_total",
    # issue 9, hardware: GPU health with dcgm-exporter's names, RoCE congestion, disk reads
    "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_RETIRED_PENDING", "DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "trainguard_network_ecn_marked_packets_total", "trainguard_network_cnp_sent_total",
    "trainguard_network_cnp_handled_total", "trainguard_host_disk_read_bytes_per_second",
    # issue 9: OOM inside the trainer, collective latency, KV cache, checkpoint storage and restore
    "trainguard_train_oom_total", "trainguard_train_collective_seconds",
    "trainguard_inference_kv_cache_hit_ratio", "trainguard_checkpoint_filesystem_avail_bytes",
    "trainguard_checkpoint_filesystem_size_bytes", "trainguard_checkpoint_last_size_bytes",
    "trainguard_checkpoint_restoring", "trainguard_checkpoint_restore_read_bytes_per_second",
    # issue 25: slow, not dead: the PCIe link against its maximum, the clock's maximum, throttle reasons
    "DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_PCIE_LINK_WIDTH", "DCGM_FI_DEV_PCIE_MAX_LINK_GEN",
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "DCGM_FI_DEV_MAX_SM_CLOCK", "trainguard_gpu_clock_throttle_reason",
}  # fmt: skip


def test_alert_table_matches_the_contract() -> None:
    assert {a.name: (a.severity, a.for_) for a in ALERTS} == CONTRACT_ALERTS


def test_metric_names_match_the_contract() -> None:
    assert {m.name for m in METRICS} == CONTRACT_METRICS


def test_counters_end_in_total() -> None:
    for m in METRICS:
        if m.name.startswith("trainguard_"):
            assert (m.type == "counter") == m.name.endswith("_total"), m.name


def test_every_alert_has_an_expression_and_valid_fields() -> None:
    for a in ALERTS:
        assert a.name in EXPRESSIONS
        assert a.severity in SEVERITIES
        assert a.summary and a.probable_cause and a.condition
        for target in a.supersedes:
            # the same scope, or a wider one that shares the job (a job or rack alert over per-GPU ones)
            assert ALERTS_BY_NAME[target].scope == a.scope or a.scope in (Scope.JOB, Scope.RACK)


def test_p0_alerts_name_their_response() -> None:
    """Each P0 names its automatic response, or says why it has none."""
    p0 = {a.name for a in ALERTS if a.severity == "P0"}
    assert p0 == {a.name for a in ALERTS if a.severity == "P0" and (a.p0_class or a.without_response)}
    # the one P1 the P0 loop acts on: SBE over the daily threshold isolates the node (issue 9)
    # the P1s the P0 loop acts on: memory that must be drained (SBE over the daily threshold, a pending row
    # remap or page retirement, a failed remap) isolates the node after a checkpoint (issue 9)
    assert {a.name for a in ALERTS if a.p0_class and a.name not in p0} == {
        "GPUSingleBitECCErrorsHigh",
        "GPURowRemapPending",
        "GPURowRemapFailure",
        "GPURetiredPagesPending",
    }
    assert not [a.name for a in ALERTS if a.p0_class and a.without_response]


def test_committed_alert_docs_match_the_catalogue() -> None:
    committed = (Path(__file__).resolve().parents[2] / "docs" / "alerts.md").read_text()
    assert committed == alerts_markdown(), "docs/alerts.md is stale: run `make docs`"
