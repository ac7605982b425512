"""How an alert carries its grade (P0..P3, docs/architecture.md, "The alert catalogue") in labels, in either style.

The grade is trainguard's contract and always travels in `priority`. `severity` carries it too in the
`grade` style (the default, severity="P0"), or in the `mapped` style the word an Alertmanager built for
kube-prometheus-stack routes and inhibits on (severity="critical"; MAPPED_SEVERITY, docs/severity.md).
Everything in trainguard that routes, inhibits or decides on a grade reads `priority` (`grade_of`),
so both styles behave the same; only alerts from rules rendered before `priority` existed are read
by their `severity`.
"""

from __future__ import annotations

from collections.abc import Mapping

from trainguard.catalog.alerts import SEVERITIES

PRIORITY = "priority"
"""The label that holds the grade, P0..P3, in every style."""
SEVERITY = "severity"

GRADE = "grade"
"""severity equals the grade: severity="P0" (the documented contract, the default)."""
MAPPED = "mapped"
"""severity is the kube-prometheus-stack word for the grade (MAPPED_SEVERITY)."""
STYLES: tuple[str, ...] = (GRADE, MAPPED)

MAPPED_SEVERITY: dict[str, str] = {"P0": "critical", "P1": "warning", "P2": "warning", "P3": "none"}
"""The mapped style's severity of each grade. P2 is a `warning`, not an `info`: kube-prometheus-stack's
InfoInhibitor mutes every `info` alert of a namespace where no warning or critical fires, and a P2 must
still reach its e-mail and ticket receivers. P3 notifies no one: `none`, kube-prometheus-stack's word for
alerts that are not notifications (Watchdog, InfoInhibitor), so it reaches no `info` route either."""


def severity_label(grade: str, style: str) -> str:
    """The value of `severity` for `grade` in `style`; a value that is not a grade is kept as it is."""
    if style == MAPPED:
        return MAPPED_SEVERITY.get(grade, grade)
    return grade


def grade_labels(grade: str, style: str = GRADE) -> dict[str, str]:
    """The labels that carry `grade`: priority always, severity in `style`."""
    return {PRIORITY: grade, SEVERITY: severity_label(grade, style)}


def grade_of(labels: Mapping[str, str]) -> str:
    """An alert's grade: its `priority`, or its `severity` when it has none (a rule rendered before
    `priority` existed, or a sender that predates it); "" when it has neither."""
    return labels.get(PRIORITY) or labels.get(SEVERITY) or ""


def with_priority(labels: Mapping[str, str]) -> dict[str, str]:
    """`labels` with `priority` set from a grade in `severity` when they have none (an alert of a rule
    that predates it), so that routes matching `priority` route it as they route its successors."""
    out = dict(labels)
    if PRIORITY not in out and out.get(SEVERITY, "") in SEVERITIES:
        out[PRIORITY] = out[SEVERITY]
    return out


def styled(labels: Mapping[str, str], style: str) -> dict[str, str]:
    """`labels` with `severity` in `style`, for an alert trainguard posts itself: its parts build the
    labels in the grade style (`grade_labels(grade)`), and a `severity` that is a grade is written in
    the platform's style here; any other value (a mapped word already, the morning report's) is kept."""
    out = dict(labels)
    if out.get(SEVERITY, "") in SEVERITIES:
        out[SEVERITY] = severity_label(out[SEVERITY], style)
    return out
