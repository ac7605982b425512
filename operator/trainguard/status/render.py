"""The status screen, pure: a plain table for pipes and files, the same as data (`-o json|yaml`), and a
live layout for a terminal, built with rich (which handles the width, colour, NO_COLOR and the redraw
of `--watch`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import IO, Any

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from trainguard.output import no_colour
from trainguard.remediation.goodput import WINDOW_S
from trainguard.render.prometheus import ETTR_WINDOW
from trainguard.status.model import JobStatus, Remediation
from trainguard.times import rfc3339


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


def goodput_text(s: JobStatus) -> str:
    """`86.0% over 1d, most lost to redone_work (1h40m)`: the ETTR the operator exports and its top cause."""
    g = s.goodput
    if g is None or g.ettr is None:
        return "-"
    window = duration(min(g.window_wall, WINDOW_S))
    cause = g.top_cause
    lost = f"most lost to {cause} ({duration(g.lost[cause])})" if cause else "nothing lost"
    unknown = f", redone work of {g.redo_unknown} restart(s) unknown" if g.redo_unknown else ""
    return f"{g.ettr * 100:.1f}% over {window}, {lost}{unknown}"


def lost_now_text(s: JobStatus) -> str:
    """`stall 12.0%, checkpoint_stall 0.5%, slow_rank 0.0%; ETTR 91.3% over 1h, every cause`: what the
    goodput rules record now (docs/diagnosis.md, Goodput); "" where Prometheus has none of it."""
    causes = ", ".join(f"{cause} {share * 100:.1f}%" for cause, share in sorted(s.series.lost_now.items()))
    ettr = _number(s.series.ettr_all)
    overall = f"ETTR {ettr * 100:.1f}% over {ETTR_WINDOW}, every cause" if ettr is not None else ""
    return "; ".join(part for part in (causes, overall) if part)


def rules_text(s: JobStatus) -> str:
    """Where the job's rules are, said only when it is not where its form puts every job: a group of its
    own under the shared form ("" otherwise)."""
    if s.rules_form != "own-group":
        return ""
    return "a group of its own: " + "; ".join(s.rules_reasons)


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
    if s.goodput is not None:
        lines.append(f"  goodput: {goodput_text(s)}")
    if lost_now_text(s):
        lines.append(f"  lost now: {lost_now_text(s)}")
    if rules_text(s):
        lines.append(f"  rules: {rules_text(s)}")
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


def _number(v: float | None) -> float | None:
    return None if v is None or math.isnan(v) else v


def _time(ts: float | None) -> str | None:
    return None if ts is None or math.isnan(ts) or ts <= 0 else rfc3339(ts)


def _remediation_data(r: Remediation | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"alert": r.alert, "phase": r.phase, "steps": [k for k in r.steps.split(",") if k], "node": r.node,
            "dryRun": r.dry_run, "created": rfc3339(r.created), "updated": rfc3339(r.updated)}  # fmt: skip


def job_data(s: JobStatus) -> dict[str, Any]:
    """One job as `-o json|yaml` prints it: the table's columns as values (seconds, steps, times in RFC
    3339), camelCase like the Kubernetes objects beside it; null where a value is unknown."""
    return {
        "namespace": s.namespace,
        "name": s.name,
        "health": s.health,
        "readyReason": s.ready_reason,
        "alerts": [{"name": a.name, "severity": a.severity, "node": a.node, "gpu": a.gpu} for a in s.alerts],
        "alertsBySeverity": s.by_severity,
        "throughput": {
            "tokensPerSecondPerGPU": _number(s.series.throughput),
            "baseline": _number(s.series.baseline),
            "ratio": _number(s.throughput_ratio),
        },
        "checkpoint": {
            "step": _number(s.series.checkpoint_step),
            "time": _time(s.series.checkpoint_time),
            "ageSeconds": _number(s.checkpoint_age_s),
        },
        "lastRemediation": _remediation_data(s.last_remediation),
        "remediations": s.remediations,
        "timeLost": {"seconds": s.lost_s, "lowerBound": s.lost_partial},
        "goodput": _goodput_data(s),
        "lostNow": {"ratio": dict(sorted(s.series.lost_now.items())), "ettr": _number(s.series.ettr_all)},
        "rules": {"form": s.rules_form or None, "reasons": list(s.rules_reasons)},
    }


def _goodput_data(s: JobStatus) -> dict[str, Any] | None:
    g = s.goodput
    if g is None:
        return None
    return {"ettr": g.ettr, "windowSeconds": g.window_wall, "productiveSeconds": g.productive,
            "lostSeconds": dict(g.lost), "topCause": g.top_cause, "restartsRedoUnknown": g.redo_unknown}  # fmt: skip


def status_data(statuses: Sequence[JobStatus], now: float) -> dict[str, Any]:
    return {"time": rfc3339(now), "jobs": [job_data(s) for s in statuses]}


STYLES = {"Critical": "bold red", "NotReady": "magenta", "Degraded": "yellow", "Healthy": "green",
          "P0": "bold red", "P1": "yellow", "P2": "cyan", "P3": "dim"}  # fmt: skip
LABEL_WIDTH = 11
"""The live layout's labels (`remediation` the longest) and the one space after them."""


def make_console(file: IO[str], environ: Mapping[str, str]) -> Console:
    """The live screen's console: no styles at all under NO_COLOR (not even bold); no markup or
    highlighting, so a `[Pause,RestartGang]` or a number in the text is printed as it is."""
    return Console(
        file=file,
        color_system=None if no_colour(environ) else "auto",
        markup=False,
        highlight=False,
        emoji=False,
    )


def _job(s: JobStatus) -> RenderableType:
    grid = Table.grid(padding=(0, 1, 0, 0))
    grid.add_column(min_width=LABEL_WIDTH, no_wrap=True)
    grid.add_column(overflow="fold")
    severities = Text(" ").join(Text(f"{k}:{v}", STYLES.get(k, "")) for k, v in s.by_severity.items())
    grid.add_row("alerts", severities or Text("none"))
    for a in s.alerts:
        where = (f" node={a.node}" if a.node else "") + (f" gpu={a.gpu}" if a.gpu else "")
        grid.add_row("", Text.assemble((a.severity, STYLES.get(a.severity, "")), f" {a.name}{where}"))
    grid.add_row("throughput", Text(f"{throughput_text(s)} tokens/s/GPU (vs baseline)"))
    grid.add_row("checkpoint", Text(checkpoint_text(s)))
    grid.add_row("remediation", Text(remediation_text(s.last_remediation, s.now)))
    lost = Text(lost_text(s))
    if s.health == "NotReady":
        lost.append(f"  (monitor: {s.ready_reason})", "dim")
    grid.add_row("time lost", lost)
    if s.goodput is not None:
        grid.add_row("goodput", Text(goodput_text(s)))
    if lost_now_text(s):
        grid.add_row("lost now", Text(lost_now_text(s)))
    if rules_text(s):
        grid.add_row("rules", Text(rules_text(s)))
    head = Text.assemble((f"{s.namespace}/{s.name}", "bold"), "  ", (s.health, STYLES.get(s.health, "")))
    return Group(head, Padding(grid, (0, 0, 0, 2), expand=False), Text(""))


def render_live(
    statuses: Sequence[JobStatus], *, now_text: str, every_s: float | None, notes: Sequence[str] = ()
) -> RenderableType:
    """For a terminal: each job's block, health and severities in colour, under a header with the time
    (and, with --watch, how often it is redrawn); what could not be read at the end."""
    head = Text.assemble(("trainguard status", "bold"), f"  {now_text}")
    if every_s:
        head.append(f"  every {every_s:g}s, Ctrl-C to stop", "dim")
    jobs = [_job(s) for s in statuses] or [Text("no TrainingJobMonitor found")]
    return Group(head, Text(""), *jobs, *(Text(f"trainguard: {n}", "yellow") for n in notes))
