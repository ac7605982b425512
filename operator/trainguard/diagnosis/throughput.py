"""A throughput drop split into where the step time went.

Throughput per GPU is inversely proportional to the step time T, so r = throughput now / before =
T0 / T1. The exporter gives the shares of step time spent waiting for data (w) and in collectives (a);
the rest (1 - w - a) is compute. In units of the new step time T1, the time the step gained is 1 - r,
and it splits exactly into data (w1 - w0 r), communication (a1 - a0 r) and compute
((1 - w1 - a1) - (1 - w0 - a0) r). Compute is then shared between the GPU and the host by their own
signals (SM clock, throttle reasons, memory; kswapd, disk latency). GPU utilisation alone decides
nothing: it falls whenever the GPU waits, whatever it waits for.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.diagnosis import signals as sig
from trainguard.diagnosis.model import Cause, Evidence, Finding, Snapshot
from trainguard.diagnosis.robust import mean, median

DROP_RATIO = 0.15
"""The catalogue's TrainingThroughputDeviation: more than 15% from the baseline."""
MIN_SHARE = 0.2
"""A component that explains less than this share of the lost step time is not named."""
PACKET_LOSS_HIGH = 0.0005
"""The catalogue's NetworkPacketLoss (0.05%)."""
KSWAPD_HIGH = 0.05
DISK_LATENCY_HIGH = 0.2
MEMORY_PRESSURE = 0.95


@dataclass(frozen=True)
class Split:
    drop: float
    shares: dict[Cause, float]
    evidence: dict[Cause, list[Evidence]]


def _before_now(snap: Snapshot, metric: str) -> tuple[float, float] | None:
    before, now = snap.pooled(metric, snap.baseline), snap.pooled(metric, snap.recent)
    if not before or not now:
        return None
    return median(before), mean(now)


def split(snap: Snapshot) -> Split | None:
    """The drop and each component's share of the lost step time, or None when there is no drop (or no
    data to judge it)."""
    thr = _before_now(snap, sig.THROUGHPUT)
    if thr is None or thr[0] <= 0:
        return None
    thr0, thr1 = thr
    r = thr1 / thr0
    if 1 - r < DROP_RATIO:
        return None
    w0, w1 = _before_now(snap, sig.DATA_WAIT) or (0.0, 0.0)
    a0, a1 = _before_now(snap, sig.ALLREDUCE) or (0.0, 0.0)
    raw = {
        Cause.THROUGHPUT_DATA: w1 - w0 * r,
        Cause.THROUGHPUT_COMMUNICATION: a1 - a0 * r,
    }
    compute = (1 - w1 - a1) - (1 - w0 - a0) * r
    gpu_score, gpu_ev = _gpu(snap)
    host_score, host_ev = _host(snap)
    if gpu_score + host_score > 0:
        raw[Cause.THROUGHPUT_GPU] = compute * gpu_score / (gpu_score + host_score)
        raw[Cause.THROUGHPUT_HOST] = compute * host_score / (gpu_score + host_score)
    positive = {c: max(v, 0.0) for c, v in raw.items()}
    total = max(sum(positive.values()), 1 - r, 1e-9)
    shares = {c: v / total for c, v in positive.items()}
    evidence: dict[Cause, list[Evidence]] = {
        Cause.THROUGHPUT_DATA: [Evidence(sig.DATA_WAIT, w1, w0, note="share of step time waiting for data")],
        Cause.THROUGHPUT_COMMUNICATION: [
            Evidence(sig.ALLREDUCE, a1, a0, note="share of step time in collectives"),
            *_network(snap),
        ],
        Cause.THROUGHPUT_GPU: gpu_ev,
        Cause.THROUGHPUT_HOST: host_ev,
    }
    return Split(1 - r, shares, evidence)


def throughput_drop(snap: Snapshot) -> list[Finding]:
    result = split(snap)
    if result is None:
        return []
    thr = _before_now(snap, sig.THROUGHPUT)
    assert thr is not None
    head = Evidence(sig.THROUGHPUT, thr[1], thr[0], note=f"{result.drop:.0%} below the baseline median")
    where = {
        Cause.THROUGHPUT_DATA: "waiting for data (data loader, storage)",
        Cause.THROUGHPUT_COMMUNICATION: "collectives (all-reduce, network)",
        Cause.THROUGHPUT_GPU: "the GPU computing slower (clocks, throttling, memory)",
        Cause.THROUGHPUT_HOST: "the host (memory pressure and swapping, disk)",
    }
    findings = []
    for cause, share in result.shares.items():
        if share < MIN_SHARE:
            continue
        support = result.evidence[cause]
        confidence = min(0.95, 0.45 + 0.4 * share + 0.05 * max(0, len(support) - 1))
        findings.append(
            Finding(
                cause,
                round(confidence, 3),
                f"throughput is {result.drop:.0%} below its baseline; {share:.0%} of the lost step time "
                f"went to {where[cause]}",
                (head, *support),
                share=round(share, 3),
            )
        )
    return findings


def _network(snap: Snapshot) -> list[Evidence]:
    evidence = []
    p99 = _before_now(snap, sig.COLLECTIVE_P99)
    if p99 is not None and p99[1] > 1.5 * p99[0]:
        evidence.append(Evidence(sig.COLLECTIVE_P99, p99[1], p99[0], note="collective latency p99 rose"))
    for s in snap.of(sig.PACKET_LOSS):
        now = s.values(*snap.recent)
        if now and max(now) > PACKET_LOSS_HIGH:
            evidence.append(
                Evidence(sig.PACKET_LOSS, max(now), PACKET_LOSS_HIGH, s.labels, note="NIC packet loss")
            )
    before_rate = _rate(snap, sig.ECN_MARKED, snap.baseline)
    now_rate = _rate(snap, sig.ECN_MARKED, snap.recent)
    if now_rate > max(10 * before_rate, 1.0):
        evidence.append(Evidence(sig.ECN_MARKED, now_rate, before_rate, note="ECN-marked packets per second"))
    return evidence


def network_trouble(snap: Snapshot) -> bool:
    """NIC loss or ECN marking in the recent span: the network itself, not a rank waited for."""
    return any(e.metric in (sig.PACKET_LOSS, sig.ECN_MARKED) for e in _network(snap))


def _rate(snap: Snapshot, metric: str, span: tuple[float, float]) -> float:
    total, seconds = 0.0, 0.0
    for s in snap.of(metric):
        pts = [(t, v) for t, v in s.points if span[0] <= t <= span[1]]
        if len(pts) >= 2:
            total += max(pts[-1][1] - pts[0][1], 0.0)
            seconds = max(seconds, pts[-1][0] - pts[0][0])
    return total / seconds if seconds > 0 else 0.0


def _gpu(snap: Snapshot) -> tuple[float, list[Evidence]]:
    score, evidence = 0.0, []
    worst: tuple[float, Evidence] | None = None
    for s in snap.of(sig.SM_CLOCK):
        before, now = s.values(*snap.baseline), s.values(*snap.recent)
        if before and now and median(before) > 0:
            ratio = mean(now) / median(before)
            if ratio < 0.9 and (worst is None or ratio < worst[0]):
                ev = Evidence(sig.SM_CLOCK, mean(now), median(before), s.labels, note="SM clock fell")
                worst = (ratio, ev)
    if worst is not None:
        score += 1 - worst[0]
        evidence.append(worst[1])
    reasons: set[str] = set()
    for s in snap.of(sig.THROTTLE):
        for v in s.values(*snap.recent):
            reasons |= {name for bit, name in sig.THROTTLE_SLOWDOWN_BITS.items() if int(v) & bit}
    if reasons:
        score += 0.2
        evidence.append(Evidence(sig.THROTTLE, 1.0, note="throttled: " + ", ".join(sorted(reasons))))
    used, free = snap.pooled(sig.FB_USED, snap.recent), snap.pooled(sig.FB_FREE, snap.recent)
    if used and free and mean(used) / (mean(used) + mean(free)) >= MEMORY_PRESSURE:
        score += 0.2
        ratio = mean(used) / (mean(used) + mean(free))
        evidence.append(Evidence(sig.FB_USED, mean(used), note=f"framebuffer {ratio:.0%} used"))
    util = _before_now(snap, sig.GPU_UTIL)
    if score > 0 and util is not None:
        evidence.append(Evidence(sig.GPU_UTIL, util[1], util[0], note="utilisation"))
    return score, evidence


def _host(snap: Snapshot) -> tuple[float, list[Evidence]]:
    score, evidence = 0.0, []
    kswapd = _before_now(snap, sig.KSWAPD)
    if kswapd is not None and kswapd[1] > KSWAPD_HIGH and kswapd[1] > kswapd[0] + 0.03:
        score += min(1.0, kswapd[1] * 2)
        evidence.append(Evidence(sig.KSWAPD, kswapd[1], kswapd[0], note="kswapd busy: the host swaps"))
        mem = _before_now(snap, sig.HOST_MEMORY)
        if mem is not None:
            evidence.append(Evidence(sig.HOST_MEMORY, mem[1], mem[0], note="host memory used"))
    disk = _before_now(snap, sig.DISK_WRITE_LATENCY)
    if disk is not None and disk[1] > DISK_LATENCY_HIGH and disk[1] > 3 * disk[0]:
        score += 0.5
        evidence.append(Evidence(sig.DISK_WRITE_LATENCY, disk[1], disk[0], note="disk write latency"))
    return score, evidence
