"""The diagnostic report (a P2's, or anyone's on demand): what fired, the probable causes with their
evidence, plots of the related series for the 5 minutes around the alert, the pod log lines from the
+-30 s window with error patterns marked, the runbook and what trainguard did. The alert's own signal
(diagnosis/own_signal.py: the series its rule reads) is plotted first, with the rule's threshold, and
its catalogue cause is weighed first, with the signal's value at the alert time as evidence. Pure: the edge
(diagnosis/fetch.py, for the report pass and `trainguard report`) fetches the inputs and stores or writes the output."""

from __future__ import annotations

import base64
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from typing import Any

from trainguard.diagnosis import signals as sig
from trainguard.diagnosis.logs import LogLine, excerpt
from trainguard.diagnosis.model import Evidence, Finding, Series, Snapshot
from trainguard.diagnosis.own_signal import OwnSignal, evidence, own_first
from trainguard.diagnosis.robust import median, spread
from trainguard.diagnosis.svg import Band, Line, Threshold, line_plot
from trainguard.times import rfc3339

PLOT_HALF_S = 150.0
"""The plots cover the alert's time +-2.5 minutes."""
MAX_LINES = 8
"""More series than this in one plot are drawn as their mean, minimum and maximum."""


@dataclass(frozen=True)
class AlertInfo:
    name: str
    severity: str
    at: float
    namespace: str
    job: str
    node: str = ""
    gpu: str = ""
    pod: str = ""
    summary: str = ""
    runbook_url: str = ""
    trace_id: str = ""


@dataclass(frozen=True)
class ReportInput:
    alert: AlertInfo
    snapshot: Snapshot
    findings: Sequence[Finding]
    logs: Sequence[LogLine] = ()
    remediations: Sequence[Mapping[str, Any]] = ()
    """Remediation records as the monitor's status keeps them (api.monitor.RemediationRecord, camelCase)."""
    logs_read: bool = True
    """False where the operator may not read pod logs (`--no-pod-logs`): the report says so rather than
    showing an empty window."""
    own: OwnSignal | None = None
    """The alert's own signal, fetched for its job and scoped by its labels (None on demand, no alert)."""


@dataclass(frozen=True)
class AlertCause:
    """The catalogue's probable cause of the alert, with its own signal's values at the alert time."""

    alert: str
    text: str
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class Report:
    markdown: str
    html: str
    plots: dict[str, str] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    """The same as data, for `trainguard report -o json|yaml`: the alert, the findings with their
    evidence, the log lines and the remediation records; the plots by name only."""


@dataclass(frozen=True)
class _PlotSpec:
    key: str
    title: str
    metric: str
    unit: str = ""


PLOTS: tuple[_PlotSpec, ...] = (
    _PlotSpec("throughput", "Throughput against its baseline band", sig.THROUGHPUT, "tokens/s per GPU"),
    _PlotSpec("loss", "Loss", sig.LOSS),
    _PlotSpec("grad-norm", "Gradient norm", sig.GRAD_NORM),
    _PlotSpec("gpu-memory", "GPU memory used", sig.FB_USED, "%"),
    _PlotSpec("temperature", "GPU temperature", sig.GPU_TEMP, "C"),
    _PlotSpec("utilisation", "GPU utilisation", sig.GPU_UTIL, "%"),
    _PlotSpec("data-wait", "Data-loader wait", sig.DATA_WAIT, "share of step time"),
    _PlotSpec("allreduce", "All-reduce share", sig.ALLREDUCE, "share of step time"),
)


def _label(s: Series) -> str:
    parts = [s.label("pod") or s.label("node")]
    if s.label("gpu"):
        parts.append(f"gpu {s.label('gpu')}")
    return " ".join(p for p in parts if p) or s.metric


def _lines(series: Sequence[Series], mean_only: bool = False) -> list[Line]:
    """One line per series, or the mean, minimum and maximum of more than MAX_LINES."""
    if mean_only or len(series) > MAX_LINES:
        by_t: dict[float, list[float]] = defaultdict(list)
        for s in series:
            for t, v in s.points:
                by_t[t].append(v)
        ts = sorted(by_t)
        mean_line = Line("job mean", [(t, sum(by_t[t]) / len(by_t[t])) for t in ts])
        if mean_only:
            return [mean_line]
        return [
            mean_line,
            Line("min", [(t, min(by_t[t])) for t in ts]),
            Line("max", [(t, max(by_t[t])) for t in ts]),
        ]
    return [Line(_label(s), s.points) for s in sorted(series, key=_label)]


def _series_for(snap: Snapshot, spec: _PlotSpec) -> list[Line]:
    if spec.metric == sig.FB_USED:
        free = {s.labels: dict(s.points) for s in snap.of(sig.FB_FREE)}
        series = []
        for s in snap.of(sig.FB_USED):
            f = free.get(s.labels, {})
            pts = tuple((t, 100 * v / (v + f[t])) for t, v in s.points if t in f and v + f[t] > 0)
            series.append(Series(s.metric, s.labels, pts))
    else:
        series = snap.of(spec.metric)
    return _lines(series, mean_only=spec.key == "throughput")


def _throughput_band(snap: Snapshot) -> Band | None:
    base = snap.pooled(sig.THROUGHPUT, snap.baseline)
    if not base:
        return None
    centre = median(base)
    half = max(3 * spread(base), 0.15 * centre)
    return Band("baseline: median +-max(3 sigma, 15%) of the baseline span", centre - half, centre + half)


def plots(snap: Snapshot) -> dict[str, str]:
    """Every plot that has data, keyed by PLOTS' keys, as inline SVG."""
    start, end = snap.at - PLOT_HALF_S, snap.at + PLOT_HALF_S
    out = {}
    for spec in PLOTS:
        lines = _series_for(snap, spec)
        if not any(start <= t <= end for ln in lines for t, _ in ln.points):
            continue
        band = _throughput_band(snap) if spec.key == "throughput" else None
        out[spec.key] = line_plot(
            spec.title, lines, start=start, end=end, marker=snap.at, band=band, unit=spec.unit
        )
    return out


OWN_PLOT_PREFIX = "fired:"
"""The own signal's plots are keyed `fired:<series>`, ahead of PLOTS' keys."""


def own_plots(own: OwnSignal | None, at: float) -> dict[str, str]:
    """The alert's own series that have data around it, in the order its rule reads them, each with the
    rule's threshold where the effective policy gives it."""
    if own is None:
        return {}
    start, end = at - PLOT_HALF_S, at + PLOT_HALF_S
    out = {}
    for signal in own.signals:
        lines = _lines(own.of(signal.series))
        if not any(start <= t <= end for ln in lines for t, _ in ln.points):
            continue
        rule = (
            Threshold(f"{signal.param} {signal.op} {signal.threshold:g}", signal.threshold)
            if signal.threshold is not None
            else None
        )
        out[f"{OWN_PLOT_PREFIX}{signal.series}"] = line_plot(
            f"What fired: {own.alert}: {signal.series}",
            lines,
            start=start,
            end=end,
            marker=at,
            threshold=rule,
        )
    return out


def causes(inp: ReportInput) -> tuple[AlertCause | None, list[Finding]]:
    """The alert's own cause first: the catalogue's, unless a finding reads its own signal (then that
    finding leads); the findings in their order otherwise."""
    own = inp.own
    if own is None or not own.probable_cause:
        return None, list(inp.findings)
    ordered, named = own_first(inp.findings, own)
    if named:
        return None, ordered
    return AlertCause(own.alert, own.probable_cause, tuple(evidence(own, inp.alert.at))), ordered


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _where(a: AlertInfo) -> str:
    parts = [f"job {a.namespace}/{a.job}"]
    parts += [f"{k} {v}" for k, v in (("node", a.node), ("GPU", a.gpu), ("pod", a.pod)) if v]
    return ", ".join(parts)


def _actions(records: Sequence[Mapping[str, Any]], alert: str) -> list[str]:
    """One line per record of this alert (or all, when none is of it) and per step."""
    mine = [r for r in records if r.get("alert") == alert] or list(records)
    lines = []
    for r in mine:
        head = f"{r.get('created', '')} {r.get('alert', '')}: {r.get('phase', '')}"
        if r.get("dryRun"):
            head += " (dry run)"
        if r.get("message"):
            head += f" - {r['message']}"
        lines.append(head)
        for step in r.get("steps") or []:
            detail = f" - {step['detail']}" if step.get("detail") else ""
            lines.append(f"    {step.get('kind', '?')}: {step.get('phase', '')}{detail}")
    return lines


def build(inp: ReportInput) -> Report:
    figures = own_plots(inp.own, inp.alert.at) | plots(inp.snapshot)
    logs = excerpt(inp.logs, inp.alert.at)
    actions = _actions(inp.remediations, inp.alert.name)
    first, findings = causes(inp)
    return Report(
        _markdown(inp, figures, logs, actions, first=first, findings=findings),
        _html(inp, figures, logs, actions, first=first, findings=findings),
        figures,
        _data(inp, first, findings, figures, logs),
    )


def _number(value: float | None) -> float | None:
    """JSON has no NaN or infinity: those are unknown."""
    return value if value is not None and math.isfinite(value) else None


def _evidence(e: Evidence) -> dict[str, Any]:
    return {"metric": e.metric, "labels": dict(e.labels), "value": _number(e.value),
            "reference": _number(e.reference), "note": e.note}  # fmt: skip


def _data(
    inp: ReportInput,
    first: AlertCause | None,
    findings: list[Finding],
    figures: dict[str, str],
    logs: list[LogLine],
) -> dict[str, Any]:
    a = inp.alert
    return {
        "alert": {"name": a.name, "severity": a.severity, "time": rfc3339(a.at), "namespace": a.namespace,
                  "job": a.job, "node": a.node, "gpu": a.gpu, "pod": a.pod, "summary": a.summary,
                  "runbookURL": a.runbook_url, "traceID": a.trace_id},
        "alertCause": None if first is None else {
            "alert": first.alert, "cause": first.text, "evidence": [_evidence(e) for e in first.evidence]},
        "findings": [
            {"cause": f.cause.value, "confidence": f.confidence, "summary": f.summary, "node": f.node,
             "gpu": f.gpu, "pod": f.pod, "share": _number(f.share),
             "evidence": [_evidence(e) for e in f.evidence]}
            for f in findings
        ],
        "plots": list(figures),
        "logsRead": inp.logs_read,
        "logs": [{"time": rfc3339(ln.at), "pod": ln.pod, "container": ln.container, "kind": ln.kind,
                  "text": ln.text} for ln in logs],
        "remediations": [dict(r) for r in inp.remediations if r.get("alert") == a.name]
        or [dict(r) for r in inp.remediations],
    }  # fmt: skip


def _markdown(
    inp: ReportInput,
    figures: dict[str, str],
    logs: list[LogLine],
    actions: list[str],
    *,
    first: AlertCause | None,
    findings: list[Finding],
) -> str:
    a = inp.alert
    out = [
        f"# {a.severity} {a.name}: diagnostic report",
        "",
        f"- **What fired:** {a.name} ({a.severity}){f' - {a.summary}' if a.summary else ''}",
        f"- **Where:** {_where(a)}",
        f"- **When:** {_when(a.at)}",
        f"- **Trace id:** `{a.trace_id or 'unknown'}`",
        f"- **Runbook:** {a.runbook_url or 'none'}",
        "",
        "## Probable causes",
        "",
    ]
    if first is not None:
        out += [f"### {first.alert}: the alert's own cause", "", first.text, ""]
        out += [f"- `{e.describe()}`" for e in first.evidence] or ["- (no value of its signal at the alert)"]
        out.append("")
    if not findings:
        out.append("No rule found a probable cause in the series around the alert.")
    for f in findings:
        out.append(f"### {f.cause.value} (confidence {f.confidence:.0%})")
        out.append("")
        out.append(f.summary)
        out.append("")
        out += [f"- `{e.describe()}`" for e in f.evidence]
        out.append("")
    out += ["## Series around the alert", ""]
    if any(key.startswith(OWN_PLOT_PREFIX) for key in figures):
        out += [f"What fired: {a.name}, the series its rule reads, first.", ""]
    for key, svg in figures.items():
        data = base64.b64encode(svg.encode()).decode()
        out.append(f"![{key}](data:image/svg+xml;base64,{data})")
    out += ["", f"## Pod logs (+-30 s, trace id {a.trace_id or 'unknown'})", "", "```"]
    out += [_log_text(ln) for ln in logs] or [_no_logs(inp)]
    out += ["```", "", "## What trainguard did", ""]
    out += [f"    {line}" for line in actions] or ["Nothing yet: no remediation record for this job."]
    return "\n".join(out) + "\n"


def _no_logs(inp: ReportInput) -> str:
    if not inp.logs_read:
        return "(pod logs not read: the operator runs with --no-pod-logs)"
    return "(no log lines in the window)"


def _log_text(ln: LogLine) -> str:
    mark = f"[{ln.kind}] " if ln.kind else ""
    return f"{_when(ln.at)[11:19]} {ln.pod}: {mark}{ln.text}"


_CSS = """
body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px} h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px}
.cause{border-left:4px solid #d62728;padding:4px 12px;margin:8px 0;background:#fafafa}
.plots{display:flex;flex-wrap:wrap;gap:12px} figure{margin:0}
pre.logs{background:#111;color:#ddd;padding:10px;overflow-x:auto;font-size:12px}
pre.logs mark{background:#d62728;color:#fff}
dl.facts dt{font-weight:bold;float:left;width:110px} dl.facts dd{margin-left:120px}
"""


def _html(
    inp: ReportInput,
    figures: dict[str, str],
    logs: list[LogLine],
    actions: list[str],
    *,
    first: AlertCause | None,
    findings: list[Finding],
) -> str:
    a = inp.alert
    e = escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(a.severity)} {e(a.name)} - trainguard diagnostic report</title>",
        f"<style>{_CSS}</style></head><body>",
        f'<h1 id="alert">{e(a.severity)} {e(a.name)}: diagnostic report</h1>',
        '<dl class="facts">',
        f"<dt>What fired</dt><dd>{e(a.name)} ({e(a.severity)}){e(f' - {a.summary}' if a.summary else '')}</dd>",
        f"<dt>Where</dt><dd>{e(_where(a))}</dd>",
        f"<dt>When</dt><dd>{e(_when(a.at))}</dd>",
        f'<dt>Trace id</dt><dd><code class="trace-id">{e(a.trace_id or "unknown")}</code></dd>',
        "<dt>Runbook</dt><dd>"
        + (
            f'<a class="runbook" href="{e(a.runbook_url)}">{e(a.runbook_url)}</a>'
            if a.runbook_url
            else "none"
        )
        + "</dd></dl>",
        '<h2>Probable causes</h2><section id="causes">',
    ]
    if first is not None:
        out.append(
            f'<div class="cause alert-cause" data-cause="{e(first.alert)}"><h3>{e(first.alert)} '
            f'<small>the alert\'s own cause</small></h3><p class="summary">{e(first.text)}</p><ul>'
        )
        out += [f'<li class="evidence"><code>{e(ev.describe())}</code></li>' for ev in first.evidence]
        out.append("</ul></div>")
    if not findings:
        out.append("<p>No rule found a probable cause in the series around the alert.</p>")
    for f in findings:
        out.append(
            f'<div class="cause" data-cause="{e(f.cause.value)}"><h3>{e(f.cause.value)} '
            f'<small>confidence {f.confidence:.0%}</small></h3><p class="summary">{e(f.summary)}</p><ul>'
        )
        out += [f'<li class="evidence"><code>{e(ev.describe())}</code></li>' for ev in f.evidence]
        out.append("</ul></div>")
    out.append('</section><h2>Series around the alert</h2><section class="plots" id="plots">')
    fired = ' class="fired"'
    out += [
        f'<figure data-plot="{e(key)}"{fired if key.startswith(OWN_PLOT_PREFIX) else ""}>{svg}</figure>'
        for key, svg in figures.items()
    ]
    out.append(
        f'</section><h2>Pod logs (+-30 s)</h2><pre class="logs" id="logs" data-trace-id="{e(a.trace_id)}">'
    )
    if not logs:
        out.append(e(_no_logs(inp)))
    for ln in logs:
        text = e(_log_text(ln))
        if ln.kind:
            out.append(f'<mark class="log-error" data-kind="{e(ln.kind)}">{text}</mark>')
        else:
            out.append(f'<span class="log-line">{text}</span>')
    out.append('</pre><h2>What trainguard did</h2><pre id="actions">')
    out.append(e("\n".join(actions)) if actions else "Nothing yet: no remediation record for this job.")
    out.append("</pre></body></html>")
    return "\n".join(out) + "\n"
