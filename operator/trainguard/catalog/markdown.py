"""docs/alerts.md, written from the catalogue so that the docs cannot drift from the rules."""

from __future__ import annotations

from trainguard.catalog.alerts import ALERTS, ALERTS_BY_NAME, FATAL_XIDS, MODE_PROFILES, Alert, Mode
from trainguard.catalog.metrics import COMMON_LABELS, DCGM_LABELS, METRICS
from trainguard.catalog.severity import MAPPED_SEVERITY


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _modes(a: Alert) -> str:
    return ", ".join(m.value for m in Mode if m in a.modes)


def alerts_markdown() -> str:
    lines = [
        "# Alert catalogue",
        "",
        "Generated from `operator/trainguard/catalog/` by `trainguard docs`; do not edit by hand.",
        "Every number can be changed in an AlertPolicy: `threshold` sets an alert's first parameter,",
        "`params` the others by name, and `for`, `severity` and `enabled` the rest.",
        "",
        "Every alert carries its severity (P0..P3) in the label `priority`. The label `severity` holds the",
        "same value by default; with the platform's severity style `mapped` ([severity styles](severity.md))",
        "it holds "
        + ", ".join(f"`{word}` for {grade}" for grade, word in MAPPED_SEVERITY.items())
        + ", for an Alertmanager that routes on those.",
        "",
        "| alert | severity | for | fires when | parameters (default) | modes |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for a in ALERTS:
        params = "<br>".join(f"`{p.name}` = {_num(p.default)}: {p.help}" for p in a.params) or "-"
        baseline = " (baseline, after warm-up)" if a.baseline else ""
        lines.append(
            f"| [{a.name}](#{a.name.lower()}) | {a.severity} | {a.for_} | {a.condition}{baseline} | {params} | {_modes(a)} |"
        )
    lines += [
        "",
        "## Thresholds by mode",
        "",
        "Where a monitor's `mode` changes a default (warm-up: 1000 steps in training, 100 in finetuning):",
        "",
    ]
    for mode, changes in MODE_PROFILES.items():
        for alert_name, values in changes.items():
            shown = ", ".join(f"`{k}` = {_num(v)}" for k, v in values.items())
            lines.append(f"- {mode.value}: {alert_name} {shown}")
    lines += ["", "## Runbooks", ""]
    for a in ALERTS:
        lines += [f"### {a.name}", "", f"**{a.summary}.** {a.severity}, scope: {a.scope.value}.", ""]
        lines.append(f"- Fires when {a.condition}.")
        lines.append(f"- Probable cause: {a.probable_cause}.")
        if a.p0_class:
            lines.append(
                f"- Automatic response: the `{a.p0_class.value}` action of the monitor's remediation."
            )
        if a.without_response:
            lines.append(f"- No automatic response of its own: {a.without_response}.")
        if a.supersedes:
            # a rack alert silences per-GPU alerts, which carry no rack: the job is what they share
            same = a.scope.value if all(ALERTS_BY_NAME[t].scope == a.scope for t in a.supersedes) else "job"
            lines.append(f"- While firing, it silences {', '.join(a.supersedes)} of the same {same}.")
        if a.name == "GPUCriticalXid":
            lines.append(f"- Fatal XIDs: {', '.join(str(x) for x in FATAL_XIDS)}.")
        lines.append("")
    lines += [
        "## Metrics",
        "",
        f"Every series carries {', '.join(f'`{x}`' for x in COMMON_LABELS)}; GPU series also "
        f"{', '.join(f'`{x}`' for x in DCGM_LABELS)}.",
        "",
        "| metric | type | labels | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for m in METRICS:
        extra = ", ".join(x for x in m.labels if x not in DCGM_LABELS) or ("GPU" if m.is_gpu else "-")
        lines.append(f"| `{m.name}` | {m.type.value} | {extra} | {m.help} |")
    return "\n".join(lines) + "\n"
