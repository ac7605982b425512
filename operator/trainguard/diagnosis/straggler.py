"""A straggler: one rank (pod) or GPU far from its peers. In synchronous training every rank runs at
the slowest one's pace, so job throughput says nothing about which; the tell-tales are per rank: the
straggler spends the least time in collectives (its peers wait for it there), its throughput is lowest
where ranks measure their own, its GPU's SM clock is lowest. Each per-rank signal gets a robust
outlier test (median and MAD of the peers, |z| > Z_LIMIT and at least MIN_GAP from the median)."""

from __future__ import annotations

import re

from trainguard.diagnosis import signals as sig
from trainguard.diagnosis.model import Cause, Evidence, Finding, Series, Snapshot
from trainguard.diagnosis.robust import mean, median, robust_z

Z_LIMIT = 3.5
"""Iglewicz and Hoaglin's cut-off for the modified z-score."""
MIN_PEERS = 4
MIN_GAP = 0.1
"""Relative distance from the median below which an outlier is too small to matter."""
ABS_GAP = {sig.ALLREDUCE: 0.05}
"""For ratios near zero a relative gap means little: the all-reduce share must differ by 5 points."""

_CHECKS: tuple[tuple[str, int, str], ...] = (
    (sig.ALLREDUCE, -1, "spends the least time in collectives: its peers wait for it"),
    (sig.THROUGHPUT, -1, "the lowest throughput of the ranks"),
    (sig.SM_CLOCK, -1, "its GPU runs at the lowest SM clock"),
)


def rank_of(pod: str) -> str:
    """The rank from a pod name's last number (PyTorchJob, JobSet and StatefulSet names end in it)."""
    m = re.search(r"(\d+)$", pod)
    return m.group(1) if m else "?"


def _outliers(snap: Snapshot, metric: str, direction: int) -> list[tuple[Series, float, float, float]]:
    per: list[tuple[Series, float]] = []
    for s in snap.of(metric):
        now = s.values(*snap.recent)
        if now:
            per.append((s, mean(now)))
    if len(per) < MIN_PEERS:
        return []
    values = [v for _, v in per]
    centre = median(values)
    out = []
    for (s, v), z in zip(per, robust_z(values), strict=True):
        gap = abs(v - centre)
        enough = gap >= ABS_GAP[metric] if metric in ABS_GAP else gap >= MIN_GAP * abs(centre)
        if z * direction > Z_LIMIT and enough:
            out.append((s, v, centre, z))
    return out


def straggler(snap: Snapshot) -> list[Finding]:
    by_pod: dict[tuple[str, str], list[Evidence]] = {}
    gpus: dict[tuple[str, str], str] = {}

    def key(s: Series) -> tuple[str, str]:
        return (
            s.label("pod"),
            s.label("node") or s.label("Hostname"),
        )

    for metric, direction, note in _CHECKS:
        for s, value, centre, z in _outliers(snap, metric, direction):
            by_pod.setdefault(key(s), []).append(
                Evidence(
                    metric,
                    value,
                    centre,
                    s.labels,
                    note=f"{note} (robust z {z:.1f}, reference: peers' median)",
                )
            )
            if s.label("gpu"):
                gpus[key(s)] = s.label("gpu")
    if len(by_pod) > 1:  # several ranks apart: a split, not one straggler; keep the best supported
        best = max(len(v) for v in by_pod.values())
        by_pod = {k: v for k, v in by_pod.items() if len(v) == best}
        if len(by_pod) > 1:
            return []
    findings = []
    for (pod, node), evidence in by_pod.items():
        findings.append(
            Finding(
                Cause.STRAGGLER,
                round(min(0.95, 0.6 + 0.15 * (len(evidence) - 1)), 3),
                f"rank {rank_of(pod)} (pod {pod or '?'} on node {node or '?'}) is far from its peers and "
                "holds the job back",
                tuple(evidence),
                node=node,
                pod=pod,
                gpu=gpus.get((pod, node), ""),
            )
        )
    return findings
