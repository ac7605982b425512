"""Must-fire and must-not-fire cases for every catalogue alert, as promtool unit-test data (and
`only_alert`, the part of the rule file a case needs).

Written by hand from docs/architecture.md's alert catalogue, not derived from the renderer, so that a wrong
expression or threshold in the rules fails here. Series use promtool's expanding notation at a one
minute interval; label sets are those the exporter sidecar produces.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainguard.catalog.severity import GRADE, grade_labels

SCRAPE = "15s"
"""The test monitor's scrape interval (tests/conftest.py), so the interval of real samples."""

JOB = {"namespace": "ml", "training_job": "llama-pretrain"}
POD = JOB | {"pod": "llama-0", "node": "gpu-node-1"}
GPU = POD | {"gpu": "0", "UUID": "GPU-0000", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "gpu-node-1"}
NIC = POD | {"interface": "ib0"}
DISK = POD | {"device": "nvme0n1"}
PORT = POD | {"device": "mlx5_0", "port": "1"}
OTHER_JOB_GPU = GPU | {"training_job": "other-job", "pod": "other-0"}
LOST = POD | {"gpu": "0", "UUID": "GPU-0000"}
"""trainguard_gpu_lost carries no modelName or Hostname: a lost GPU no longer says what it is."""


def series(metric: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{inner}}}", "values": values}


@dataclass
class Case:
    why: str
    at: str
    input: list[dict[str, str]]
    fires: list[dict[str, str]] = field(default_factory=list)
    """Expected label sets of the alert at `at` (alertname aside); empty means it must not fire."""
    monitor: dict[str, Any] = field(default_factory=dict)
    """Changes to the test monitor, as dotted paths (see tests/conftest.py)."""
    interval: str = "1m"
    """The series' sample interval. A rule over the monitor's rate window (4 scrapes, at least 1m) needs
    samples at its scrape interval, SCRAPE: since Prometheus 3 a range leaves out the sample at its
    start, so a 1m range over 1m samples holds one and `increase` has nothing to say."""


def mem(used: float, free: float, labels: dict[str, str] = GPU, n: int = 20) -> list[dict[str, str]]:
    return [
        series("DCGM_FI_DEV_FB_USED", labels, f"{used}x{n}"),
        series("DCGM_FI_DEV_FB_FREE", labels, f"{free}x{n}"),
    ]


def steps(start: int, n: int = 120) -> dict[str, str]:
    """A step counter that advances 60 steps a minute from `start`."""
    return series("trainguard_train_step", POD, f"{start}+60x{n}")


def p(sev: str, labels: dict[str, str], style: str = GRADE) -> dict[str, str]:
    """The labels an alert of grade `sev` fires with, its severity in `style`."""
    return labels | grade_labels(sev, style)


def gpu_n(i: int) -> dict[str, str]:
    """GPU `i` of the job's pod (the test job's GPUs share one pod, as on one 8-GPU node)."""
    return GPU | {"gpu": str(i), "UUID": f"GPU-000{i}"}


def link(
    gen: int, width: int, util: float, *, max_gen: int = 5, labels: dict[str, str] = GPU, n: int = 40
) -> list[dict[str, str]]:
    """A GPU's PCIe link (against a Gen`max_gen` x16 maximum) and its utilization, held for n scrapes."""
    return [
        series("DCGM_FI_DEV_PCIE_LINK_GEN", labels, f"{gen}x{n}"),
        series("DCGM_FI_DEV_PCIE_LINK_WIDTH", labels, f"{width}x{n}"),
        series("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", labels, f"{max_gen}x{n}"),
        series("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", labels, f"16x{n}"),
        series("DCGM_FI_DEV_GPU_UTIL", labels, f"{util}x{n}"),
    ]


def throttle(values: str, util: str = "95x40", labels: dict[str, str] = GPU) -> list[dict[str, str]]:
    return [
        series("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", labels, values),
        series("DCGM_FI_DEV_GPU_UTIL", labels, util),
    ]


def clocks(mhz: list[str], util: list[str] | None = None) -> list[dict[str, str]]:
    """SM clocks of GPUs 0..n-1 of the job (promtool values each), busy unless `util` says otherwise."""
    util = util or ["95x40"] * len(mhz)
    out = []
    for i, (c, u) in enumerate(zip(mhz, util, strict=True)):
        out += [series("DCGM_FI_DEV_SM_CLOCK", gpu_n(i), c), series("DCGM_FI_DEV_GPU_UTIL", gpu_n(i), u)]
    return out


def rank_pod(i: int) -> dict[str, str]:
    return JOB | {"pod": f"llama-{i}", "node": f"gpu-node-{i}"}


def straggler_fires(*ranks: int) -> list[dict[str, str]]:
    return [p("P1", rank_pod(i) | {"rank": str(i)}) for i in ranks]


def gang(
    n: int,
    minutes: int,
    own: Callable[[int, int], float] = lambda i, k: 0.8,
    *,
    comm: float = 0.2,
    pause: Callable[[int], set[int] | None] = lambda k: None,
    start_step: int = 2000,
    timed_only: bool = False,
) -> list[dict[str, str]]:
    """The series of a synchronous gang of `n` ranks at the scrape interval (15 s samples, so `interval`
    SCRAPE): rank i computes own(i, k) seconds per step in sample k, then every rank meets in the
    collective, which ends `comm` seconds after the slowest arrives (the others wait there for it).
    pause(k): no step completes in sample k; the ranks it names are busy (writing a checkpoint, stuck on
    a data loader) and the others wait in a collective, all of it counted in the step that ends it.
    timed_only: the trainer reports no allreduce_s, only the SDK's collective histogram."""
    samples = minutes * 4 + 1
    step_s, coll, step = [0.0] * n, [0.0] * n, float(start_step)
    pending, busy = 0.0, set[int]()
    out: dict[int, tuple[list[str], list[str], list[str]]] = {i: ([], [], []) for i in range(n)}
    for k in range(samples):
        paused = pause(k) if k else None
        if paused is not None:
            pending, busy = pending + 15.0, busy | paused
        elif k:
            owns = [own(i, k) for i in range(n)]
            t = max(owns) + comm
            for i in range(n):
                step_s[i] += 15.0 + pending
                coll[i] += 15.0 / t * (t - owns[i]) + (0.0 if i in busy else pending)
            step += 15.0 / t
            pending, busy = 0.0, set()
        for i in range(n):
            out[i][0].append(f"{step_s[i]:.4f}")
            out[i][1].append(f"{coll[i]:.4f}")
            out[i][2].append(str(int(step)))
    result = []
    for i, (s_, c_, st) in out.items():
        labels = rank_pod(i)
        result.append(series("trainguard_train_step_seconds_total", labels, " ".join(s_)))
        if timed_only:
            result.append(
                series("trainguard_train_step_collective_seconds_total", labels, f"0x{samples - 1}")
            )
            result.append(
                series("trainguard_train_collective_seconds_sum", labels | {"op": "all_reduce"}, " ".join(c_))
            )
        else:
            result.append(series("trainguard_train_step_collective_seconds_total", labels, " ".join(c_)))
        result.append(series("trainguard_train_step", labels, " ".join(st)))
    return result


def jitter(i: int, k: int) -> float:
    """A deterministic +-2% wobble of one rank's pace, different per rank and sample."""
    return 1.0 + 0.02 * (((i * 7919 + k * 104729) % 201) / 100.0 - 1.0)


def slow(rank: int, by: float, since: int = 0, until: int = 10**9) -> Callable[[int, int], float]:
    """0.8 s of compute per step, jittered, and `rank` `by` slower from minute `since` to `until`."""
    return lambda i, k: 0.8 * jitter(i, k) * (1 + by if i == rank and since * 4 <= k < until * 4 else 1.0)


CASES: dict[str, list[Case]] = {
    "TrainingLossNonFinite": [
        Case(
            "counter went up by one",
            "3m",
            [series("trainguard_train_nonfinite_loss_total", POD, "0x11 1x12")],
            [p("P0", POD)],
            interval=SCRAPE,
        ),
        Case(
            "and still 30 s later: the step is in the 1m range for three evaluations (four before Prometheus 3)",
            "3m30s",
            [series("trainguard_train_nonfinite_loss_total", POD, "0x11 1x12")],
            [p("P0", POD)],
            interval=SCRAPE,
        ),
        Case(
            "but not once the range has passed it",
            "4m",
            [series("trainguard_train_nonfinite_loss_total", POD, "0x11 1x12")],
            interval=SCRAPE,
        ),
        Case(
            "counter stays at zero",
            "5m",
            [series("trainguard_train_nonfinite_loss_total", POD, "0x40")],
            interval=SCRAPE,
        ),
        Case(
            "an old increase is not repeated",
            "8m",
            [series("trainguard_train_nonfinite_loss_total", POD, "0x3 1x40")],
            interval=SCRAPE,
        ),
    ],
    "GPUOutOfMemory": [
        Case(
            "one OOM reported",
            "3m",
            [series("trainguard_train_oom_total", POD, "0x11 1x12")],
            [p("P0", POD)],
            interval=SCRAPE,
        ),
        Case("no OOM", "5m", [series("trainguard_train_oom_total", POD, "0x40")], interval=SCRAPE),
        Case(
            "an OOM long ago is not repeated",
            "8m",
            [series("trainguard_train_oom_total", POD, "0x3 1x40")],
            interval=SCRAPE,
        ),
    ],
    "TrainingJobStalled": [
        Case(
            "last step 6 minutes ago",
            "11m",
            [series("trainguard_train_last_step_timestamp_seconds", POD, "0+60x5 300x10")],
            [p("P0", JOB)],
        ),
        Case(
            "last step exactly 5 minutes ago (boundary)",
            "10m",
            [series("trainguard_train_last_step_timestamp_seconds", POD, "0+60x5 300x10")],
        ),
        Case(
            "steps keep coming",
            "11m",
            [series("trainguard_train_last_step_timestamp_seconds", POD, "0+60x15")],
        ),
        Case(
            "stall threshold follows a longer checkpoint timeout",
            "11m",
            [series("trainguard_train_last_step_timestamp_seconds", POD, "0+60x5 300x10")],
            monitor={"spec.checkpoint.timeout": "10m"},
        ),
        Case(
            "hung before its first step: started 6 minutes ago, no step series at all",
            "6m",
            [series("trainguard_train_start_timestamp_seconds", POD, "0x10")],
            [p("P0", JOB)],
        ),
        Case(
            "started 4 minutes ago and still loading: no step yet, not a stall yet",
            "4m",
            [series("trainguard_train_start_timestamp_seconds", POD, "0x10")],
        ),
        Case(
            "a step after the start counts, not the start",
            "8m",
            [
                series("trainguard_train_start_timestamp_seconds", POD, "0x10"),
                series("trainguard_train_last_step_timestamp_seconds", POD, "_x3 180x7"),
            ],
        ),
    ],
    "GPUNodeDown": [
        Case(
            "an exporter unreachable for 3 minutes is not a node down (the operator would cordon it)",
            "5m",
            [series("up", POD, "1 1 0 0 0 0 0")],
        ),
        Case(
            "Node NotReady",
            "5m",
            [
                series("up", POD, "1x10"),
                series(
                    "kube_node_status_condition",
                    {"node": "gpu-node-1", "condition": "Ready", "status": "true"},
                    "1 1 0 0 0 0 0",
                ),
            ],
            [p("P0", JOB | {"node": "gpu-node-1"})],
        ),
        Case(
            "Node NotReady fires at the first evaluation that sees it: a P0 within 30 s",
            "2m",
            [
                series("up", POD, "1x10"),
                series(
                    "kube_node_status_condition",
                    {"node": "gpu-node-1", "condition": "Ready", "status": "true"},
                    "1 1 0 0 0 0 0",
                ),
            ],
            [p("P0", JOB | {"node": "gpu-node-1"})],
        ),
        Case("one failed scrape is not a node down", "3m", [series("up", POD, "1 1 0 1 1 1")]),
        Case(
            "another node NotReady",
            "5m",
            [
                series("up", POD, "1x10"),
                series(
                    "kube_node_status_condition",
                    {"node": "cpu-node-7", "condition": "Ready", "status": "true"},
                    "0x10",
                ),
            ],
        ),
    ],
    "TrainguardExporterDown": [
        Case(
            "exporter unreachable for 3 minutes", "5m", [series("up", POD, "1 1 0 0 0 0 0")], [p("P2", POD)]
        ),
        Case("unreachable for 1 minute only", "3m", [series("up", POD, "1 1 0 1 1 1")]),
        Case("another job's exporter", "5m", [series("up", POD | {"training_job": "other-job"}, "0x6")]),
    ],
    "GPUDoubleBitECCError": [
        Case(
            "DBE counter increased",
            "3m",
            [series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU, "0x11 2x12")],
            [p("P0", GPU)],
            interval=SCRAPE,
        ),
        Case(
            "old DBE errors that do not grow",
            "5m",
            [series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU, "5x40")],
            interval=SCRAPE,
        ),
    ],
    "GPUCriticalXid": [
        Case(
            "XID 79: fallen off the bus",
            "2m",
            [series("DCGM_FI_DEV_XID_ERRORS", GPU, "0 79 79 79")],
            [p("P0", GPU)],
        ),
        Case(
            "XID 48: double-bit ECC",
            "2m",
            [series("DCGM_FI_DEV_XID_ERRORS", GPU, "0 48 48 48")],
            [p("P0", GPU)],
        ),
        Case(
            "XID 13: an application error, not fatal",
            "2m",
            [series("DCGM_FI_DEV_XID_ERRORS", GPU, "0 13 13 13")],
        ),
        Case(
            "XID 43: GPU stopped processing (application), not fatal",
            "2m",
            [series("DCGM_FI_DEV_XID_ERRORS", GPU, "43x5")],
        ),
        Case("no XID", "2m", [series("DCGM_FI_DEV_XID_ERRORS", GPU, "0x5")]),
    ],
    "GPULost": [
        Case(
            "NVML reports GPU 0 lost (XID 79)",
            "2m",
            [series("trainguard_gpu_lost", LOST, "_ 1 1 1")],
            [p("P0", LOST)],
        ),
        Case("every GPU answers: the series is absent", "2m", [series("DCGM_FI_DEV_GPU_TEMP", GPU, "60x5")]),
        Case(
            "another job's GPU is lost",
            "2m",
            [series("trainguard_gpu_lost", LOST | {"training_job": "other-job", "pod": "other-0"}, "1x5")],
        ),
    ],
    "TrainingThroughputDrop": [
        Case(
            "40% below baseline for 10 minutes after warm-up",
            "90m",
            [series("trainguard_train_tokens_per_second_per_gpu", POD, "1000x80 600x20"), steps(2000)],
            [p("P1", JOB)],
        ),
        Case(
            "exactly 30% below (boundary)",
            "90m",
            [series("trainguard_train_tokens_per_second_per_gpu", POD, "1000x80 700x20"), steps(2000)],
        ),
        Case(
            "40% below but still in warm-up",
            "90m",
            [
                series("trainguard_train_tokens_per_second_per_gpu", POD, "1000x80 600x20"),
                series("trainguard_train_step", POD, "0+10x100"),
            ],
        ),
        Case(
            "drop of only 3 minutes",
            "83m",
            [series("trainguard_train_tokens_per_second_per_gpu", POD, "1000x80 600x20"), steps(2000)],
        ),
        Case(
            "40% below a noisy baseline: 3 sigma (600) is wider than the 30% floor (300)",
            "90m",
            [
                series("trainguard_train_tokens_per_second_per_gpu", POD, "800 1200 " * 40 + "600x20"),
                steps(2000),
            ],
        ),
        Case(
            "the same noisy baseline, and throughput falls past 3 sigma (70% below)",
            "90m",
            [
                series("trainguard_train_tokens_per_second_per_gpu", POD, "800 1200 " * 40 + "300x20"),
                steps(2000),
            ],
            [p("P1", JOB)],
        ),
    ],
    "GPUMemoryCritical": [
        Case("exactly 95% used (boundary, >=)", "2m", mem(95, 5), [p("P1", GPU)]),
        Case("94% used", "2m", mem(94, 6)),
        Case("another job's GPU is full", "2m", mem(99, 1, OTHER_JOB_GPU)),
    ],
    "GPUMemoryHang": [
        Case(
            "91% used at 10% utilisation",
            "5m",
            [*mem(91, 9), series("DCGM_FI_DEV_GPU_UTIL", GPU, "10x20")],
            [p("P1", GPU)],
        ),
        Case("91% used but busy", "5m", [*mem(91, 9), series("DCGM_FI_DEV_GPU_UTIL", GPU, "95x20")]),
        Case(
            "exactly 90% used (boundary)", "5m", [*mem(90, 10), series("DCGM_FI_DEV_GPU_UTIL", GPU, "10x20")]
        ),
    ],
    "GPUThermalThrottling": [
        Case("86 C for 5 minutes", "5m", [series("DCGM_FI_DEV_GPU_TEMP", GPU, "86x10")], [p("P1", GPU)]),
        Case("85 C (boundary)", "5m", [series("DCGM_FI_DEV_GPU_TEMP", GPU, "85x10")]),
        Case("a 30-second spike", "3m", [series("DCGM_FI_DEV_GPU_TEMP", GPU, "70 70 90 70 70")]),
    ],
    "NetworkPacketLossHigh": [
        Case(
            "0.2% loss",
            "5m",
            [series("trainguard_network_packet_loss_ratio", NIC, "0.002x10")],
            [p("P1", NIC)],
        ),
        Case("0.1% loss (boundary)", "5m", [series("trainguard_network_packet_loss_ratio", NIC, "0.001x10")]),
    ],
    "GradientExplosion": [
        Case(
            "grad norm 10x a flat baseline",
            "85m",
            [series("trainguard_train_grad_norm", POD, "1x80 10x20"), steps(2000)],
            [p("P1", JOB)],
        ),
        Case(
            "grad norm within the deviation floor",
            "85m",
            [series("trainguard_train_grad_norm", POD, "1x80 1.1x20"), steps(2000)],
        ),
        Case(
            "explosion during warm-up",
            "85m",
            [
                series("trainguard_train_grad_norm", POD, "1x80 10x20"),
                series("trainguard_train_step", POD, "0+5x100"),
            ],
        ),
    ],
    "StragglerRank": [
        Case(
            "rank 3 of 8 is 10% slower",
            "10m",
            gang(8, 15, slow(3, 0.10)),
            straggler_fires(3),
            interval=SCRAPE,
        ),
        Case(
            "rank 1 of 2 is 10% slower",
            "10m",
            gang(2, 15, slow(1, 0.10)),
            straggler_fires(1),
            interval=SCRAPE,
        ),
        Case(
            "rank 2 of 3 is 20% slower",
            "10m",
            gang(3, 15, slow(2, 0.20)),
            straggler_fires(2),
            interval=SCRAPE,
        ),
        Case(
            "a trainer that reports no allreduce_s: the SDK's collective histogram instead",
            "10m",
            gang(4, 15, slow(0, 0.10), timed_only=True),
            straggler_fires(0),
            interval=SCRAPE,
        ),
        Case(
            "a gang whose steps pause for a checkpoint every 4 minutes still names its straggler",
            "14m",
            gang(4, 15, slow(2, 0.10), pause=lambda k: set(range(4)) if k % 16 < 3 else None),
            straggler_fires(2),
            interval=SCRAPE,
        ),
        Case("ranks at the same pace", "14m", gang(8, 15, slow(0, 0.0)), interval=SCRAPE),
        Case("4% slower: under the threshold", "14m", gang(8, 15, slow(5, 0.04)), interval=SCRAPE),
        Case(
            "uneven ranks, 0 to 14% apart, no single outlier: the slowest is 6.5% over the median, within "
            "the gang's own spread",
            "14m",
            gang(8, 15, lambda i, k: 0.8 * jitter(i, k) * (1 + 0.02 * i)),
            interval=SCRAPE,
        ),
        Case(
            "but one rank 12% over ranks that differ by 1% is an outlier",
            "14m",
            gang(8, 15, lambda i, k: 0.8 * jitter(i, k) * (1 + 0.01 * (i % 2)) * (1.12 if i == 6 else 1.0)),
            straggler_fires(6),
            interval=SCRAPE,
        ),
        Case(
            "not yet held: slow since minute 7", "10m", gang(8, 15, slow(5, 0.20, since=7)), interval=SCRAPE
        ),
        Case(
            "the whole gang 20% slower from minute 3",
            "14m",
            gang(8, 15, lambda i, k: 0.8 * jitter(i, k) * (1.2 if k >= 12 else 1.0)),
            interval=SCRAPE,
        ),
        Case(
            "a gang of two slowed together",
            "14m",
            gang(2, 15, lambda i, k: 0.8 * jitter(i, k) * (1.2 if k >= 12 else 1.0)),
            interval=SCRAPE,
        ),
        Case(
            "rank 0 writes the checkpoint for 90 s every 5 minutes while the others wait in a barrier",
            "14m",
            gang(8, 15, slow(0, 0.0), pause=lambda k: {0} if k % 20 >= 14 else None),
            interval=SCRAPE,
        ),
        Case(
            "every rank pauses 60 s for a checkpoint every 4 minutes",
            "14m",
            gang(4, 15, slow(0, 0.0), pause=lambda k: set(range(4)) if k % 16 < 4 else None),
            interval=SCRAPE,
        ),
        Case(
            "an evaluation pass: ranks 0 and 1 of 4 evaluate 75 s while the others wait",
            "14m",
            gang(4, 15, slow(0, 0.0), pause=lambda k: {0, 1} if 28 <= k < 33 else None),
            interval=SCRAPE,
        ),
        Case(
            "one data-loader hiccup: rank 2 waits 100 s for data once",
            "12m",
            gang(8, 15, slow(0, 0.0), pause=lambda k: {2} if 24 <= k < 31 else None),
            interval=SCRAPE,
        ),
        Case(
            "twice as slow: its first windows look like a pause, then the median step time catches up",
            "14m",
            gang(8, 15, slow(3, 1.0, since=1)),
            straggler_fires(3),
            interval=SCRAPE,
        ),
        Case(
            "held 5 minutes: it fires",
            "14m",
            gang(8, 15, slow(2, 0.20, since=8, until=13)),
            straggler_fires(2),
            interval=SCRAPE,
        ),
        Case(
            "and 20% slower for 2 minutes once",
            "12m",
            gang(8, 15, slow(2, 0.20, since=6, until=8)),
            interval=SCRAPE,
        ),
        Case(
            "warm-up: rank 0 30% slower over its first 600 steps",
            "12m",
            gang(4, 15, lambda i, k: 0.8 * jitter(i, k) * (1.3 if i == 0 and k < 48 else 1.0), start_step=0),
            interval=SCRAPE,
        ),
        Case(
            "a single rank: no peers to compare with",
            "14m",
            gang(1, 15, slow(0, 0.2)),
            interval=SCRAPE,
        ),
    ],
    "CheckpointStale": [
        Case(
            "never a full checkpoint in the 45 minutes since the start, at 1 step/s (cadence 1000 steps)",
            "45m",
            [series("trainguard_train_start_timestamp_seconds", POD, "0x60"), steps(2000, 60)],
            [p("P1", JOB)],
        ),
        Case(
            "started 20 minutes ago, no checkpoint yet: within 2x the cadence",
            "45m",
            [series("trainguard_train_start_timestamp_seconds", POD, "1500x60"), steps(2000, 60)],
        ),
        Case(
            "the last full checkpoint 45 minutes ago",
            "45m",
            [
                series("trainguard_train_start_timestamp_seconds", POD, "0x60"),
                series(
                    "trainguard_checkpoint_last_success_timestamp_seconds", POD | {"kind": "full"}, "_ 60x60"
                ),
                steps(2000, 60),
            ],
            [p("P1", JOB)],
        ),
        Case(
            "a full checkpoint 15 minutes ago",
            "45m",
            [
                series("trainguard_train_start_timestamp_seconds", POD, "0x60"),
                series(
                    "trainguard_checkpoint_last_success_timestamp_seconds",
                    POD | {"kind": "full"},
                    "_x29 1800x30",
                ),
                steps(2000, 60),
            ],
        ),
        Case(
            "recent incremental checkpoints do not count as full",
            "45m",
            [
                series("trainguard_train_start_timestamp_seconds", POD, "0x60"),
                series(
                    "trainguard_checkpoint_last_success_timestamp_seconds",
                    POD | {"kind": "incremental"},
                    "0+60x60",
                ),
                steps(2000, 60),
            ],
            [p("P1", JOB)],
        ),
    ],
    "InferenceLatencyHigh": [
        Case(
            "300ms at 85% memory",
            "5m",
            [series("trainguard_inference_latency_seconds", POD, "0.3x10"), *mem(85, 15)],
            [p("P1", POD)],
            monitor={"spec.mode": "inference"},
        ),
        Case(
            "300ms with memory to spare",
            "5m",
            [series("trainguard_inference_latency_seconds", POD, "0.3x10"), *mem(50, 50)],
            monitor={"spec.mode": "inference"},
        ),
        Case(
            "a training monitor has no inference alert",
            "5m",
            [series("trainguard_inference_latency_seconds", POD, "0.3x10"), *mem(85, 15)],
        ),
    ],
    "GPUMemoryPressure": [
        Case("exactly 85% used (boundary, >=)", "5m", mem(85, 15), [p("P2", GPU)]),
        Case("84% used", "5m", mem(84, 16)),
    ],
    "GPUMemoryFragmentationHigh": [
        Case(
            "25% fragmented",
            "7m",
            [series("trainguard_gpu_memory_fragmentation_ratio", POD | {"gpu": "0"}, "0.25x10")],
            [p("P2", POD | {"gpu": "0"})],
        ),
        Case(
            "20% (boundary)",
            "7m",
            [series("trainguard_gpu_memory_fragmentation_ratio", POD | {"gpu": "0"}, "0.2x10")],
        ),
    ],
    "TrainingThroughputDeviation": [
        Case(
            "20% above baseline",
            "90m",
            [series("trainguard_train_tokens_per_second_per_gpu", POD, "1000x80 1200x20"), steps(2000)],
            [p("P2", JOB)],
        ),
        Case(
            "10% away",
            "90m",
            [series("trainguard_train_tokens_per_second_per_gpu", POD, "1000x80 900x20"), steps(2000)],
        ),
    ],
    "TrainingLossOscillation": [
        Case(
            "loss swings 1 <-> 3 around a flat 2",
            "90m",
            [series("trainguard_train_loss", POD, "2x80 " + " ".join(["1 3"] * 10)), steps(2000)],
            [p("P2", JOB)],
        ),
        Case(
            "loss swings 1.9 <-> 2.1: within sigma x floor",
            "90m",
            [series("trainguard_train_loss", POD, "2x80 " + " ".join(["1.9 2.1"] * 10)), steps(2000)],
        ),
        Case(
            "swings during warm-up",
            "90m",
            [
                series("trainguard_train_loss", POD, "2x80 " + " ".join(["1 3"] * 10)),
                series("trainguard_train_step", POD, "0+5x100"),
            ],
        ),
    ],
    "GradientVanishing": [
        Case(
            "grad norm 1e-5 after warm-up",
            "10m",
            [series("trainguard_train_grad_norm", POD, "0.00001x20"), steps(2000, 20)],
            [p("P2", JOB)],
        ),
        Case(
            "grad norm 1e-3", "10m", [series("trainguard_train_grad_norm", POD, "0.001x20"), steps(2000, 20)]
        ),
        Case(
            "tiny grads during warm-up",
            "10m",
            [
                series("trainguard_train_grad_norm", POD, "0.00001x20"),
                series("trainguard_train_step", POD, "0+5x20"),
            ],
        ),
        Case(
            "not a finetuning alert",
            "10m",
            [series("trainguard_train_grad_norm", POD, "0.00001x20"), steps(2000, 20)],
            monitor={"spec.mode": "finetuning"},
        ),
    ],
    "LossScaleUnstable": [
        Case(
            "a change every minute",
            "15m",
            [series("trainguard_train_loss_scale_updates_total", POD, "0+1x20")],
            [p("P2", JOB)],
        ),
        Case(
            "a change every three minutes",
            "15m",
            [series("trainguard_train_loss_scale_updates_total", POD, "0+0.34x20")],
        ),
    ],
    "AllReduceTimeRatioHigh": [
        Case(
            "15% of step time",
            "7m",
            [series("trainguard_train_allreduce_time_ratio", POD, "0.15x10")],
            [p("P2", POD)],
        ),
        Case("10% (boundary)", "7m", [series("trainguard_train_allreduce_time_ratio", POD, "0.1x10")]),
    ],
    "DataLoaderSlow": [
        Case(
            "30% waiting",
            "7m",
            [series("trainguard_train_dataloader_wait_ratio", POD, "0.3x10")],
            [p("P2", POD)],
        ),
        Case("20% (boundary)", "7m", [series("trainguard_train_dataloader_wait_ratio", POD, "0.2x10")]),
    ],
    "HostSwapPressure": [
        Case(
            "kswapd busy and memory 90% used",
            "5m",
            [
                series("trainguard_host_kswapd_cpu_ratio", POD, "0.1x10"),
                series("trainguard_host_memory_used_ratio", POD, "0.9x10"),
            ],
            [p("P2", POD)],
        ),
        Case(
            "kswapd busy with memory to spare",
            "5m",
            [
                series("trainguard_host_kswapd_cpu_ratio", POD, "0.1x10"),
                series("trainguard_host_memory_used_ratio", POD, "0.5x10"),
            ],
        ),
    ],
    "DiskWriteLatencyHigh": [
        Case(
            "250ms writes",
            "7m",
            [series("trainguard_host_disk_write_latency_seconds", DISK, "0.25x10")],
            [p("P2", DISK)],
        ),
        Case(
            "200ms (boundary)", "7m", [series("trainguard_host_disk_write_latency_seconds", DISK, "0.2x10")]
        ),
    ],
    "NetworkPacketLoss": [
        Case(
            "0.08% loss",
            "7m",
            [series("trainguard_network_packet_loss_ratio", NIC, "0.0008x10")],
            [p("P2", NIC)],
        ),
        Case("0.05% (boundary)", "7m", [series("trainguard_network_packet_loss_ratio", NIC, "0.0005x10")]),
    ],
    "NetworkBandwidthSaturation": [
        Case(
            "90% utilised for 12 minutes",
            "12m",
            [series("trainguard_network_bandwidth_utilization_ratio", NIC, "0.9x15")],
            [p("P2", NIC)],
        ),
        Case(
            "80% (boundary)", "12m", [series("trainguard_network_bandwidth_utilization_ratio", NIC, "0.8x15")]
        ),
    ],
    "GPUSingleBitECCErrorsHigh": [
        Case(
            "180 SBE in an hour",
            "60m",
            [series("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", GPU, "0+3x60")],
            [p("P1", GPU)],
        ),
        Case("60 SBE in an hour", "60m", [series("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", GPU, "0+1x60")]),
    ],
    "GPUMemoryHigh": [
        Case("exactly 70% used (boundary, >=)", "7m", mem(70, 30), [p("P3", GPU)]),
        Case("69% used", "7m", mem(69, 31)),
        Case("70% for only 3 minutes", "3m", mem(70, 30)),
    ],
}


def gpu_at(node: str, gpu: str) -> dict[str, str]:
    """A GPU of the job on another node (one pod per node)."""
    return GPU | {"pod": f"llama-{node[-1]}", "node": node, "Hostname": node, "gpu": gpu}


def rack(node: str, name: str) -> dict[str, str]:
    """kube-state-metrics' kube_node_labels for a node in rack `name` (the default rackLabel)."""
    return series("kube_node_labels", {"node": node, "label_topology_kubernetes_io_zone": name}, "1x20")


def hot(gpus: list[tuple[str, str]], celsius: int = 84) -> list[dict[str, str]]:
    return [series("DCGM_FI_DEV_GPU_TEMP", gpu_at(n, g), f"{celsius}x20") for n, g in gpus]


def collective(normal_min: int, slow_min: int) -> list[dict[str, str]]:
    """A latency histogram: 100 collectives a minute under 10 ms for `normal_min` minutes, then 100 a minute
    at about half a second for `slow_min` minutes (bucket counters, as the exporter exposes them)."""
    n, m = normal_min, slow_min
    fast = f"0+100x{n} {100 * n}x{m}"
    every = f"0+100x{n + m}"
    return [
        series("trainguard_train_collective_seconds_bucket", POD | {"le": le}, values)
        for le, values in (("0.01", fast), ("0.1", fast), ("1", every), ("+Inf", every))
    ]


SLOW_SCRAPE = {"spec.exporter.scrapeInterval": "1m"}
"""Rates over a 4-minute window: these cases have one sample a minute, too few for a 1-minute window."""

NEW_CASES: dict[str, list[Case]] = {
    "GPUMemorySustainedHigh": [
        Case("92% used for 12 minutes", "12m", mem(92, 8), [p("P1", GPU)]),
        Case("exactly 90% (boundary, >)", "12m", mem(90, 10)),
        Case("92% for only 5 minutes", "5m", mem(92, 8)),
    ],
    "GPUMemoryTemperatureHigh": [
        Case("HBM at 90 C", "3m", [series("DCGM_FI_DEV_MEMORY_TEMP", GPU, "90x10")], [p("P1", GPU)]),
        Case("HBM at 85 C (boundary)", "3m", [series("DCGM_FI_DEV_MEMORY_TEMP", GPU, "85x10")]),
        Case(
            "the GPU core is hot, its HBM is not",
            "3m",
            [
                series("DCGM_FI_DEV_GPU_TEMP", GPU, "90x10"),
                series("DCGM_FI_DEV_MEMORY_TEMP", GPU, "70x10"),
            ],
        ),
    ],
    "GPURowRemapPending": [
        Case(
            "a remap is pending",
            "2m",
            [series("DCGM_FI_DEV_ROW_REMAP_PENDING", GPU, "0 1x5")],
            [p("P1", GPU)],
        ),
        Case("none pending", "2m", [series("DCGM_FI_DEV_ROW_REMAP_PENDING", GPU, "0x5")]),
    ],
    "GPURowRemapFailure": [
        Case("a remap failed", "2m", [series("DCGM_FI_DEV_ROW_REMAP_FAILURE", GPU, "0 1x5")], [p("P1", GPU)]),
        Case(
            "remapped rows but no failure",
            "2m",
            [
                series("DCGM_FI_DEV_ROW_REMAP_FAILURE", GPU, "0x5"),
                series("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", GPU, "3x5"),
            ],
        ),
    ],
    "GPURetiredPagesPending": [
        Case(
            "a retirement is pending",
            "2m",
            [series("DCGM_FI_DEV_RETIRED_PENDING", GPU, "0 1x5")],
            [p("P1", GPU)],
        ),
        Case(
            "pages retired, none pending",
            "2m",
            [
                series("DCGM_FI_DEV_RETIRED_PENDING", GPU, "0x5"),
                series("DCGM_FI_DEV_RETIRED_DBE", GPU, "2x5"),
            ],
        ),
    ],
    "CheckpointStorageFillingUp": [
        Case(
            "losing 100 GB a minute with 2 TB left: the next full checkpoint (1000 s away) will not fit",
            "80m",
            [
                series(
                    "trainguard_checkpoint_filesystem_avail_bytes", POD, "10000000000000-100000000000x100"
                ),
                series("trainguard_checkpoint_last_size_bytes", POD | {"kind": "full"}, "1000000000000x100"),
                steps(0, 100),
            ],
            [p("P1", JOB)],
        ),
        Case(
            "the same trend with 4 TB left: room for the next one",
            "60m",
            [
                series(
                    "trainguard_checkpoint_filesystem_avail_bytes", POD, "10000000000000-100000000000x100"
                ),
                series("trainguard_checkpoint_last_size_bytes", POD | {"kind": "full"}, "1000000000000x100"),
                steps(0, 100),
            ],
        ),
        Case(
            "1.5 TB free and not falling: a 1 TB checkpoint fits",
            "40m",
            [
                series("trainguard_checkpoint_filesystem_avail_bytes", POD, "1500000000000x100"),
                series("trainguard_checkpoint_last_size_bytes", POD | {"kind": "full"}, "1000000000000x100"),
                steps(0, 100),
            ],
        ),
        Case(
            "0.5 TB free and not falling: a 1 TB checkpoint does not fit",
            "40m",
            [
                series("trainguard_checkpoint_filesystem_avail_bytes", POD, "500000000000x100"),
                series("trainguard_checkpoint_last_size_bytes", POD | {"kind": "full"}, "1000000000000x100"),
                steps(0, 100),
            ],
            [p("P1", JOB)],
        ),
    ],
    "TrainingLossDivergingEarly": [
        Case(
            "step 600: loss fell to 2, then jumped to 3.5 (75% above its minimum)",
            "10m",
            [series("trainguard_train_loss", POD, "4 3.5 3 2.5 2 2 2 3.5x10"), steps(0, 30)],
            [p("P1", JOB)],
        ),
        Case(
            "step 600: loss falls smoothly",
            "10m",
            [series("trainguard_train_loss", POD, "4-0.1x20"), steps(0, 30)],
        ),
        Case(
            "the same jump after warm-up is the baseline rules' business",
            "10m",
            [series("trainguard_train_loss", POD, "4 3.5 3 2.5 2 2 2 3.5x10"), steps(2000, 30)],
        ),
        Case(
            "no step completed yet: the first losses are noise",
            "10m",
            [
                series("trainguard_train_loss", POD, "4 3.5 3 2.5 2 2 2 3.5x10"),
                series("trainguard_train_step", POD, "0x30"),
            ],
        ),
    ],
    "RackThermalEvent": [
        Case(
            "four GPUs at 84 C on two nodes of rack-a",
            "5m",
            [
                *hot([("gpu-node-1", "0"), ("gpu-node-1", "1"), ("gpu-node-2", "0"), ("gpu-node-2", "1")]),
                rack("gpu-node-1", "rack-a"),
                rack("gpu-node-2", "rack-a"),
            ],
            [p("P1", JOB | {"rack": "rack-a"})],
        ),
        Case(
            "four hot GPUs on one node: that node's problem, not the rack's",
            "5m",
            [
                *hot([("gpu-node-1", g) for g in "0123"]),
                rack("gpu-node-1", "rack-a"),
                rack("gpu-node-2", "rack-a"),
            ],
        ),
        Case(
            "three hot GPUs on two nodes (below the threshold)",
            "5m",
            [
                *hot([("gpu-node-1", "0"), ("gpu-node-1", "1"), ("gpu-node-2", "0")]),
                rack("gpu-node-1", "rack-a"),
                rack("gpu-node-2", "rack-a"),
            ],
        ),
        Case(
            "four hot GPUs split over two racks",
            "5m",
            [
                *hot([("gpu-node-1", "0"), ("gpu-node-1", "1"), ("gpu-node-2", "0"), ("gpu-node-2", "1")]),
                rack("gpu-node-1", "rack-a"),
                rack("gpu-node-2", "rack-b"),
            ],
        ),
        Case(
            "four GPUs at 80 C (boundary)",
            "5m",
            [
                *hot(
                    [("gpu-node-1", "0"), ("gpu-node-1", "1"), ("gpu-node-2", "0"), ("gpu-node-2", "1")], 80
                ),
                rack("gpu-node-1", "rack-a"),
                rack("gpu-node-2", "rack-a"),
            ],
        ),
    ],
    "MonitoringDataMissing": [
        Case(
            "exporter scraped, no training series for 12 minutes",
            "12m",
            [series("up", POD, "1x20")],
            [p("P1", POD)],
        ),
        Case(
            "exporter scraped and the trainer reports",
            "12m",
            [
                series("up", POD, "1x20"),
                steps(0, 20),
                series("DCGM_FI_DEV_GPU_UTIL", GPU, "90x20"),
                series("trainguard_exporter_gpus_assigned", POD | {"source": "env"}, "8x20"),
            ],
        ),
        Case(
            "the pod has 8 GPUs but no GPU series",
            "12m",
            [
                series("up", POD, "1x20"),
                steps(0, 20),
                series("trainguard_exporter_gpus_assigned", POD | {"source": "env"}, "8x20"),
            ],
            [p("P1", POD)],
        ),
        Case(
            "the pod's target vanished while kube-state-metrics says it runs",
            "27m",
            [
                series("up", POD, "1x10 _x20"),
                steps(0, 30),
                series(
                    "kube_pod_status_phase", {"namespace": "ml", "pod": "llama-0", "phase": "Running"}, "1x30"
                ),
            ],
            [p("P1", POD)],
        ),
        Case(
            "the pod's target vanished with the pod (job finished)",
            "27m",
            [
                series("up", POD, "1x10 _x20"),
                steps(0, 30),
                series(
                    "kube_pod_status_phase",
                    {"namespace": "ml", "pod": "llama-0", "phase": "Running"},
                    "1x10 0x20",
                ),
            ],
        ),
    ],
    "GPUMemoryGrowthPredicted": [
        Case(
            "80% and growing half a point a minute: full within the hour",
            "20m",
            [
                series("DCGM_FI_DEV_FB_USED", GPU, "70+0.5x40"),
                series("DCGM_FI_DEV_FB_FREE", GPU, "30-0.5x40"),
            ],
            [p("P2", GPU)],
        ),
        Case("80% and flat", "20m", mem(80, 20, n=40)),
        Case(
            "fast growth but still at 60%",
            "20m",
            [series("DCGM_FI_DEV_FB_USED", GPU, "20+2x40"), series("DCGM_FI_DEV_FB_FREE", GPU, "80-2x40")],
        ),
    ],
    "CollectiveLatencyHigh": [
        Case(
            "p99 from 10 ms to about 1 s after warm-up",
            "90m",
            [*collective(80, 20), steps(2000)],
            [p("P2", JOB)],
            monitor=SLOW_SCRAPE,
        ),
        Case("steady 10 ms", "90m", [*collective(100, 0), steps(2000)], monitor=SLOW_SCRAPE),
        Case(
            "the same jump in warm-up",
            "90m",
            [*collective(80, 20), series("trainguard_train_step", POD, "0+10x100")],
            monitor=SLOW_SCRAPE,
        ),
    ],
    "NetworkCongestion": [
        Case(
            "2000 ECN-marked packets a second",
            "10m",
            [series("trainguard_network_ecn_marked_packets_total", PORT, "0+120000x20")],
            [p("P2", PORT)],
            monitor=SLOW_SCRAPE,
        ),
        Case(
            "1000 a second (boundary)",
            "10m",
            [series("trainguard_network_ecn_marked_packets_total", PORT, "0+60000x20")],
            monitor=SLOW_SCRAPE,
        ),
    ],
    "NVLinkCRCErrors": [
        Case(
            "200 CRC errors in 10 minutes",
            "15m",
            [series("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", GPU, "0+20x30")],
            [p("P2", GPU)],
        ),
        Case(
            "50 in 10 minutes",
            "15m",
            [series("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", GPU, "0+5x30")],
        ),
    ],
    "CheckpointRestoreSlow": [
        Case(
            "restoring at 50 MB/s",
            "3m",
            [
                series("trainguard_checkpoint_restore_read_bytes_per_second", POD, "50000000x10"),
                series("trainguard_checkpoint_restoring", POD, "1x10"),
            ],
            [p("P2", POD)],
        ),
        Case(
            "restoring at 300 MB/s",
            "3m",
            [
                series("trainguard_checkpoint_restore_read_bytes_per_second", POD, "300000000x10"),
                series("trainguard_checkpoint_restoring", POD, "1x10"),
            ],
        ),
        Case(
            "the last restore was slow, but it is over",
            "3m",
            [
                series("trainguard_checkpoint_restore_read_bytes_per_second", POD, "50000000x10"),
                series("trainguard_checkpoint_restoring", POD, "0x10"),
            ],
        ),
    ],
    "GPUPCIeLinkDegraded": [
        Case("busy at x8 of x16 for 6 minutes", "6m", link(5, 8, 95), [p("P1", GPU)], interval=SCRAPE),
        Case("busy at Gen4 of Gen5", "6m", link(4, 16, 95), [p("P1", GPU)], interval=SCRAPE),
        Case("an idle GPU's link trained down to Gen1 (power saving)", "6m", link(1, 16, 0), interval=SCRAPE),
        Case("a lightly used GPU at Gen2 (50%: not busy)", "6m", link(2, 16, 50), interval=SCRAPE),
        Case("busy at full speed", "6m", link(5, 16, 95), interval=SCRAPE),
        Case("a Gen5 GPU in a Gen4 slot at Gen4 x16", "6m", link(4, 16, 95, max_gen=4), interval=SCRAPE),
        Case(
            "x8 for 2 minutes, then x16 again: shorter than the hold",
            "4m",
            [
                series("DCGM_FI_DEV_PCIE_LINK_GEN", GPU, "5x40"),
                series("DCGM_FI_DEV_PCIE_LINK_WIDTH", GPU, "16x4 8x8 16x28"),
                series("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", GPU, "5x40"),
                series("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", GPU, "16x40"),
                series("DCGM_FI_DEV_GPU_UTIL", GPU, "95x40"),
            ],
            interval=SCRAPE,
        ),
    ],
    "GPUClocksThrottled": [
        Case(
            "power brake (HW slowdown and its cause) while busy: the cause is the reason",
            "4m",
            throttle(f"{0x88}x40"),
            [p("P1", GPU | {"reason": "hw_power_brake"})],
            interval=SCRAPE,
        ),
        Case(
            "HW slowdown without a named cause",
            "4m",
            throttle(f"{0x08}x40"),
            [p("P1", GPU | {"reason": "hw_slowdown"})],
            interval=SCRAPE,
        ),
        Case(
            "HW and SW thermal slowdown: both reasons",
            "4m",
            throttle(f"{0x68}x40"),
            [p("P1", GPU | {"reason": "hw_thermal"}), p("P1", GPU | {"reason": "sw_thermal"})],
            interval=SCRAPE,
        ),
        Case(
            "the power cap a heavy load reaches (SW power cap)", "6m", throttle(f"{0x04}x40"), interval=SCRAPE
        ),
        Case("sync boost and application clocks", "6m", throttle(f"{0x12}x40"), interval=SCRAPE),
        Case(
            "a thermal blip of one minute, shorter than the hold",
            "4m",
            throttle(f"0x4 {0x60}x4 0x35"),
            interval=SCRAPE,
        ),
        Case("HW slowdown on an idle GPU", "6m", throttle(f"{0x09}x40", util="0x40"), interval=SCRAPE),
    ],
    "GPUClockBelowPeers": [
        Case(
            "one GPU 10% below three peers for 8 minutes",
            "8m",
            clocks(["1980x40", "1980x40", "1965x40", "1782x40"]),
            [p("P1", gpu_n(3))],
            interval=SCRAPE,
        ),
        Case(
            "the whole job's clocks lowered together (a power cap every GPU reaches)",
            "8m",
            clocks(["1980x4 1700x36", "1980x4 1710x36", "1980x4 1695x36", "1980x4 1705x36"]),
            interval=SCRAPE,
        ),
        Case(
            "2% below its peers: clock jitter",
            "8m",
            clocks(["1980x40", "1980x40", "1965x40", "1940x40"]),
            interval=SCRAPE,
        ),
        Case(
            "two GPUs only: no median to judge against", "8m", clocks(["1980x40", "1700x40"]), interval=SCRAPE
        ),
        Case(
            "the slow GPU is idle (a low clock at idle is normal)",
            "8m",
            clocks(["1980x40", "1980x40", "1980x40", "600x40"], ["95x40", "95x40", "95x40", "0x40"]),
            interval=SCRAPE,
        ),
        Case(
            "10% below for 3 minutes only, shorter than the hold",
            "8m",
            clocks(["1980x40", "1980x40", "1980x40", "1980x16 1782x12 1980x12"]),
            interval=SCRAPE,
        ),
    ],
    "GPUPowerCapped": [
        Case(
            "695 W of a 700 W limit for 12 minutes",
            "12m",
            [
                series("DCGM_FI_DEV_POWER_USAGE", GPU, "695x20"),
                series("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", GPU, "700x20"),
            ],
            [p("P3", GPU)],
        ),
        Case(
            "600 W of 700 W",
            "12m",
            [
                series("DCGM_FI_DEV_POWER_USAGE", GPU, "600x20"),
                series("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", GPU, "700x20"),
            ],
        ),
    ],
    "InferenceQueueDepthHigh": [
        Case(
            "150 pending requests",
            "5m",
            [series("trainguard_inference_queue_depth", POD, "150x10")],
            [p("P1", POD)],
            monitor={"spec.mode": "inference"},
        ),
        Case(
            "100 pending (boundary)",
            "5m",
            [series("trainguard_inference_queue_depth", POD, "100x10")],
            monitor={"spec.mode": "inference"},
        ),
    ],
}
CASES.update(NEW_CASES)


ESCALATION_CASES: list[Case] = [
    Case(
        "a P1 thermal alert firing for an hour stays one P1: the operator escalates, not a copied rule",
        "60m",
        [series("DCGM_FI_DEV_GPU_TEMP", GPU, "90x70")],
        [p("P1", GPU)],
    ),
]


def only_alert(rule_file: dict[str, Any], alertname: str) -> dict[str, Any]:
    """The recording rules and the one alert under test: promtool evaluates every rule at every step,
    and no rule reads another alert (ALERTS), so the others only cost time (two thirds of it; the tests
    run on two toolchains)."""
    groups = []
    for group in rule_file["groups"]:
        assert not [r for r in group["rules"] if "ALERTS" in r["expr"]], (
            "a rule reads ALERTS: keep every alert"
        )
        kept = [r for r in group["rules"] if "record" in r or r["alert"] == alertname]
        groups.append(group | {"rules": kept})
    return rule_file | {"groups": groups}
