"""The metric names the rules read, taken from the catalogue's contract (a name missing there fails at
import, never silently at query time), and the recording rules' names built the way the renderer builds
them (tests/diagnosis pins them to render/prometheus.py, which this room may not import)."""

from __future__ import annotations

from trainguard.catalog import FATAL_XIDS, METRICS_BY_NAME


def _m(name: str) -> str:
    return METRICS_BY_NAME[name].name


THROUGHPUT = _m("trainguard_train_tokens_per_second_per_gpu")
LOSS = _m("trainguard_train_loss")
GRAD_NORM = _m("trainguard_train_grad_norm")
NONFINITE_LOSS = _m("trainguard_train_nonfinite_loss_total")
DATA_WAIT = _m("trainguard_train_dataloader_wait_ratio")
ALLREDUCE = _m("trainguard_train_allreduce_time_ratio")
STEP = _m("trainguard_train_step")
LAST_STEP_AT = _m("trainguard_train_last_step_timestamp_seconds")
COLLECTIVE = _m("trainguard_train_collective_seconds")
COLLECTIVE_P99 = f"trainguard:{COLLECTIVE.removeprefix('trainguard_')}:p99"
"""The job's collective latency p99, recorded by the catalogue's rules from the SDK's histogram."""
OWN_EXCESS = "trainguard:train_rank_own_time:excess"
"""Per rank: its time outside collectives per step over the gang's median, minus one (0 in a window with
a pause), recorded by the catalogue's rules for StragglerRank."""
OWN_SPREAD = "trainguard:train_rank_own_time:spread"
"""Per job: the robust standard deviation of the ranks' excess (0 under four ranks), recorded with it."""

PACKET_LOSS = _m("trainguard_network_packet_loss_ratio")
ECN_MARKED = _m("trainguard_network_ecn_marked_packets_total")

GPU_UTIL = _m("DCGM_FI_DEV_GPU_UTIL")
SM_CLOCK = _m("DCGM_FI_DEV_SM_CLOCK")
THROTTLE = _m("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
FB_USED = _m("DCGM_FI_DEV_FB_USED")
FB_FREE = _m("DCGM_FI_DEV_FB_FREE")
GPU_TEMP = _m("DCGM_FI_DEV_GPU_TEMP")

KSWAPD = _m("trainguard_host_kswapd_cpu_ratio")
HOST_MEMORY = _m("trainguard_host_memory_used_ratio")
DISK_WRITE_LATENCY = _m("trainguard_host_disk_write_latency_seconds")

XID = _m("DCGM_FI_DEV_XID_ERRORS")
ECC_DBE = _m("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
ECC_SBE = _m("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL")
RETIRED_PENDING = _m("DCGM_FI_DEV_RETIRED_PENDING")
RETIRED_DBE = _m("DCGM_FI_DEV_RETIRED_DBE")
ROW_REMAP_PENDING = _m("DCGM_FI_DEV_ROW_REMAP_PENDING")
ROW_REMAP_FAILURE = _m("DCGM_FI_DEV_ROW_REMAP_FAILURE")
UNCORRECTABLE_REMAPPED_ROWS = _m("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")
GPU_LOST = _m("trainguard_gpu_lost")

FATAL_XID_CODES: frozenset[int] = frozenset(FATAL_XIDS)

THROTTLE_SLOWDOWN_BITS: dict[int, str] = {
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}
"""NVML clocks-event reasons that slow the SM clock for a reason other than idling or the application
clock setting (nvmlClocksEventReason*): the ones that mean the GPU is held back."""
