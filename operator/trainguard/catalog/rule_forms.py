"""What keeps a monitor off the shared rule group (--rule-form shared): the one list that
render/shared.py's `rule_form` decides by, the monitor's `status.rules.reasons` name, and
docs/rendering.md prints (a test compares it with `not_shared_markdown()`).

A series carries a number, not a duration, a label name, an annotation or a range: a monitor that
changes one of these keeps a group of its own, the per-monitor group, whole.
"""

from __future__ import annotations

from dataclasses import dataclass

PER_MONITOR, SHARED, OWN_GROUP_FORM = "per-monitor", "shared", "own-group"
"""status.rules.form: the operator renders a group per monitor; the shared group judges the monitor;
the operator runs the shared form and the monitor keeps a group of its own (its `reasons` say why)."""
SHARED_GROUPS_MAX = 16
"""--shared-rule-groups' ceiling (render/rule_split.py): more groups than the catalogue has independent
chains of recordings stay unused."""


@dataclass(frozen=True)
class NotShared:
    """One thing no series can carry."""

    reason: str
    """The reason's name in the monitor's status (status.rules.reasons[].reason)."""
    what: str
    """What the monitor or its policy changes, as the docs list it."""
    why: str
    """Why the shared group cannot take it from a series."""

    def markdown(self) -> str:
        return f"- `{self.reason}`: {self.what} ({self.why})"


SCRAPE_INTERVAL = NotShared(
    "ScrapeInterval",
    "`spec.exporter.scrapeInterval` other than the default, 15s",
    "the shared group's interval, its rate windows made for it",
)
DCGM_BACKEND = NotShared(
    "DcgmBackend",
    "`spec.exporter.gpuBackend: dcgm`",
    "dcgm-exporter's series are joined to the job's pods per monitor",
)
BASELINE_RANGE = NotShared(
    "BaselineRange",
    "`spec.baseline.window` or `offset` other than the defaults",
    "a range, which PromQL takes only as a literal",
)
RACK_LABEL = NotShared(
    "RackLabel", "`spec.topology.rackLabel` other than the default", "a label name, not a number"
)
RUNBOOK_URL = NotShared("RunbookURL", "a policy's `runbookBaseUrl`", "an annotation of the rules")
ALERT_FOR = NotShared("AlertFor", "a policy that changes an alert's `for`", "a duration of the rule")
ALERT_SEVERITY = NotShared(
    "AlertSeverity", "a policy that changes an alert's `severity`", "a label of the rule"
)
LITERAL_PARAMS: dict[str, tuple[str, ...]] = {"GPUMemoryGrowthPredicted": ("horizon_seconds",)}
"""Params PromQL takes only as a literal (predict_linear's horizon)."""
LITERAL_PARAM = NotShared(
    "LiteralParam",
    "a policy that changes "
    + ", ".join(f"`{alert}`'s `{param}`" for alert, params in LITERAL_PARAMS.items() for param in params),
    "PromQL takes it only as a literal",
)

NOT_SHARED: tuple[NotShared, ...] = (
    SCRAPE_INTERVAL,
    DCGM_BACKEND,
    BASELINE_RANGE,
    RACK_LABEL,
    RUNBOOK_URL,
    ALERT_FOR,
    ALERT_SEVERITY,
    LITERAL_PARAM,
)
NOT_SHARED_REASONS = tuple(n.reason for n in NOT_SHARED)
REASON_MESSAGE_MAX = 512
REASONS_MAX = 16
"""The reasons a monitor's status lists (a policy may change the `for` of every alert): the rest are
counted in status.rules.moreReasons."""


def not_shared_markdown() -> str:
    """The docs' list (docs/rendering.md, "What is not shared")."""
    return "\n".join(n.markdown() for n in NOT_SHARED) + "\n"
