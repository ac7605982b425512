"""The review's two forms: JSON (for tooling and diffs between reviews) and Markdown (for people)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from trainguard.api.common import format_duration
from trainguard.review.findings import Findings


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_json(f: Findings) -> dict[str, Any]:
    t = f.thresholds
    return {
        "window": {
            "start": _iso(f.start),
            "end": _iso(f.end),
            "eval_interval_s": f.interval,
            "never_fired_window_s": f.quiet_window,
        },
        "thresholds": {
            "co_firing": t.co_firing,
            "short": t.short,
            "min_episodes": t.min_episodes,
            "top": t.top,
        },
        "alerts": [
            {
                "alertname": a.alertname,
                "severity": a.severity,
                "episodes": a.episodes,
                "short": a.short,
                "firing_s": round(a.firing_s, 3),
                "last_fired": _iso(a.last_fired),
            }
            for a in f.alerts
        ],
        "never_fired": [
            {"alertname": n.alertname, "sources": list(n.sources), "last_fired": _iso(n.last_fired)}
            for n in f.never_fired
        ],
        "co_firing": [
            {
                "alerts": list(p.alerts),
                "share": round(p.share, 4),
                "episodes": list(p.episodes),
                "together": list(p.together),
                "stronger": p.stronger,
            }
            for p in f.co_firing
        ],
        "flapping": [
            {"alertname": x.alertname, "share": round(x.share, 4), "short": x.short, "resolved": x.resolved}
            for x in f.flapping
        ],
        "by_receiver": [
            {
                "receiver": r.receiver,
                "alerts": [{"alertname": name, "episodes": n} for name, n in r.counts],
            }
            for r in f.by_receiver
        ],
        "routed": f.routed,
        "notes": list(f.notes),
    }


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def to_markdown(f: Findings) -> str:
    t = f.thresholds
    start, end = _iso(f.start), _iso(f.end)
    quiet = format_duration(f.quiet_window)
    lines = [
        f"# Rule review {start} to {end}",
        "",
        f"From Prometheus's `ALERTS` history; evaluation interval {format_duration(f.interval)}; "
        f"{sum(a.episodes for a in f.alerts)} firing episodes of {len(f.alerts)} alerts.",
        *(f"\n> {n}" for n in f.notes),
        "",
        f"## Never fired in the last {quiet} ({len(f.never_fired)})",
        "",
        "Candidates for removal, or for a drill that proves they still can fire.",
        "",
    ]
    if f.never_fired:
        lines += ["| rule | known from | last fired |", "| --- | --- | --- |"]
        lines += [
            f"| {n.alertname} | {', '.join(n.sources)} | {_iso(n.last_fired) or 'not in the history'} |"
            for n in f.never_fired
        ]
    else:
        lines.append("Every rule fired.")
    lines += [
        "",
        f"## Fire together more than {_pct(t.co_firing)} of the time ({len(f.co_firing)})",
        "",
        "Merge candidates (or an inhibition): the share of both alerts' episodes that overlap an episode "
        "of the other on the same job.",
        "",
    ]
    if f.co_firing:
        lines += ["| alerts | together | episodes | already |", "| --- | --- | --- | --- |"]
        lines += [
            f"| {p.alerts[0]} + {p.alerts[1]} | {_pct(p.share)} | "
            f"{p.together[0]}/{p.episodes[0]} and {p.together[1]}/{p.episodes[1]} | "
            f"{f'tiers: {p.stronger} supersedes the other' if p.stronger else '-'} |"
            for p in f.co_firing
        ]
    else:
        lines.append("None.")
    lines += [
        "",
        f"## Resolved within one evaluation more than {_pct(t.short)} of the time ({len(f.flapping)})",
        "",
        "Flapping or false positives: firing at one evaluation, resolved at the next. A `for:` or a "
        "hysteresis would quiet them.",
        "",
    ]
    if f.flapping:
        lines += ["| alert | short | resolved episodes |", "| --- | --- | --- |"]
        lines += [f"| {x.alertname} | {_pct(x.share)} | {x.short}/{x.resolved} |" for x in f.flapping]
    else:
        lines.append("None.")
    lines += ["", "## Most frequent alerts by receiver", ""]
    if not f.routed:
        lines += ["No routing given (`-f` or `--alertmanager-config`): all receivers together.", ""]
    if f.by_receiver:
        lines += ["| receiver | alert | episodes |", "| --- | --- | --- |"]
        for r in f.by_receiver:
            lines += [f"| {r.receiver} | {name} | {n} |" for name, n in r.counts]
    else:
        lines.append("Nothing fired.")
    lines += ["", "## All alerts that fired", ""]
    if f.alerts:
        lines += ["| alert | severity | episodes | short | time firing | last fired |"]
        lines += ["| --- | --- | --- | --- | --- | --- |"]
        lines += [
            f"| {a.alertname} | {a.severity} | {a.episodes} | {a.short} | {format_duration(a.firing_s)} | "
            f"{_iso(a.last_fired)} |"
            for a in f.alerts
        ]
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n"
