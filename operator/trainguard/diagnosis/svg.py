"""A small SVG line plot in pure Python, for the diagnostic report: no browser engine, no plotting
library and no network, so the operator can render it in-process and the report is one self-contained
file (HTML inline, Markdown as a data URI)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")

Points = Sequence[tuple[float, float]]


@dataclass(frozen=True)
class Line:
    label: str
    points: Points


@dataclass(frozen=True)
class Band:
    """A shaded reference range (a baseline band), constant over the plot."""

    label: str
    low: float
    high: float


@dataclass(frozen=True)
class Threshold:
    """A rule's threshold: a horizontal line the alert's own signal crossed."""

    label: str
    value: float


def _ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def _num(v: float) -> str:
    if v != 0 and (abs(v) < 1e-2 or abs(v) >= 1e5):
        return f"{v:.1e}"
    return f"{v:.4g}"


def line_plot(
    title: str,
    lines: Sequence[Line],
    *,
    start: float,
    end: float,
    marker: float | None = None,
    band: Band | None = None,
    threshold: Threshold | None = None,
    unit: str = "",
    width: int = 480,
    height: int = 200,
) -> str:
    """An <svg> with one polyline per line over [start, end] (unix seconds; the x axis shows seconds
    relative to `marker`, the alert), the band shaded, the threshold as a red horizontal line and the marker
    as a dashed vertical line."""
    left, right, top, bottom = 56, 10, 24, 30
    pw, ph = width - left - right, height - top - bottom
    ys = [v for ln in lines for t, v in ln.points if start <= t <= end and math.isfinite(v)]
    if band is not None:
        ys += [band.low, band.high]
    if threshold is not None and math.isfinite(threshold.value):
        ys.append(threshold.value)
    lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if hi - lo < 1e-12:
        pad = abs(hi) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    else:
        pad = (hi - lo) * 0.08
        lo, hi = lo - pad, hi + pad

    def x(t: float) -> float:
        return left + (t - start) / (end - start) * pw

    def y(v: float) -> float:
        return top + (1 - (v - lo) / (hi - lo)) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{left}" y="15" font-size="12" font-family="sans-serif" font-weight="bold">'
        f"{escape(title)}{escape(f' ({unit})' if unit else '')}</text>",
    ]
    if band is not None:
        y0, y1 = y(band.high), y(band.low)
        out.append(
            f'<rect class="band" x="{left}" y="{y0:.1f}" width="{pw}" height="{max(y1 - y0, 1):.1f}" '
            f'fill="#2ca02c" fill-opacity="0.15"><title>{escape(band.label)}</title></rect>'
        )
    for v in _ticks(lo, hi):
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e5e5e5"/>')
        out.append(
            f'<text x="{left - 4}" y="{y(v) + 4:.1f}" font-size="10" text-anchor="end" '
            f'font-family="sans-serif">{_num(v)}</text>'
        )
    ref = marker if marker is not None else start
    for t in _ticks(start - ref, end - ref, 5):
        out.append(
            f'<text x="{x(t + ref):.1f}" y="{top + ph + 14}" font-size="10" text-anchor="middle" '
            f'font-family="sans-serif">{t:+.0f}s</text>'
        )
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    if threshold is not None and math.isfinite(threshold.value):
        ty = y(threshold.value)
        out.append(
            f'<line class="threshold" x1="{left}" x2="{left + pw}" y1="{ty:.1f}" y2="{ty:.1f}" stroke="#d62728" '
            f'stroke-width="1.5" stroke-dasharray="6 3"><title>{escape(threshold.label)}</title></line>'
        )
        out.append(
            f'<text x="{left + pw - 4}" y="{ty - 3:.1f}" font-size="9" text-anchor="end" font-family="sans-serif" '
            f'fill="#d62728">{escape(threshold.label)}</text>'
        )
    if marker is not None and start <= marker <= end:
        out.append(
            f'<line class="alert-marker" x1="{x(marker):.1f}" x2="{x(marker):.1f}" y1="{top}" '
            f'y2="{top + ph}" stroke="#000" stroke-dasharray="4 3"/>'
        )
    for i, ln in enumerate(lines):
        pts = [(t, v) for t, v in ln.points if start <= t <= end and math.isfinite(v)]
        if not pts:
            continue
        colour = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
        out.append(
            f'<polyline class="series" fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}">'
            f"<title>{escape(ln.label)}</title></polyline>"
        )
    legend_x = left + 4
    for i, ln in enumerate(lines[:4]):
        out.append(
            f'<text x="{legend_x}" y="{top + 12 + 11 * i}" font-size="9" font-family="sans-serif" '
            f'fill="{PALETTE[i % len(PALETTE)]}">{escape(ln.label)}</text>'
        )
    if len(lines) > 4:
        out.append(
            f'<text x="{legend_x}" y="{top + 12 + 44}" font-size="9" font-family="sans-serif">'
            f"+{len(lines) - 4} more</text>"
        )
    out.append("</svg>")
    return "\n".join(out)
