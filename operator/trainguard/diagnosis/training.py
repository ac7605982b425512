"""Rules on the training signals: a data problem (grad norm normal, loss oscillating, data-loader wait
high) against a model or hyper-parameter problem (grad norm exploding or vanishing)."""

from __future__ import annotations

import itertools

from trainguard.diagnosis import signals as sig
from trainguard.diagnosis.model import Cause, Evidence, Finding, Snapshot
from trainguard.diagnosis.robust import mean, median, pstdev, spread

VANISHING_FLOOR = 1e-4
"""The catalogue's GradientVanishing default floor."""
EXPLODING_FACTOR = 10.0
"""A recent grad-norm peak this many times the baseline median (and past its noise) is an explosion."""
OSCILLATION_FACTOR = 3.0
"""Loss volatility (stddev per series in the recent span) beyond this many times its baseline."""
DATA_WAIT_HIGH = 0.2
"""The catalogue's DataLoaderSlow threshold: data wait over 20% of step time."""


def grad_norm_state(snap: Snapshot) -> tuple[str, list[Evidence]]:
    """'exploding', 'vanishing', 'normal' or 'unknown' (no data), with the evidence."""
    base = snap.pooled(sig.GRAD_NORM, snap.baseline)
    recent = snap.pooled(sig.GRAD_NORM, snap.recent)
    nonfinite = _increase(snap, sig.NONFINITE_LOSS, (snap.baseline[1], snap.recent[1]))
    if not recent:
        return "unknown", []
    recent_median, peak = median(recent), max(recent)
    if recent_median < VANISHING_FLOOR and (not base or median(base) >= VANISHING_FLOOR):
        ref = median(base) if base else None
        return "vanishing", [Evidence(sig.GRAD_NORM, recent_median, ref, note="median of the recent span")]
    if base:
        base_median = median(base)
        if base_median > 0 and recent_median < base_median / 1000:
            return "vanishing", [
                Evidence(sig.GRAD_NORM, recent_median, base_median, note="1000x below its baseline median")
            ]
        limit = max(EXPLODING_FACTOR * base_median, base_median + 10 * spread(base))
        # sustained, not one spike: a quarter of the recent points past the limit
        past = sum(1 for v in recent if v > limit)
        if past >= max(2, len(recent) // 4):
            evidence = [
                Evidence(sig.GRAD_NORM, peak, base_median, note=f"{past} recent points above {limit:.3g}")
            ]
            if nonfinite > 0:
                evidence.append(Evidence(sig.NONFINITE_LOSS, nonfinite, 0.0, note="increase"))
            return "exploding", evidence
        return "normal", [Evidence(sig.GRAD_NORM, recent_median, base_median, note="within its baseline")]
    return "unknown", []


def model_hyperparameters(snap: Snapshot) -> list[Finding]:
    state, evidence = grad_norm_state(snap)
    if state not in ("exploding", "vanishing"):
        return []
    confidence = 0.85 if len(evidence) > 1 else 0.75
    what = (
        "learning rate, warm-up or gradient clipping"
        if state == "exploding"
        else "initialisation, normalisation, or a learning rate decayed to nothing"
    )
    return [
        Finding(
            Cause.MODEL_HYPERPARAMETERS,
            confidence,
            f"the gradient norm is {state}: look at the model or hyper-parameters ({what})",
            tuple(evidence),
        )
    ]


def loss_volatility(snap: Snapshot) -> tuple[float, float] | None:
    """Mean per-series loss stddev in the recent span and in the baseline (floored at 0.1% of the loss)."""
    recent, base, level = [], [], []
    for s in snap.of(sig.LOSS):
        r, b = s.values(*snap.recent), s.values(*snap.baseline)
        if len(r) >= 3 and len(b) >= 3:
            recent.append(pstdev(r))
            base.append(pstdev(_detrend(b)))
            level.append(abs(mean(b)))
    if not recent:
        return None
    return mean(recent), max(mean(base), 0.001 * mean(level))


def _detrend(values: list[float]) -> list[float]:
    """A falling loss is not a volatile one: the residuals around a straight line."""
    n = len(values)
    xs = range(n)
    mx, my = (n - 1) / 2, mean(values)
    sxx = sum((x - mx) ** 2 for x in xs) or 1.0
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, values, strict=True)) / sxx
    return [y - (my + slope * (x - mx)) for x, y in zip(xs, values, strict=True)]


def data_pipeline(snap: Snapshot) -> list[Finding]:
    state, grad_evidence = grad_norm_state(snap)
    if state != "normal":
        return []
    vol = loss_volatility(snap)
    wait = snap.pooled(sig.DATA_WAIT, snap.recent)
    if vol is None or not wait:
        return []
    recent_vol, base_vol = vol
    wait_now = mean(wait)
    base_wait = snap.pooled(sig.DATA_WAIT, snap.baseline)
    wait_before = mean(base_wait) if base_wait else 0.0
    if recent_vol < OSCILLATION_FACTOR * base_vol or wait_now < DATA_WAIT_HIGH:
        return []
    confidence = min(0.95, 0.6 + 0.05 * min(recent_vol / base_vol / OSCILLATION_FACTOR, 4.0))
    return [
        Finding(
            Cause.DATA_PIPELINE,
            round(confidence, 3),
            "the loss oscillates while the gradient norm stays normal and the trainer waits for data: "
            "a bad shard or a slow data loader",
            (
                *grad_evidence,
                Evidence(sig.LOSS, recent_vol, base_vol, note="loss stddev, recent against baseline"),
                Evidence(
                    sig.DATA_WAIT, wait_now, wait_before, note=f"above {DATA_WAIT_HIGH:.0%} of step time"
                ),
            ),
        )
    ]


def _increase(snap: Snapshot, metric: str, span: tuple[float, float]) -> float:
    """Summed counter increase over the span (a reset counts from zero)."""
    total = 0.0
    for s in snap.of(metric):
        vals = s.values(*span)
        for a, b in itertools.pairwise(vals):
            total += b - a if b >= a else b
    return total
