"""Seeded synthetic traces for the correlation rules: a data-parallel job of 8 ranks (one GPU each, 4 per
node) sampled every 15 s from 30 minutes before the alert to 2.5 minutes after, with a fault starting
200 to 800 s before the alert.

The model. Each rank's step has compute c (0.8 s), data wait d (0.05 s) and its own collective time
a (0.15 s). Training is synchronous: the job's step time is T = max over ranks of (c + d) + a, every
rank's all-reduce share is (T - c - d) / T (a fast rank waits for the slowest in the collective), and
throughput per GPU is 4000 tokens / T. GPU utilisation is c / T; the SM clock is 1980 MHz; loss falls
slowly with small noise; grad norm is log-normal around 1. Every signal has a few % of seeded noise.
Faults, one per scenario:
  data-pipeline      d += 0.3..0.6 s and the loss oscillates 8-20x its noise (a bad shard, a slow loader)
  model-exploding    grad norm x20..500 and rising, loss rising, sometimes a non-finite loss
  model-vanishing    grad norm falls to 1e-7..5e-5
  throughput-data    d += 0.3..0.7 s, the loss unaffected
  throughput-comm    a += 0.3..0.8 s with NIC loss 0.1-1% on one node, or ECN marking x100; p99 up
  throughput-gpu     c x1.25..1.8 on every GPU, SM clock down by as much, thermal or power throttle bits
  throughput-host    c += 0.3..0.6 s with kswapd 20-60% and host memory 95%, or disk latency 0.3-1 s
  hardware           one GPU: a fatal XID, a DBE increase, a pending row remap or GPU lost, then its pod
                     fails (an event) and training stops (the training series end)
  mixed-data-gpu     d += 0.3..0.5 s and c x1.3..1.6 with the clock down: both shares are expected
  straggler          one rank's c x1.15..2.0 (with its SM clock down, or CPU-bound with the clock normal)
Edge scenarios, faults near or under the rules' thresholds (EDGE): straggler-slight (one rank's c
x1.03..1.15), gpu-slight (c x1.1..1.3 with a power cap: a drop of 7-19% around the 15% threshold),
data-pipeline-faint (d += 0.2..0.4 s, a loss wave of 2-8x its noise; the rule wants 3x its baseline stddev).
Must-not-fire scenarios (expected: no cause): healthy; noisy (2.5x noise, one grad-norm spike, one loss
spike); loss-oscillation-only (no data wait); hardware-without-fault (a pending row remap or a few SBEs,
training fine); fault-without-hardware (an OOM-killed pod, training stops); benign-xid (XID 13 or 31 and
a failed pod); small-slowdown (throughput 5-10% down); uneven-ranks (every rank's compute differs by up
to 10%, no single outlier).
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from trainguard.catalog import FATAL_XIDS
from trainguard.diagnosis import Cause, JobEvent, Series, Snapshot, diagnose, labels_of
from trainguard.diagnosis import signals as sig

AT = 1_760_000_000.0
STEP_S = 15.0
START = AT - 1800.0
END = AT + 150.0
RANKS = 8
TOKENS = 4000.0
JOB, NS = "llm", "research"


def pod_name(rank: int) -> str:
    return f"{JOB}-worker-{rank}"


def node_name(rank: int) -> str:
    return f"gpu-node-{rank // 4}"


@dataclass(frozen=True)
class Expected:
    causes: frozenset[Cause]
    node: str = ""
    gpu: str = ""
    pod: str = ""


@dataclass(frozen=True)
class Trace:
    scenario: str
    seed: int
    snapshot: Snapshot
    expected: Expected


@dataclass
class _Rank:
    c: float = 0.8
    d: float = 0.05
    a: float = 0.15
    clock: float = 1980.0
    throttle: int = 0
    temp: float = 65.0
    kswapd: float = 0.005
    host_mem: float = 0.5
    disk: float = 0.01
    loss_noise: float = 0.01
    loss_wave: float = 0.0
    loss_drift: float = 0.0
    grad: float = 1.0
    nonfinite: float = 0.0
    packet_loss: float = 0.00001
    ecn_rate: float = 0.1
    xid: int = 0
    dbe: float = 0.0
    sbe: float = 0.0
    remap_pending: int = 0
    lost: int = 0
    alive: bool = True


@dataclass
class _Plan:
    """What a scenario changes: `apply(rank, state, t)` after the onset, and its events and expectation."""

    onset: float
    apply: Callable[[int, _Rank, float], None] = lambda r, s, t: None
    events: list[JobEvent] = field(default_factory=list)
    expected: Expected = field(default_factory=lambda: Expected(frozenset()))
    noise: float = 1.0
    before: Callable[[int, _Rank], None] = lambda r, s: None
    alert: str = ""
    spike: bool = False


def generate(scenario: str, seed: int) -> Trace:
    rng = random.Random(f"{scenario}/{seed}")
    plan = SCENARIOS[scenario](rng)
    pts: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = {}

    def put(metric: str, rank: int | None, t: float, v: float, **extra: str) -> None:
        labels = {"namespace": NS, "training_job": JOB}
        if rank is not None:
            labels |= {"pod": pod_name(rank), "node": node_name(rank)}
        pts.setdefault((metric, labels_of(labels | extra)), []).append((t, v))

    def jitter(v: float, rel: float = 0.02) -> float:
        return v * (1 + rng.gauss(0, rel * plan.noise))

    ecn = [0.0] * RANKS
    sbe = [0.0] * RANKS
    dbe = [0.0] * RANKS
    nonfinite = [0.0] * RANKS
    n = int((END - START) / STEP_S) + 1
    spike_at = START + STEP_S * rng.randrange(n // 2, n - 4)
    for i in range(n):
        t = START + i * STEP_S
        states = [_Rank() for _ in range(RANKS)]
        for r, s in enumerate(states):
            plan.before(r, s)
            if t >= plan.onset:
                plan.apply(r, s, t)
        busy = [jitter(s.c) + jitter(s.d, 0.05) for s in states]
        step = max(busy) + max(jitter(s.a, 0.05) for s in states)
        for r, s in enumerate(states):
            gpu = {
                "gpu": str(r % 4),
                "UUID": f"GPU-{r:04d}",
                "modelName": "NVIDIA H100",
                "Hostname": node_name(r),
            }
            if s.alive:
                put(sig.THROUGHPUT, r, t, TOKENS / step)
                put(sig.DATA_WAIT, r, t, max(0.0, busy[r] - jitter(s.c)) / step if s.d else 0.0)
                put(sig.ALLREDUCE, r, t, (step - busy[r]) / step)
                loss = 2.5 - 0.0001 * (t - START) + s.loss_drift * (t - plan.onset) / 100
                loss += rng.gauss(0, s.loss_noise * plan.noise) + s.loss_wave * math.sin(t / 37.0 + r)
                if plan.spike and t == spike_at:
                    loss += 0.2
                put(sig.LOSS, r, t, loss)
                grad = (
                    s.grad
                    * math.exp(rng.gauss(0, 0.1 * plan.noise))
                    * (5 if plan.spike and t == spike_at else 1)
                )
                put(sig.GRAD_NORM, r, t, grad)
                nonfinite[r] += s.nonfinite
                put(sig.NONFINITE_LOSS, r, t, nonfinite[r])
                put(sig.LAST_STEP_AT, r, t, t - rng.uniform(0, step))
            put(sig.GPU_UTIL, r, t, min(100.0, 100 * jitter(s.c) / step) if s.alive else 0.0, **gpu)
            put(sig.SM_CLOCK, r, t, jitter(s.clock, 0.003), **gpu)
            put(sig.THROTTLE, r, t, float(s.throttle), **gpu)
            put(sig.GPU_TEMP, r, t, jitter(s.temp, 0.01), **gpu)
            used = jitter(60000.0, 0.002)
            put(sig.FB_USED, r, t, used, **gpu)
            put(sig.FB_FREE, r, t, 81559 - used, **gpu)
            put(sig.XID, r, t, float(s.xid), **gpu)
            dbe[r] += s.dbe
            sbe[r] += s.sbe
            put(sig.ECC_DBE, r, t, dbe[r], **gpu)
            put(sig.ECC_SBE, r, t, sbe[r], **gpu)
            put(sig.ROW_REMAP_PENDING, r, t, float(s.remap_pending), **gpu)
            put(sig.GPU_LOST, r, t, float(s.lost), **gpu)
            put(sig.KSWAPD, r, t, abs(jitter(s.kswapd, 0.1)))
            put(sig.HOST_MEMORY, r, t, min(1.0, jitter(s.host_mem, 0.01)))
            put(sig.DISK_WRITE_LATENCY, r, t, abs(jitter(s.disk, 0.1)), device="nvme0n1")
            put(sig.PACKET_LOSS, r, t, abs(jitter(s.packet_loss, 0.2)), interface="eth0")
            ecn[r] += s.ecn_rate * STEP_S * abs(jitter(1.0, 0.2))
            put(sig.ECN_MARKED, r, t, ecn[r], device="mlx5_0", port="1")
        if any(s.alive for s in states):
            put(sig.COLLECTIVE_P99, None, t, jitter(1.3 * (step - min(busy)), 0.05))
    series = tuple(Series(m, labels, tuple(p)) for (m, labels), p in pts.items())
    snap = Snapshot(AT, series, tuple(plan.events), plan.alert)
    return Trace(scenario, seed, snap, plan.expected)


def _onset(rng: random.Random) -> float:
    return AT - rng.uniform(200, 800)


def _exp(*causes: Cause, **where: str) -> Expected:
    return Expected(frozenset(causes), **where)


def _healthy(rng: random.Random) -> _Plan:
    return _Plan(_onset(rng))


def _noisy(rng: random.Random) -> _Plan:
    return _Plan(_onset(rng), noise=2.5, spike=True)


def _data_pipeline(rng: random.Random) -> _Plan:
    extra, wave = rng.uniform(0.3, 0.6), rng.uniform(0.08, 0.2)

    def apply(r: int, s: _Rank, t: float) -> None:
        s.d += extra
        s.loss_wave = wave

    return _Plan(
        _onset(rng),
        apply,
        expected=_exp(Cause.DATA_PIPELINE, Cause.THROUGHPUT_DATA),
        alert="TrainingLossOscillation",
    )


def _loss_oscillation_only(rng: random.Random) -> _Plan:
    wave = rng.uniform(0.08, 0.2)

    def apply(r: int, s: _Rank, t: float) -> None:
        s.loss_wave = wave

    return _Plan(_onset(rng), apply, alert="TrainingLossOscillation")


def _model_exploding(rng: random.Random) -> _Plan:
    factor, nan = rng.uniform(20, 500), rng.random() < 0.5
    onset = _onset(rng)

    def apply(r: int, s: _Rank, t: float) -> None:
        s.grad = factor * (1 + (t - onset) / 300)
        s.loss_drift = 0.5
        s.nonfinite = 1.0 if nan and r == 0 and t > AT - 60 else 0.0

    return _Plan(onset, apply, expected=_exp(Cause.MODEL_HYPERPARAMETERS), alert="GradientExplosion")


def _model_vanishing(rng: random.Random) -> _Plan:
    level = 10 ** rng.uniform(-7, math.log10(5e-5))

    def apply(r: int, s: _Rank, t: float) -> None:
        s.grad = level

    return _Plan(_onset(rng), apply, expected=_exp(Cause.MODEL_HYPERPARAMETERS), alert="GradientVanishing")


def _throughput_data(rng: random.Random) -> _Plan:
    extra = rng.uniform(0.3, 0.7)

    def apply(r: int, s: _Rank, t: float) -> None:
        s.d += extra

    return _Plan(_onset(rng), apply, expected=_exp(Cause.THROUGHPUT_DATA), alert="TrainingThroughputDrop")


def _throughput_comm(rng: random.Random) -> _Plan:
    extra, variant, node = rng.uniform(0.3, 0.8), rng.choice(["nic", "ecn"]), rng.randrange(2)
    loss = rng.uniform(0.001, 0.01)

    def apply(r: int, s: _Rank, t: float) -> None:
        s.a += extra
        if variant == "nic" and r // 4 == node:
            s.packet_loss = loss
        if variant == "ecn":
            s.ecn_rate = 10.0 + rng.uniform(0, 30)

    return _Plan(
        _onset(rng), apply, expected=_exp(Cause.THROUGHPUT_COMMUNICATION), alert="TrainingThroughputDrop"
    )


def _throughput_gpu(rng: random.Random) -> _Plan:
    factor, bits = rng.uniform(1.25, 1.8), rng.choice([0x40, 0x20, 0x4, 0x80])

    def apply(r: int, s: _Rank, t: float) -> None:
        s.c *= factor
        s.clock /= factor
        s.throttle = bits
        s.temp = 88.0 if bits in (0x40, 0x20) else s.temp

    return _Plan(_onset(rng), apply, expected=_exp(Cause.THROUGHPUT_GPU), alert="TrainingThroughputDrop")


def _throughput_host(rng: random.Random) -> _Plan:
    extra, variant = rng.uniform(0.3, 0.6), rng.choice(["swap", "disk"])
    kswapd, disk = rng.uniform(0.2, 0.6), rng.uniform(0.3, 1.0)

    def apply(r: int, s: _Rank, t: float) -> None:
        s.c += extra
        if variant == "swap":
            s.kswapd, s.host_mem = kswapd, 0.95
        else:
            s.disk = disk

    return _Plan(_onset(rng), apply, expected=_exp(Cause.THROUGHPUT_HOST), alert="TrainingThroughputDrop")


def _mixed_data_gpu(rng: random.Random) -> _Plan:
    extra, factor = rng.uniform(0.3, 0.5), rng.uniform(1.3, 1.6)

    def apply(r: int, s: _Rank, t: float) -> None:
        s.d += extra
        s.c *= factor
        s.clock /= factor
        s.throttle = 0x40

    both = _exp(Cause.THROUGHPUT_DATA, Cause.THROUGHPUT_GPU)
    return _Plan(_onset(rng), apply, expected=both, alert="TrainingThroughputDrop")


def _small_slowdown(rng: random.Random) -> _Plan:
    extra = rng.uniform(0.05, 0.1)

    def apply(r: int, s: _Rank, t: float) -> None:
        s.d += extra

    return _Plan(_onset(rng), apply, alert="TrainingThroughputDeviation")


def _hardware(rng: random.Random) -> _Plan:
    rank, variant = rng.randrange(RANKS), rng.choice(["xid", "dbe", "remap", "lost"])
    onset = _onset(rng)
    xid = rng.choice(FATAL_XIDS)
    fail_at = onset + rng.uniform(0, 30)

    def apply(r: int, s: _Rank, t: float) -> None:
        if r == rank:
            if variant == "xid":
                s.xid = xid
            elif variant == "dbe":
                s.dbe = 1.0 if t < onset + STEP_S else 0.0
            elif variant == "remap":
                s.remap_pending = 1
            else:
                s.lost = 1
        if t > fail_at + 30:
            s.alive = False

    events = [JobEvent(fail_at, "Failed", pod_name(rank), node_name(rank), "Error: exit code 1")]
    where = {"node": node_name(rank), "gpu": str(rank % 4)}
    return _Plan(onset, apply, events, _exp(Cause.HARDWARE, **where), alert="TrainingJobStalled")


def _hardware_without_fault(rng: random.Random) -> _Plan:
    rank, variant = rng.randrange(RANKS), rng.choice(["remap", "sbe"])

    def apply(r: int, s: _Rank, t: float) -> None:
        if r == rank:
            if variant == "remap":
                s.remap_pending = 1
            else:
                s.sbe = 0.2

    return _Plan(_onset(rng), apply, alert="GPURowRemapPending" if variant == "remap" else "")


def _fault_without_hardware(rng: random.Random) -> _Plan:
    rank, onset = rng.randrange(RANKS), _onset(rng)

    def apply(r: int, s: _Rank, t: float) -> None:
        if t > onset + 30:
            s.alive = False

    events = [JobEvent(onset, "OOMKilled", pod_name(rank), node_name(rank))]
    return _Plan(onset, apply, events, alert="TrainingJobStalled")


def _benign_xid(rng: random.Random) -> _Plan:
    rank, onset, code = rng.randrange(RANKS), _onset(rng), rng.choice([13, 31, 43])

    def apply(r: int, s: _Rank, t: float) -> None:
        if r == rank:
            s.xid = code
        if t > onset + 30:
            s.alive = False

    events = [JobEvent(onset, "Failed", pod_name(rank), node_name(rank), "illegal memory access")]
    return _Plan(onset, apply, events, alert="TrainingJobStalled")


def _straggler(rng: random.Random) -> _Plan:
    rank, factor, clocked = rng.randrange(RANKS), rng.uniform(1.15, 2.0), rng.random() < 0.5

    def apply(r: int, s: _Rank, t: float) -> None:
        if r == rank:
            s.c *= factor
            if clocked:
                s.clock /= factor
                s.throttle = 0x40

    where = {"pod": pod_name(rank), "node": node_name(rank)}
    return _Plan(_onset(rng), apply, expected=_exp(Cause.STRAGGLER, **where), alert="TrainingThroughputDrop")


def _straggler_slight(rng: random.Random) -> _Plan:
    rank, factor = rng.randrange(RANKS), rng.uniform(1.03, 1.15)

    def apply(r: int, s: _Rank, t: float) -> None:
        if r == rank:
            s.c *= factor

    where = {"pod": pod_name(rank), "node": node_name(rank)}
    return _Plan(_onset(rng), apply, expected=_exp(Cause.STRAGGLER, **where))


def _gpu_slight(rng: random.Random) -> _Plan:
    factor = rng.uniform(1.1, 1.3)

    def apply(r: int, s: _Rank, t: float) -> None:
        s.c *= factor
        s.clock /= factor
        s.throttle = 0x4

    return _Plan(_onset(rng), apply, expected=_exp(Cause.THROUGHPUT_GPU), alert="TrainingThroughputDeviation")


def _data_pipeline_faint(rng: random.Random) -> _Plan:
    extra, wave = rng.uniform(0.2, 0.4), rng.uniform(0.02, 0.08)

    def apply(r: int, s: _Rank, t: float) -> None:
        s.d += extra
        s.loss_wave = wave

    both = _exp(Cause.DATA_PIPELINE, Cause.THROUGHPUT_DATA)
    return _Plan(_onset(rng), apply, expected=both, alert="TrainingLossOscillation")


def _uneven_ranks(rng: random.Random) -> _Plan:
    spread = [rng.uniform(0.95, 1.05) for _ in range(RANKS)]

    def before(r: int, s: _Rank) -> None:
        s.c *= spread[r]

    return _Plan(_onset(rng), before=before)


SCENARIOS: dict[str, Callable[[random.Random], _Plan]] = {
    "healthy": _healthy,
    "noisy": _noisy,
    "data-pipeline": _data_pipeline,
    "loss-oscillation-only": _loss_oscillation_only,
    "model-exploding": _model_exploding,
    "model-vanishing": _model_vanishing,
    "throughput-data": _throughput_data,
    "throughput-comm": _throughput_comm,
    "throughput-gpu": _throughput_gpu,
    "throughput-host": _throughput_host,
    "mixed-data-gpu": _mixed_data_gpu,
    "small-slowdown": _small_slowdown,
    "hardware": _hardware,
    "hardware-without-fault": _hardware_without_fault,
    "fault-without-hardware": _fault_without_hardware,
    "benign-xid": _benign_xid,
    "straggler": _straggler,
    "uneven-ranks": _uneven_ranks,
    "straggler-slight": _straggler_slight,
    "gpu-slight": _gpu_slight,
    "data-pipeline-faint": _data_pipeline_faint,
}

EDGE: frozenset[str] = frozenset({"straggler-slight", "gpu-slight", "data-pipeline-faint"})
"""Faults at or below what the rules are meant to see: they measure where recall ends, so the accuracy
test leaves them out and `python -m tests.diagnosis.accuracy` reports them apart."""


@functools.lru_cache(maxsize=512)
def trace(scenario: str, seed: int) -> Trace:
    """generate(), kept for the session: several rule tests read the same traces."""
    return generate(scenario, seed)


def causes(t: Trace) -> set[Cause]:
    return {f.cause for f in diagnose(t.snapshot)}
