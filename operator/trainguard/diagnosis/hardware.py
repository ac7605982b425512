"""Hardware: a GPU's ECC, XID, retired-page, row-remap or lost signal alongside a job fault, naming
the node and the GPU. A signal without a job fault is the node's business, not this job's cause; a job
fault without one is not blamed on hardware; an XID outside the fatal set (13, 31, 43: usually the
application's own fault) is not hardware evidence."""

from __future__ import annotations

import itertools

from trainguard.diagnosis import signals as sig
from trainguard.diagnosis.model import Cause, Evidence, Finding, Series, Snapshot

JOB_FAULT_ALERTS = frozenset(
    {
        "TrainingJobStalled",
        "TrainingLossNonFinite",
        "TrainingInterrupted",
        "TrainingThroughputDrop",
        "GPUOutOfMemory",
    }
)
"""Alerts that are themselves a job fault (the operator's TrainingInterrupted included)."""

_STRONG = 0.9
_WEAK = 0.65


def _gpu_key(s: Series) -> tuple[str, str]:
    node = s.label("node") or s.label("Hostname")
    gpu = s.label("gpu") or s.label("UUID")
    return node, gpu


def _signals(snap: Snapshot) -> dict[tuple[str, str], list[tuple[float, float, Evidence]]]:
    """Per (node, gpu): (first time seen, weight, evidence) for each hardware signal in the related span."""
    start, end = snap.related
    found: dict[tuple[str, str], list[tuple[float, float, Evidence]]] = {}

    def add(
        s: Series, at: float, weight: float, value: float, note: str, *, ref: float | None = None
    ) -> None:
        found.setdefault(_gpu_key(s), []).append((at, weight, Evidence(s.metric, value, ref, s.labels, note)))

    for metric, weight, what in (
        (sig.ECC_DBE, _STRONG, "double-bit ECC errors"),
        (sig.UNCORRECTABLE_REMAPPED_ROWS, _STRONG, "rows remapped for uncorrectable errors"),
        (sig.RETIRED_DBE, _STRONG, "pages retired for double-bit errors"),
        (sig.ECC_SBE, _WEAK, "single-bit ECC errors"),
    ):
        for s in snap.of(metric):
            pts = [(t, v) for t, v in s.points if start - 60 <= t <= end]
            for (_, a), (t, b) in itertools.pairwise(pts):
                if b > a and (metric != sig.ECC_SBE or b - a >= 10):
                    add(s, t, weight, b - a, f"{what}: +{b - a:g}", ref=a)
                    break
    for metric, weight, what in (
        (sig.ROW_REMAP_FAILURE, _STRONG, "a row could not be remapped"),
        (sig.GPU_LOST, _STRONG, "the GPU is lost (fell off the bus)"),
        (sig.ROW_REMAP_PENDING, _WEAK, "a row remap waits for a GPU reset"),
        (sig.RETIRED_PENDING, _WEAK, "a page waits to be retired"),
    ):
        for s in snap.of(metric):
            hit = next(((t, v) for t, v in s.points if start <= t <= end and v >= 1), None)
            if hit is not None:
                add(s, hit[0], weight, hit[1], what)
    for s in snap.of(sig.XID):
        hit = next(((t, v) for t, v in s.points if start <= t <= end and int(v) in sig.FATAL_XID_CODES), None)
        if hit is not None:
            add(s, hit[0], _STRONG, hit[1], f"fatal XID {int(hit[1])}")
    return found


def _job_faults(snap: Snapshot) -> list[tuple[float, str, str]]:
    """(time, what, node) of each job fault in the related span: fault events, a job-fault alert, a
    non-finite loss, steps that stopped."""
    start, end = snap.related
    faults = [
        (e.at, f"{e.reason} {e.pod}".strip(), e.node) for e in snap.events if e.fault and start <= e.at <= end
    ]
    if snap.alert in JOB_FAULT_ALERTS:
        faults.append((snap.at, f"alert {snap.alert}", ""))
    for s in snap.of(sig.NONFINITE_LOSS):
        pts = [(t, v) for t, v in s.points if start <= t <= end]
        for (_, a), (t, b) in itertools.pairwise(pts):
            if b > a:
                faults.append((t, "non-finite loss", s.label("node")))
                break
    for s in snap.of(sig.LAST_STEP_AT):
        pts = [(t, v) for t, v in s.points if start <= t <= end]
        if pts and pts[-1][0] - pts[-1][1] > 120:
            faults.append((pts[-1][1], f"steps stopped on {s.label('pod')}", s.label("node")))
    return faults


def hardware(snap: Snapshot) -> list[Finding]:
    faults = _job_faults(snap)
    if not faults:
        return []
    first_fault = min(t for t, _, _ in faults)
    fault_nodes = {n for _, _, n in faults if n}
    findings = []
    for (node, gpu), hits in _signals(snap).items():
        weight = max(w for _, w, _ in hits)
        first_hit = min(t for t, _, _ in hits)
        confidence = weight + 0.03 * (len(hits) - 1)
        if first_hit <= first_fault + 30:
            confidence += 0.03  # the hardware spoke first (or with it)
        if node in fault_nodes:
            confidence += 0.03  # the fault is on the same node
        what = "; ".join(sorted({f"{desc} at {t - snap.at:+.0f}s" for t, desc, _ in faults}))
        findings.append(
            Finding(
                Cause.HARDWARE,
                round(min(confidence, 0.98), 3),
                f"GPU {gpu or '?'} on node {node or '?'} reported hardware errors alongside the job fault "
                f"({what}): drain the node and restart from the last good checkpoint",
                tuple(e for _, _, e in sorted(hits, key=lambda h: h[0])),
                node=node,
                gpu=gpu,
            )
        )
    return findings
