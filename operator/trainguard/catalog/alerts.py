"""The alert catalogue (docs/architecture.md): every built-in alert with its defaults.

Only data lives here. The PromQL for each alert is built in `trainguard.render.prometheus`, which
fails loudly (and a test with it) if an alert of this table has no expression.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Layer(StrEnum):
    HARDWARE = "hardware"
    TRAINING = "training"
    JOB = "job"


class Mode(StrEnum):
    TRAINING = "training"
    FINETUNING = "finetuning"
    INFERENCE = "inference"


class Scope(StrEnum):
    """What one firing alert is about; decides its identifying labels."""

    JOB = "job"
    POD = "pod"
    GPU = "gpu"
    NODE = "node"
    INTERFACE = "interface"
    DEVICE = "device"
    PORT = "port"
    RACK = "rack"

    @property
    def labels(self) -> tuple[str, ...]:
        return _SCOPE_LABELS[self]


_SCOPE_LABELS: dict[Scope, tuple[str, ...]] = {
    Scope.JOB: ("namespace", "training_job"),
    Scope.POD: ("namespace", "training_job", "pod", "node"),
    Scope.GPU: ("namespace", "training_job", "pod", "node", "gpu"),
    Scope.NODE: ("namespace", "training_job", "node"),
    Scope.INTERFACE: ("namespace", "training_job", "pod", "node", "interface"),
    Scope.DEVICE: ("namespace", "training_job", "pod", "node", "device"),
    Scope.PORT: ("namespace", "training_job", "pod", "node", "device", "port"),
    Scope.RACK: ("namespace", "training_job", "rack"),
}

SEVERITIES: tuple[str, ...] = ("P0", "P1", "P2", "P3")
TRAINING_INTERRUPTED = "TrainingInterrupted"
"""The operator's own P0, for what no exporter can report: a training pod OOMKilled, failed or evicted,
or its Job failed (remediation/detect.py); and the sidecar's, by the fast path, for a trainer that failed
under `trainguard launch`, whose pod lives on (exporter/restarts.py)."""
WITHHELD = "TrainguardRemediationWithheld"
"""The notice a storm guard or budget posts instead of an action, so that a person acts."""
NODE_CORDONED = "TrainguardNodeCordoned"
"""The notice that a node trainguard cordoned waits for a person (remediation/notices.py)."""
BREAKER_OPEN = "TrainguardRemediationBreakerOpen"
"""The page that the circuit breaker opened: much of a node pool looks down at once and trainguard has
stopped cordoning there (remediation/breaker.py). A P0 for the platform: it carries no namespace."""
NODE_MAINTENANCE = "NodeMaintenancePlanned"
"""The operator's own P2: a node running a monitored job was cordoned by a person (or `kubectl drain`) or
annotated trainguard.io/maintenance-at; the job checkpoints and moves off it (remediation/maintenance.py)."""
OPERATOR_ALERT_NAMES: tuple[str, ...] = (
    TRAINING_INTERRUPTED,
    WITHHELD,
    NODE_CORDONED,
    BREAKER_OPEN,
    NODE_MAINTENANCE,
)
"""Alerts the operator posts to Alertmanager itself, routed like the catalogue's."""
SEVERITY_ORDER: dict[str, int] = {s: i for i, s in enumerate(SEVERITIES)}
"""Rank of each severity, most severe first (0); sort unknown ones last with .get(s, len(SEVERITIES))."""

FATAL_XIDS: tuple[int, ...] = (48, 63, 64, 74, 79, 92, 94, 95, 119, 120)
"""XIDs after which the GPU (or its node) cannot be trusted: DBE (48), row remapping (63, 64),
NVLink (74), fallen off the bus (79), high SBE rate (92), contained and uncontained ECC (94, 95),
GSP timeouts and errors (119, 120)."""

ALL_MODES = frozenset(Mode)
TRAINING_MODES = frozenset({Mode.TRAINING, Mode.FINETUNING})


@dataclass(frozen=True)
class Param:
    """A tunable number of an alert. The first param of an alert is its `threshold`."""

    name: str
    default: float
    help: str


class P0Class(StrEnum):
    """Which automatic response a P0 alert asks for (docs/architecture.md, the response matrix), and the
    one P1 the P0 loop also acts on: single-bit ECC errors over the daily threshold isolate the node."""

    NONFINITE_LOSS = "nonFiniteLoss"
    NODE_FAULT = "nodeFault"
    STALL = "stall"
    ECC_DEGRADED = "eccDegraded"


@dataclass(frozen=True)
class Alert:
    name: str
    severity: str
    for_: str
    layer: Layer
    scope: Scope
    condition: str
    """What makes it fire, in words; the docs and the description annotation use it."""
    summary: str
    probable_cause: str
    params: tuple[Param, ...] = ()
    modes: frozenset[Mode] = ALL_MODES
    baseline: bool = False
    """Judged against a learned baseline, so gated on warm-up steps."""
    supersedes: tuple[str, ...] = ()
    """Milder alerts of the same signal that this one inhibits while it fires (same scope labels)."""
    p0_class: P0Class | None = None
    without_response: str = ""
    """Why a P0 has no automatic response of its own (every other P0 names its p0_class)."""
    extra: dict[str, tuple[int, ...]] = field(default_factory=dict)


def _p(name: str, default: float, help_: str) -> Param:
    return Param(name, default, help_)


ALERTS: tuple[Alert, ...] = (
    # ---- P0 ----
    Alert(
        "TrainingLossNonFinite",
        "P0",
        "0s",
        Layer.TRAINING,
        Scope.POD,
        "the non-finite loss counter increased",
        "Training produced a NaN or Inf loss",
        "numerical overflow: learning rate too high, a bad batch, or corrupted GPU state",
        modes=TRAINING_MODES,
        p0_class=P0Class.NONFINITE_LOSS,
    ),
    Alert(
        "TrainingJobStalled",
        "P0",
        "0s",
        Layer.JOB,
        Scope.JOB,
        "no step completed for longer than the threshold (and longer than a checkpoint may take), "
        "counted from the pod's start when no step ever completed",
        "The training job has stopped making progress",
        "a hung collective (NCCL) after a rank or link failed, a deadlocked data loader, or a stuck GPU",
        params=(_p("seconds", 300, "seconds without a completed step"),),
        modes=TRAINING_MODES,
        p0_class=P0Class.STALL,
    ),
    Alert(
        "GPUNodeDown",
        "P0",
        # no hold of its own: the Ready condition is held already (the node controller turns it Unknown
        # only after its grace period, 40 s, without a heartbeat), and a hold of one more evaluation
        # (15 s) put the median over the 30 s of a P0 (bench/detection.py). A kubelet's own NotReady
        # that one scrape of kube-state-metrics catches pages too; the operator waits 12 s on it.
        "0s",
        Layer.HARDWARE,
        Scope.NODE,
        "the Node of one of the job's pods is NotReady (node state, never an unreachable exporter alone)",
        "A GPU node of the job is down",
        "node crash, kernel panic, network partition or kubelet failure",
        p0_class=P0Class.NODE_FAULT,
    ),
    Alert(
        "GPUDoubleBitECCError",
        "P0",
        "0s",
        Layer.HARDWARE,
        Scope.GPU,
        "the double-bit ECC counter increased",
        "Uncorrectable (double-bit) ECC error: GPU memory is corrupt",
        "failing HBM; the GPU needs a reset or replacement",
        p0_class=P0Class.NODE_FAULT,
    ),
    Alert(
        "GPUCriticalXid",
        "P0",
        "0s",
        Layer.HARDWARE,
        Scope.GPU,
        "the last XID is in the fatal set",
        "A fatal XID error was reported by the GPU driver",
        "hardware fault: fallen off the bus, ECC, NVLink or GSP failure",
        p0_class=P0Class.NODE_FAULT,
        extra={"codes": FATAL_XIDS},
    ),
    Alert(
        "GPULost",
        "P0",
        "0s",
        Layer.HARDWARE,
        Scope.GPU,
        "NVML reports the GPU as lost",
        "A GPU fell off the bus and no longer answers",
        "XID 79: PCIe link or power failure, overheating or a hardware fault; the node needs a reset",
        p0_class=P0Class.NODE_FAULT,
    ),
    Alert(
        "GPUOutOfMemory",
        "P0",
        "0s",
        Layer.TRAINING,
        Scope.POD,
        "the trainer reported a CUDA out-of-memory error (the SDK's OOM counter increased)",
        "Training hit a GPU out-of-memory error",
        "activation memory beyond the card: a longer sequence or larger batch, a leak across steps, or "
        "fragmentation; the pod restarts (TrainingInterrupted) unless the trainer recovered by itself",
        modes=TRAINING_MODES,
        without_response="a trainer that dies of it is restarted from its checkpoint as TrainingInterrupted; "
        "one that recovers needs a person to shrink the batch or sequence, not a restart",
    ),
    # ---- P1 ----
    Alert(
        "TrainingThroughputDrop",
        "P1",
        "5m",
        Layer.TRAINING,
        Scope.JOB,
        "throughput is more than the threshold below its baseline, after warm-up",
        "Training throughput dropped sharply",
        "a straggler GPU or node, thermal throttling, network congestion or a slow data pipeline",
        params=(_p("ratio", 0.30, "fraction below the baseline mean"),),
        modes=TRAINING_MODES,
        baseline=True,
        supersedes=("TrainingThroughputDeviation",),
    ),
    Alert(
        "GPUMemoryCritical",
        "P1",
        "10s",
        Layer.HARDWARE,
        Scope.GPU,
        "framebuffer used ratio at or above the threshold",
        "GPU memory almost full: out-of-memory risk",
        "activation memory growth, a leak, or a batch or sequence length too large",
        params=(_p("ratio", 0.95, "used / total framebuffer"),),
        supersedes=("GPUMemorySustainedHigh", "GPUMemoryPressure", "GPUMemoryHigh"),
    ),
    Alert(
        "GPUMemoryHang",
        "P1",
        "1m",
        Layer.HARDWARE,
        Scope.GPU,
        "memory used above the threshold while utilisation is below the second threshold",
        "GPU holds its memory but does no work",
        "a hung kernel or collective, or a process waiting forever on a peer",
        params=(
            _p("ratio", 0.90, "used / total framebuffer"),
            _p("utilization", 30, "GPU utilisation in % below which the GPU counts as idle"),
        ),
    ),
    Alert(
        "GPUThermalThrottling",
        "P1",
        "1m",
        Layer.HARDWARE,
        Scope.GPU,
        "temperature above the threshold",
        "GPU is hot enough to throttle its clocks",
        "cooling failure, blocked airflow or a failing fan",
        params=(_p("celsius", 85, "GPU temperature in C"),),
    ),
    Alert(
        "NetworkPacketLossHigh",
        "P1",
        "1m",
        Layer.HARDWARE,
        Scope.INTERFACE,
        "packet loss above the threshold",
        "Heavy packet loss on a training network interface",
        "a faulty cable, transceiver or switch port, or link congestion",
        params=(_p("ratio", 0.001, "lost / sent packets"),),
        supersedes=("NetworkPacketLoss",),
    ),
    Alert(
        "GradientExplosion",
        "P1",
        "1m",
        Layer.TRAINING,
        Scope.JOB,
        "gradient norm above baseline mean + sigma x stddev, after warm-up",
        "Gradient norm exploded",
        "learning rate too high, a bad batch, or missing gradient clipping",
        modes=TRAINING_MODES,
        baseline=True,
    ),
    Alert(
        "CheckpointStale",
        "P1",
        "5m",
        Layer.JOB,
        Scope.JOB,
        "no successful full checkpoint for the threshold times the full-checkpoint cadence, counted "
        "from the pod's start when none ever succeeded",
        "No recent successful checkpoint",
        "checkpoint writes failing or too slow: storage full, quota or throughput",
        params=(_p("factor", 2, "multiple of the full-checkpoint cadence"),),
        modes=TRAINING_MODES,
    ),
    Alert(
        "StragglerRank",
        "P1",
        "1m",
        Layer.TRAINING,
        Scope.POD,
        "the rank's time outside collectives per step (its own pace: its peers wait for it in theirs) was "
        "more than the threshold above the gang's median for `held_seconds` of the last 10 minutes, pauses "
        "(checkpoints, evaluation) not counted, after warm-up (docs/diagnosis.md, Stragglers)",
        "A rank holds the whole gang back",
        "a slow GPU (clocks throttled, PCIe link trained down), a busy or degraded host, or a rank whose data "
        "loader is persistently slow",
        params=(
            _p("slowdown", 0.05, "the rank's own time per step over its peers' median, minus one"),
            _p("held_seconds", 240, "seconds of the last 10 minutes the rank was that much slower"),
        ),
        modes=TRAINING_MODES,
    ),
    Alert(
        "InferenceLatencyHigh",
        "P1",
        "2m",
        Layer.TRAINING,
        Scope.POD,
        "latency above the threshold while GPU memory is above the second threshold",
        "Inference latency is high under memory pressure",
        "KV-cache pressure, too large batches or memory fragmentation",
        params=(
            _p("seconds", 0.2, "mean request latency in seconds"),
            _p("memory_ratio", 0.80, "used / total framebuffer"),
        ),
        modes=frozenset({Mode.INFERENCE}),
    ),
    Alert(
        "GPUMemorySustainedHigh",
        "P1",
        "10m",
        Layer.HARDWARE,
        Scope.GPU,
        "framebuffer used ratio above the threshold for the whole `for` (sustained, not a spike)",
        "GPU memory has stayed almost full",
        "memory growing towards an OOM: a leak across steps, growing caches, or a too large batch",
        params=(_p("ratio", 0.90, "used / total framebuffer"),),
        supersedes=("GPUMemoryPressure", "GPUMemoryHigh"),
    ),
    Alert(
        "GPUMemoryTemperatureHigh",
        "P1",
        "1m",
        Layer.HARDWARE,
        Scope.GPU,
        "HBM memory temperature above the threshold",
        "GPU memory (HBM) is overheating",
        "poor cooling of the memory stacks; HBM errors and row remapping follow heat",
        params=(_p("celsius", 85, "HBM temperature in C"),),
    ),
    Alert(
        "GPURowRemapPending",
        "P1",
        "0s",
        Layer.HARDWARE,
        Scope.GPU,
        "the GPU has a row remapping pending (it takes effect only at the next GPU reset)",
        "A GPU has memory rows waiting to be remapped: drain it",
        "uncorrectable memory errors; until a reset the bad rows stay in use, so isolate the node, "
        "reset the GPU and watch for a remap failure",
        p0_class=P0Class.ECC_DEGRADED,
    ),
    Alert(
        "GPURowRemapFailure",
        "P1",
        "0s",
        Layer.HARDWARE,
        Scope.GPU,
        "a row remapping failed (the GPU has no spare rows left for the bank)",
        "A GPU failed to remap a bad memory row: replace it",
        "worn-out HBM; the GPU cannot repair itself any more and needs a replacement",
        p0_class=P0Class.ECC_DEGRADED,
    ),
    Alert(
        "GPURetiredPagesPending",
        "P1",
        "0s",
        Layer.HARDWARE,
        Scope.GPU,
        "a page retirement is pending (pre-Ampere GPUs; it takes effect at the next driver reload)",
        "A GPU has memory pages waiting to be retired: drain it",
        "repeated ECC errors on the same page; isolate the node and reset the GPU",
        p0_class=P0Class.ECC_DEGRADED,
    ),
    Alert(
        "CheckpointStorageFillingUp",
        "P1",
        "5m",
        Layer.JOB,
        Scope.JOB,
        "the checkpoint filesystem, extrapolated linearly over the last 30 minutes to the next full "
        "checkpoint, will have less room than one full checkpoint (or none, when its size is unknown)",
        "The checkpoint filesystem will be full before the next full checkpoint",
        "checkpoints accumulate without rotation, or another writer fills the volume",
    ),
    Alert(
        "TrainingLossDivergingEarly",
        "P1",
        "2m",
        Layer.TRAINING,
        Scope.JOB,
        "before warm-up ends, the loss is more than the threshold above its running minimum, or its "
        "coefficient of variation over 5 minutes is above the second threshold",
        "Training loss diverges in its first steps",
        "learning rate or warm-up wrong, a bad initialisation, or broken data in the first shards",
        params=(
            _p("rise", 0.5, "fraction above the running minimum of the loss"),
            _p("cv", 0.5, "stddev / mean of the loss over 5 minutes"),
            _p("min_steps", 50, "steps before the rule judges (the first losses are noise)"),
        ),
        modes=TRAINING_MODES,
    ),
    Alert(
        "RackThermalEvent",
        "P1",
        "2m",
        Layer.HARDWARE,
        Scope.RACK,
        "at least the threshold number of the job's GPUs on at least two nodes of one rack are above "
        "the temperature threshold together (rack from the monitor's spec.topology.rackLabel node label)",
        "Several GPUs of one rack run hot together",
        "a rack-level cooling problem (CRAH, rear-door heat exchanger, blocked airflow), not one GPU",
        params=(
            _p("gpus", 4, "hot GPUs in one rack"),
            _p("celsius", 80, "GPU temperature in C"),
        ),
        # one alert for the rack: while it fires, the job's per-GPU heat alerts are its detail
        supersedes=("GPUThermalThrottling", "GPUMemoryTemperatureHigh"),
    ),
    Alert(
        "MonitoringDataMissing",
        "P1",
        "10m",
        Layer.JOB,
        Scope.POD,
        "a pod's exporter is scraped but its training series, or its GPUs' series, are missing; or "
        "every series of the job stopped arriving while the job's pods still run",
        "The job's monitoring went dark: faults would reach no one",
        "the trainer does not report through the SDK (or lost its connection), NVML stopped answering, "
        "or the PodMonitor no longer matches the pods",
    ),
    Alert(
        "InferenceQueueDepthHigh",
        "P1",
        "2m",
        Layer.TRAINING,
        Scope.POD,
        "pending requests above the threshold",
        "Inference requests queue up",
        "more load than the replicas serve: scale out, or a slow or hung replica",
        params=(_p("requests", 100, "pending requests"),),
        modes=frozenset({Mode.INFERENCE}),
    ),
    Alert(
        "GPUSingleBitECCErrorsHigh",
        "P1",
        "0s",
        Layer.HARDWARE,
        Scope.GPU,
        "single-bit ECC errors over a day above the threshold",
        "Many correctable ECC errors: GPU memory is degrading",
        "aging HBM; isolate the node and plan a replacement before it turns uncorrectable",
        params=(_p("errors", 100, "single-bit errors in 24h"),),
        p0_class=P0Class.ECC_DEGRADED,
    ),
    # slow, not dead (issue 25): the GPU answers and computes, slower than it should, and the whole
    # synchronous job waits for it
    Alert(
        "GPUPCIeLinkDegraded",
        "P1",
        "3m",
        Layer.HARDWARE,
        Scope.GPU,
        "the PCIe link's bandwidth share (2^(generation - max generation) x width / max width) is below "
        "the threshold while the GPU is busy (an idle GPU's link trains down to save power: never judged)",
        "A busy GPU's PCIe link runs below its generation or width",
        "a link that trained down: a badly seated GPU or riser, a failing retimer or slot, or a BIOS setting",
        params=(
            _p("bandwidth_ratio", 1, "share of the link's full bandwidth it must reach"),
            _p("utilization", 50, "average GPU utilization (%) over the rate window that counts as busy"),
        ),
    ),
    Alert(
        "GPUClocksThrottled",
        "P1",
        "2m",
        Layer.HARDWARE,
        Scope.GPU,
        "NVML reports a hardware clock-throttle reason (hw_slowdown, hw_power_brake, hw_thermal) or the "
        "driver's thermal slowdown (sw_thermal) while the GPU is busy; the power cap a heavy load reaches "
        "(sw_power_cap) and idle clocks are normal",
        "A busy GPU's clocks are held down by its hardware",
        "an external power brake (PSU or rack power fault), a failing VRM or sensor, or cooling that cannot "
        "keep up; label `reason` names which",
        params=(
            _p("utilization", 50, "average GPU utilization (%) over the rate window that counts as busy"),
        ),
        supersedes=("GPUClockBelowPeers",),  # the named cause of a low clock says more than the symptom
    ),
    Alert(
        "GPUClockBelowPeers",
        "P1",
        "5m",
        Layer.HARDWARE,
        Scope.GPU,
        "a busy GPU's SM clock (averaged over the rate window) is at least the threshold below the median "
        "of the job's busy GPUs, with at least min_gpus of them (a whole-job clock change moves the median "
        "with it)",
        "A GPU runs at a lower clock than the job's other GPUs",
        "a clock held low without a reason NVML reports, a GPU at its power cap while its peers are not, or "
        "a throttle the other alerts name",
        params=(
            _p("ratio", 0.07, "how far below the median clock, as a share of it"),
            _p("utilization", 50, "average GPU utilization (%) over the rate window that counts as busy"),
            _p("min_gpus", 3, "busy GPUs of the job needed for a median"),
        ),
    ),
    # ---- P2 ----
    Alert(
        "GPUMemoryPressure",
        "P2",
        "2m",
        Layer.HARDWARE,
        Scope.GPU,
        "framebuffer used ratio at or above the threshold",
        "GPU memory under pressure",
        "growing activation or cache memory",
        params=(_p("ratio", 0.85, "used / total framebuffer"),),
        supersedes=("GPUMemoryHigh",),
    ),
    Alert(
        "GPUMemoryGrowthPredicted",
        "P2",
        "10m",
        Layer.HARDWARE,
        Scope.GPU,
        "framebuffer use, already above the second threshold, extrapolated over the last 30 minutes "
        "reaches the whole card within the horizon",
        "GPU memory is on course for an out-of-memory error",
        "memory that grows step after step: a leak (tensors kept across steps), a growing cache",
        params=(
            _p("horizon_seconds", 3600, "how far ahead to extrapolate"),
            _p("ratio", 0.70, "used ratio from which growth is judged"),
        ),
    ),
    Alert(
        "CollectiveLatencyHigh",
        "P2",
        "5m",
        Layer.TRAINING,
        Scope.JOB,
        "p99 collective latency (the SDK's trainguard_train_collective_seconds) above baseline mean + "
        "sigma x stddev and above the threshold times the mean, after warm-up",
        "Collective (all-reduce) latency jumped",
        "a degraded link or switch port, congestion (see ECN and CNP counters), or a straggler rank",
        params=(_p("ratio", 1.5, "p99 over its baseline mean"),),
        modes=TRAINING_MODES,
        baseline=True,
    ),
    Alert(
        "NetworkCongestion",
        "P2",
        "5m",
        Layer.HARDWARE,
        Scope.PORT,
        "ECN-marked RoCE packets per second on a NIC port above the threshold",
        "RoCE congestion: the switches mark packets and the NICs slow down",
        "incast from collectives, a hot spine link, or PFC/ECN thresholds that need tuning",
        params=(_p("packets_per_second", 1000, "ECN-marked packets per second"),),
    ),
    Alert(
        "NVLinkCRCErrors",
        "P2",
        "0s",
        Layer.HARDWARE,
        Scope.GPU,
        "NVLink CRC flit errors in 10 minutes above the threshold",
        "NVLink errors: a GPU-to-GPU link is degrading",
        "a marginal NVLink or NVSwitch connection; retries slow collectives before a link fails",
        params=(_p("errors", 100, "CRC flit errors in 10 minutes"),),
    ),
    Alert(
        "CheckpointRestoreSlow",
        "P2",
        "1m",
        Layer.JOB,
        Scope.POD,
        "while the trainer restores a checkpoint, it reads slower than the threshold",
        "Resuming from a checkpoint is slow",
        "a slow or shared checkpoint filesystem, or many ranks reading the same files at once",
        params=(_p("bytes_per_second", 200e6, "read throughput of the restore"),),
        modes=TRAINING_MODES,
    ),
    Alert(
        "GPUMemoryFragmentationHigh",
        "P2",
        "5m",
        Layer.HARDWARE,
        Scope.GPU,
        "allocator fragmentation above the threshold",
        "GPU memory is fragmented",
        "varying tensor shapes; consider expandable segments or a fixed sequence length",
        params=(_p("ratio", 0.20, "(reserved - allocated) / reserved"),),
    ),
    Alert(
        "TrainingThroughputDeviation",
        "P2",
        "5m",
        Layer.TRAINING,
        Scope.JOB,
        "throughput more than the threshold away from its baseline, after warm-up",
        "Training throughput deviates from its baseline",
        "changed input lengths, a slower node, or contention",
        params=(_p("ratio", 0.15, "fraction away from the baseline mean"),),
        modes=TRAINING_MODES,
        baseline=True,
    ),
    Alert(
        "TrainingLossOscillation",
        "P2",
        "5m",
        Layer.TRAINING,
        Scope.JOB,
        "loss volatility above sigma x its baseline, after warm-up",
        "Training loss oscillates",
        "learning rate too high or instability after a data-mix change",
        modes=TRAINING_MODES,
        baseline=True,
    ),
    Alert(
        "GradientVanishing",
        "P2",
        "5m",
        Layer.TRAINING,
        Scope.JOB,
        "gradient norm below the floor, after warm-up",
        "Gradients vanished",
        "saturated activations, a dead layer, or a learning rate that decayed to zero",
        params=(_p("floor", 1e-4, "gradient norm"),),
        modes=frozenset({Mode.TRAINING}),
        baseline=True,
    ),
    Alert(
        "LossScaleUnstable",
        "P2",
        "0s",
        Layer.TRAINING,
        Scope.JOB,
        "more loss-scale changes than the threshold in 10 minutes",
        "Mixed-precision loss scale keeps changing",
        "frequent fp16 overflows; consider bf16 or a lower learning rate",
        params=(_p("changes", 5, "loss-scale changes in 10 minutes"),),
        modes=TRAINING_MODES,
    ),
    Alert(
        "AllReduceTimeRatioHigh",
        "P2",
        "5m",
        Layer.TRAINING,
        Scope.POD,
        "collectives take more than the threshold of step time",
        "Collective communication dominates step time",
        "slow or congested interconnect, or a straggler rank",
        params=(_p("ratio", 0.10, "share of step time"),),
        modes=TRAINING_MODES,
    ),
    Alert(
        "DataLoaderSlow",
        "P2",
        "5m",
        Layer.TRAINING,
        Scope.POD,
        "waiting for data takes more than the threshold of step time",
        "The data loader starves the GPUs",
        "too few loader workers, slow storage, or CPU-heavy preprocessing",
        params=(_p("ratio", 0.20, "share of step time"),),
        modes=TRAINING_MODES,
    ),
    Alert(
        "HostSwapPressure",
        "P2",
        "2m",
        Layer.HARDWARE,
        Scope.POD,
        "kswapd CPU above the threshold while host memory is above the second threshold",
        "The host is swapping",
        "host memory overcommitted by data loader workers or pinned buffers",
        params=(
            _p("kswapd_ratio", 0.05, "kswapd CPU as a share of one core"),
            _p("memory_ratio", 0.80, "host memory used"),
        ),
    ),
    Alert(
        "DiskWriteLatencyHigh",
        "P2",
        "5m",
        Layer.HARDWARE,
        Scope.DEVICE,
        "mean write latency above the threshold",
        "Disk writes are slow",
        "a failing or saturated disk; checkpoints will be slow",
        params=(_p("seconds", 0.2, "mean write latency"),),
    ),
    Alert(
        "NetworkPacketLoss",
        "P2",
        "5m",
        Layer.HARDWARE,
        Scope.INTERFACE,
        "packet loss above the threshold",
        "Packet loss on a training network interface",
        "a degrading link or congestion",
        params=(_p("ratio", 0.0005, "lost / sent packets"),),
    ),
    Alert(
        "NetworkBandwidthSaturation",
        "P2",
        "10m",
        Layer.HARDWARE,
        Scope.INTERFACE,
        "link utilisation above the threshold",
        "A network link is saturated",
        "more traffic than the link carries: check topology and collective algorithm",
        params=(_p("ratio", 0.80, "utilisation of link speed"),),
    ),
    Alert(
        "TrainguardExporterDown",
        "P2",
        "2m",
        Layer.JOB,
        Scope.POD,
        "Prometheus cannot scrape the pod's trainguard exporter (up == 0)",
        "A trainguard sidecar is unreachable: this pod's signals are blind",
        "the exporter crashed or is overloaded, or the pod's network is broken; a node that is down "
        "raises GPUNodeDown from its node state, which silences this",
    ),
    # ---- P3 ----
    Alert(
        "GPUPowerCapped",
        "P3",
        "10m",
        Layer.HARDWARE,
        Scope.GPU,
        "power draw at or above the threshold share of the enforced power limit",
        "GPU runs at its power limit: its clocks are capped",
        "normal under heavy load; a lowered limit (nvidia-smi -pl) or power-brake slows the whole job",
        params=(_p("ratio", 0.98, "power draw / enforced power limit"),),
    ),
    Alert(
        "GPUMemoryHigh",
        "P3",
        "5m",
        Layer.HARDWARE,
        Scope.GPU,
        "framebuffer used ratio at or above the threshold",
        "GPU memory use is high",
        "normal for large models; watch for growth",
        params=(_p("ratio", 0.70, "used / total framebuffer"),),
    ),
)

ALERTS_BY_NAME: dict[str, Alert] = {a.name: a for a in ALERTS}
ALERT_NAMES: tuple[str, ...] = tuple(a.name for a in ALERTS)

MODE_PROFILES: dict[Mode, dict[str, dict[str, float]]] = {
    Mode.TRAINING: {},
    # a fine-tune is short and checkpoints rarely: allow a longer gap between full checkpoints
    Mode.FINETUNING: {"CheckpointStale": {"factor": 3}},
    # inference servers pre-allocate most of the GPU for their KV cache (vLLM takes 90% by default):
    # high memory is their normal state, so only the edge of the card is news
    Mode.INFERENCE: {
        "GPUMemoryHigh": {"ratio": 0.95},
        "GPUMemoryPressure": {"ratio": 0.97},
        "GPUMemoryCritical": {"ratio": 0.99},
        "GPUMemoryHang": {"ratio": 0.95, "utilization": 5},
        "GPUMemorySustainedHigh": {"ratio": 0.98},
        "GPUMemoryGrowthPredicted": {"ratio": 0.95},
    },
}
"""Each mode's thresholds where they differ from the catalogue; an AlertPolicy overrides both."""
