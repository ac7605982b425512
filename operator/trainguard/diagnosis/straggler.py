"""A straggler: one rank (pod) far from its peers. In synchronous training every rank runs at the slowest
one's pace, so job throughput says nothing about which; the tell-tale is per rank: its peers wait for it
inside the collective, so the straggler spends the most time per step outside collectives.

Where the catalogue's recording rules run (the series OWN_EXCESS and OWN_SPREAD exist), the report judges
exactly as the StragglerRank alert does (render/prometheus.py, docs/diagnosis.md): a rank whose excess
was above the threshold, and above OUTLIER_Z robust deviations of the gang's, for `held_seconds` of the
last HELD_WINDOW_S; so a report names the rank the alert names. Without those series (a trainer that
reports no step or collective time, data from before them) each per-rank signal gets a robust outlier
test: median and MAD of the peers, |z| > Z_LIMIT and at least MIN_GAP from the median."""

from __future__ import annotations

import re

from trainguard.catalog import ALERTS_BY_NAME
from trainguard.diagnosis import signals as sig
from trainguard.diagnosis.model import Cause, Evidence, Finding, Series, Snapshot
from trainguard.diagnosis.robust import mean, median, robust_z

STRAGGLER_ALERT = "StragglerRank"
_PARAMS = {p.name: p.default for p in ALERTS_BY_NAME[STRAGGLER_ALERT].params}
SLOWDOWN = _PARAMS["slowdown"]
HELD_S = _PARAMS["held_seconds"]
HELD_WINDOW_S = 600.0
"""The alert's window (render/prometheus.py STRAGGLER_WINDOW; a test pins the two)."""
OUTLIER_Z = 3.5
"""The alert's OUTLIER_Z (render/prometheus.py; a test pins the two)."""
SAMPLE_S = 15.0
"""Each recorded sample is one interval of evidence: the report fetches at this step, the default scrape."""
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


def slow_seconds(
    excess: Series,
    spread: dict[float, float],
    at: float,
    *,
    slowdown: float = SLOWDOWN,
    window_s: float = HELD_WINDOW_S,
    sample_s: float = SAMPLE_S,
) -> float:
    """Seconds of (at - window_s, at] in which the rank was slow: its recorded excess above `slowdown` and
    above OUTLIER_Z times the gang's spread at that time (absent: 0), one sample per `sample_s`, as the
    alert counts them."""
    slow = [
        v
        for t, v in excess.points
        if at - window_s < t <= at and v > slowdown and v > OUTLIER_Z * spread.get(t, 0.0)
    ]
    return len(slow) * sample_s


def held_ranks(
    snap: Snapshot, slowdown: float = SLOWDOWN, held_s: float = HELD_S
) -> list[tuple[Series, float, float]]:
    """StragglerRank's decision on the snapshot: each rank slow for at least `held_s` of the window, with
    those seconds and its median excess over the window, slowest first."""
    spreads: dict[tuple[str, str], dict[float, float]] = {
        (s.label("namespace"), s.label("training_job")): dict(s.points) for s in snap.of(sig.OWN_SPREAD)
    }
    out = []
    for s in snap.of(sig.OWN_EXCESS):
        spread = spreads.get((s.label("namespace"), s.label("training_job")), {})
        seconds = slow_seconds(s, spread, snap.at, slowdown=slowdown)
        if seconds >= held_s:
            out.append((s, seconds, median(s.values(snap.at - HELD_WINDOW_S, snap.at))))
    return sorted(out, key=lambda x: (-x[1], -x[2], x[0].label("pod")))


def _held_findings(snap: Snapshot) -> list[Finding]:
    findings = []
    for s, seconds, excess in held_ranks(snap):
        pod, node = s.label("pod"), s.label("node")
        evidence = [
            Evidence(
                sig.OWN_EXCESS,
                excess,
                0.0,
                s.labels,
                note=f"its time outside collectives per step is {excess:.0%} over the gang's median (median of "
                f"the last {HELD_WINDOW_S / 60:.0f} minutes), and {SLOWDOWN:.0%} or more for {seconds:.0f} s "
                "of them: its peers wait for it (the StragglerRank rule's series and test)",
            )
        ]
        # what else marks this rank (its GPU's clock, its throughput), from the per-signal tests
        for metric, direction, note in _CHECKS:
            for other, value, centre, z in _outliers(snap, metric, direction):
                if other.label("pod") == pod:
                    evidence.append(
                        Evidence(metric, value, centre, other.labels, note=f"{note} (robust z {z:.1f})")
                    )
        findings.append(
            Finding(
                Cause.STRAGGLER,
                0.9,
                f"rank {rank_of(pod)} (pod {pod or '?'} on node {node or '?'}) is {excess:.0%} slower than its "
                "peers and holds the job back",
                tuple(evidence),
                node=node,
                pod=pod,
            )
        )
    return findings


def straggler(snap: Snapshot) -> list[Finding]:
    """The ranks StragglerRank names, where its series exist and name one; else the per-signal outlier
    tests (a GPU whose clock is held far below its peers' is named even when the ranks' step times do
    not show it yet)."""
    if snap.of(sig.OWN_EXCESS):
        held = _held_findings(snap)
        if held:
            return held
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
