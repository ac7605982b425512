"""The status screen as text, pure: a plain table for pipes and files, and a live layout (colour, redrawn
by `--watch`) for a terminal."""

from __future__ import annotations

import math
from collections.abc import Sequence

from trainguard.status.model import JobStatus, Remediation


def duration(seconds: float | None) -> str:
    """`45s`, `12m`, `3h05m`, `2d04h`; `-` when unknown."""
    if seconds is None or math.isnan(seconds):
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def _num(v: float | None) -> str:
    if v is None or math.isnan(v):
        return "-"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def throughput_text(s: JobStatus) -> str:
    ratio = s.throughput_ratio
    text = f"{_num(s.series.throughput)}/{_num(s.series.baseline)}"
    return f"{text} ({ratio * 100:.0f}%)" if ratio is not None else text


def checkpoint_text(s: JobStatus) -> str:
    step = s.series.checkpoint_step
    if step is None:
        return "-"
    return f"step {step:.0f} {duration(s.checkpoint_age_s)} ago"


def alerts_text(s: JobStatus) -> str:
    return " ".join(f"{k}:{v}" for k, v in s.by_severity.items()) or "none"


def lost_text(s: JobStatus) -> str:
    return duration(s.lost_s) + ("+?" if s.lost_partial else "")


def remediation_text(r: Remediation | None, now: float) -> str:
    if r is None:
        return "none"
    dry = " (dry run)" if r.dry_run else ""
    where = f" on {r.node}" if r.node else ""
    return f"{r.alert}{where}: {r.phase}{dry} [{r.steps or 'no steps'}] {duration(now - r.created)} ago"


COLUMNS = ("JOB", "HEALTH", "ALERTS", "TOKENS/S/GPU(VS BASELINE)", "CHECKPOINT", "LOST")


def _rows(statuses: Sequence[JobStatus]) -> list[tuple[str, ...]]:
    return [
        (
            f"{s.namespace}/{s.name}",
            s.health,
            alerts_text(s),
            throughput_text(s),
            checkpoint_text(s),
            lost_text(s),
        )
        for s in statuses
    ]


def _details(s: JobStatus) -> list[str]:
    lines = [f"  {a.severity} {a.name}" + (f" node={a.node}" if a.node else "") + (f" gpu={a.gpu}" if a.gpu else "")
             for a in s.alerts]  # fmt: skip
    if s.health == "NotReady":
        lines.append(f"  monitor not Ready: {s.ready_reason}")
    lines.append(f"  last remediation: {remediation_text(s.last_remediation, s.now)}")
    return lines


def render_plain(statuses: Sequence[JobStatus]) -> str:
    """For pipes: a header, one tab-free line per job in fixed columns, its details indented; no ANSI."""
    if not statuses:
        return "no TrainingJobMonitor found\n"
    rows = [COLUMNS, *_rows(statuses)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    out = ["  ".join(c.ljust(w) for c, w in zip(rows[0], widths, strict=True)).rstrip()]
    for s, row in zip(statuses, rows[1:], strict=True):
        out.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        out += _details(s)
    return "\n".join(out) + "\n"


RESET, BOLD, DIM = "\x1b[0m", "\x1b[1m", "\x1b[2m"
COLOURS = {"Critical": "\x1b[1;31m", "NotReady": "\x1b[35m", "Degraded": "\x1b[33m", "Healthy": "\x1b[32m",
           "P0": "\x1b[1;31m", "P1": "\x1b[33m", "P2": "\x1b[36m", "P3": "\x1b[2m"}  # fmt: skip
CLEAR = "\x1b[H\x1b[2J"


def render_live(statuses: Sequence[JobStatus], *, now_text: str, every_s: float | None) -> str:
    """For a terminal: the screen cleared and redrawn, health and severities in colour."""
    head = f"{BOLD}trainguard status{RESET}  {now_text}" + (
        f"  {DIM}every {every_s:g}s, Ctrl-C to stop{RESET}" if every_s else ""
    )
    out = [CLEAR + head, ""]
    if not statuses:
        out.append("no TrainingJobMonitor found")
    for s in statuses:
        colour = COLOURS.get(s.health, "")
        out.append(f"{BOLD}{s.namespace}/{s.name}{RESET}  {colour}{s.health}{RESET}")
        sev = " ".join(f"{COLOURS.get(k, '')}{k}:{v}{RESET}" for k, v in s.by_severity.items()) or "none"
        out.append(f"  alerts      {sev}")
        for a in s.alerts:
            where = (f" node={a.node}" if a.node else "") + (f" gpu={a.gpu}" if a.gpu else "")
            out.append(f"    {COLOURS.get(a.severity, '')}{a.severity}{RESET} {a.name}{where}")
        out.append(f"  throughput  {throughput_text(s)} tokens/s/GPU (vs baseline)")
        out.append(f"  checkpoint  {checkpoint_text(s)}")
        out.append(f"  remediation {remediation_text(s.last_remediation, s.now)}")
        out.append(f"  time lost   {lost_text(s)}" + (f"  {DIM}(monitor: {s.ready_reason}){RESET}"
                                                       if s.health == "NotReady" else ""))  # fmt: skip
        out.append("")
    return "\n".join(out) + "\n"
