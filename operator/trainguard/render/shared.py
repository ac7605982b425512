"""The shared form of the rules: one group for every job, whose per-monitor numbers are series.

A monitor's own group (render/prometheus.py) writes its thresholds as literals, so N monitors make N
groups of ~68 rules, and each new monitor rewrites the rule file. The shared group holds the catalogue's
rules once, every selector widened to all jobs (`training_job!=""`, each rule aggregates or joins by
namespace and training_job), and reads what differs between monitors from series the operator publishes
(controller/rule_settings.py): each alert's params, the monitor's settings (sigma, warm-up, checkpoint
cadence...) and which alerts are enabled. Its content depends on the catalogue and the severity style
only, never on which monitors exist.

What a series cannot carry (an alert's `for` or severity, a range such as the baseline window or a rate
window from another scrape interval, the dcgm-exporter join, the rack label) keeps a monitor on its own
group (`rule_form` says why, in the terms of catalog/rule_forms.py's list, and the monitor's status.rules
shows it); its custom rules, which the catalogue does not know, always get a small
group of their own.

The publisher may be down or restarting: the first rules of the group latch the published series (they
re-record their own last value while the operator publishes nothing), a job with no series at all is
judged by the catalogue's defaults, and TrainguardMonitorSettingsMissing says when jobs report series
that nothing was published for.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from trainguard.api.common import duration_seconds
from trainguard.api.load import parse_object
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog import ALERTS_BY_NAME, rule_forms
from trainguard.catalog.metrics import (
    MONITOR_ALERT_ENABLED,
    MONITOR_ALERT_THRESHOLD,
    MONITOR_NAMESPACE_LABEL,
    MONITOR_SETTING,
    MONITOR_SETTINGS_PUBLISHED,
    RULE_SETTINGS_METRICS,
)
from trainguard.catalog.rule_forms import (
    ALERT_FOR,
    ALERT_SEVERITY,
    BASELINE_RANGE,
    DCGM_BACKEND,
    LITERAL_PARAM,
    LITERAL_PARAMS,
    OWN_GROUP_FORM,
    RACK_LABEL,
    REASON_MESSAGE_MAX,
    REASONS_MAX,
    RUNBOOK_URL,
    SCRAPE_INTERVAL,
    NotShared,
)
from trainguard.catalog.severity import GRADE, grade_labels
from trainguard.render.policy import EffectiveAlert, EffectivePolicy, effective_policy
from trainguard.render.prometheus import (
    JOB,
    Context,
    Operand,
    Rule,
    _num,
    alert_rule,
    custom_rules,
    monitor_settings,
    recording_rules,
    rule_group,
)
from trainguard.render.rule_split import split_group

PER_MONITOR, SHARED = rule_forms.PER_MONITOR, rule_forms.SHARED
RULE_FORMS = (PER_MONITOR, SHARED)
"""--rule-form: a group per monitor, or the shared group (and the groups of the monitors it cannot judge)."""
SHARED_GROUP = "trainguard.shared"
SHARED_RULE_NAME = "trainguard-shared-rules"
"""The PrometheusRule the operator applies in its own namespace with --rule-form shared."""
SETTINGS_MISSING = "TrainguardMonitorSettingsMissing"
SETTINGS_MISSING_FOR = "10m"
OWN_GROUP = "own_group"
"""The setting that is 1 for a monitor on its own group: the shared group leaves that job alone."""

JOBS = "trainguard:monitor_jobs"
THRESHOLDS = "trainguard:monitor_alert_threshold"
SETTINGS = "trainguard:monitor_setting"
ENABLED = "trainguard:monitor_alert_enabled"
REPORTING = f'group by ({JOB}) (up{{training_job!=""}})'
"""The jobs whose pods are scraped."""


def _default_monitor() -> TrainingJobMonitor:
    obj = parse_object(
        {
            "apiVersion": "trainguard.io/v1alpha1",
            "kind": "TrainingJobMonitor",
            "metadata": {"name": "shared", "namespace": "trainguard"},
            "spec": {"selector": {"matchLabels": {"trainguard.io/shared": "true"}}},
        },
        "the shared form's defaults",
    )
    assert isinstance(obj, TrainingJobMonitor)
    return obj


DEFAULT_MONITOR = _default_monitor()
"""A monitor with every default: the shared group's ranges, interval and fallback numbers are its."""
DEFAULT_POLICY = effective_policy(DEFAULT_MONITOR, [])
_DEFAULT_SETTINGS = monitor_settings(DEFAULT_MONITOR)
_FALLBACK_PARAMS = {a.name: a.params for a in DEFAULT_POLICY.alerts}
"""The numbers the shared group uses for a job without a series of its own."""


@dataclass(frozen=True)
class Reason:
    """One thing of a monitor that keeps it off the shared group: which (catalog/rule_forms.py's list)
    and the monitor's own value, in words."""

    kind: NotShared
    message: str


@dataclass(frozen=True)
class RuleForm:
    """Where a monitor's rules live in the shared form."""

    reasons: tuple[Reason, ...]
    """Why its catalogue rules need a group of its own; empty: the shared group judges it."""
    custom_rules: int = 0

    @property
    def shared(self) -> bool:
        return not self.reasons

    def notes(self) -> list[str]:
        """For the docs and logs: what is not shared, and why."""
        extra = [f"{self.custom_rules} custom rule(s) in a group of their own"] if self.custom_rules else []
        return [r.message for r in self.reasons] + extra

    def status(self) -> dict[str, Any]:
        """The monitor's status.rules under the shared form (api/monitor.py's RulesStatus)."""
        # every field, zeros too: the CRD defaults the counts, and a status written without them would
        # differ from the stored one at every resync (a write each pass)
        return {
            "form": SHARED if self.shared else OWN_GROUP_FORM,
            "reasons": [
                {"reason": r.kind.reason, "message": r.message[:REASON_MESSAGE_MAX]}
                for r in self.reasons[:REASONS_MAX]
            ],
            "moreReasons": max(0, len(self.reasons) - REASONS_MAX),
            "customRules": self.custom_rules,
        }


PER_MONITOR_STATUS: dict[str, Any] = {"form": PER_MONITOR, "reasons": [], "moreReasons": 0, "customRules": 0}
"""status.rules under --rule-form per-monitor: every monitor has its own group, by the operator's choice."""


def rules_status(monitor: TrainingJobMonitor, policy: EffectivePolicy, form: str) -> dict[str, Any]:
    """The monitor's status.rules: which form its rules take under the operator's --rule-form, and why."""
    return rule_form(monitor, policy).status() if form == SHARED else dict(PER_MONITOR_STATUS)


def _differ(duration: str, other: str) -> bool:
    """Two durations that are not the same time ("1h" and "60m" are)."""
    return duration_seconds(duration) != duration_seconds(other)


def rule_form(monitor: TrainingJobMonitor, policy: EffectivePolicy) -> RuleForm:
    """Whether the shared group can judge this monitor, and if not, why: each reason is one of
    catalog/rule_forms.py's NOT_SHARED (what no series can carry), with the monitor's own value."""
    reasons: list[Reason] = []
    spec, default = monitor.spec, DEFAULT_MONITOR.spec
    if _differ(spec.exporter.scrape_interval, default.exporter.scrape_interval):
        reasons.append(Reason(SCRAPE_INTERVAL,
            f"spec.exporter.scrapeInterval {spec.exporter.scrape_interval}: the shared group evaluates "
            f"every {default.exporter.scrape_interval}, its rate windows made for that"))  # fmt: skip
    if spec.exporter.gpu_backend == "dcgm":
        reasons.append(Reason(DCGM_BACKEND,
            "spec.exporter.gpuBackend dcgm: dcgm-exporter's series are joined to the job's pods per monitor"))  # fmt: skip
    for field, value, default_value in (
        ("window", spec.baseline.window, default.baseline.window),
        ("offset", spec.baseline.offset, default.baseline.offset),
    ):
        if _differ(value, default_value):
            reasons.append(Reason(BASELINE_RANGE,
                f"spec.baseline.{field} {value}: a range, which PromQL takes only as a literal"))  # fmt: skip
    if spec.topology.rack_label != default.topology.rack_label:
        reasons.append(Reason(RACK_LABEL,
            f"spec.topology.rackLabel {spec.topology.rack_label}: a label name, not a number"))  # fmt: skip
    if policy.runbook_base_url != DEFAULT_POLICY.runbook_base_url:
        reasons.append(Reason(RUNBOOK_URL, "a policy's spec.runbookBaseUrl: an annotation of the rules"))
    for a in policy.enabled_alerts():
        if _differ(a.for_, a.alert.for_):
            reasons.append(
                Reason(ALERT_FOR, f"{a.name}: for {a.for_} instead of the catalogue's {a.alert.for_}")
            )
        if a.severity != a.alert.severity:
            reasons.append(Reason(ALERT_SEVERITY,
                f"{a.name}: severity {a.severity} instead of the catalogue's {a.alert.severity}"))  # fmt: skip
        for param in LITERAL_PARAMS.get(a.name, ()):
            catalogue = next(x.default for x in a.alert.params if x.name == param)
            if a.p(param) != catalogue:
                reasons.append(Reason(LITERAL_PARAM,
                    f"{a.name}: {param} {_num(a.p(param))}, which PromQL takes only as a literal"))  # fmt: skip
    return RuleForm(tuple(reasons), len(policy.custom_rules))


# ---- the series the operator publishes -----------------------------------------------------------

Sample = tuple[str, dict[str, str], float]


def published_series(monitor: TrainingJobMonitor, policy: EffectivePolicy) -> list[Sample]:
    """The series that tell the shared group about one monitor: what differs from the numbers the group
    falls back to (the catalogue's, a default monitor's) and the alerts its mode or policies turn off,
    and `own_group`, which every monitor has (0: the shared group judges it; 1: a group of its own, and
    nothing else is published). Most monitors keep most defaults, so a few series each. The monitor's
    namespace is `monitor_namespace`: the scrape of the operator sets `namespace` to the operator's own."""
    job = {MONITOR_NAMESPACE_LABEL: monitor.namespace, "training_job": monitor.name}
    if not rule_form(monitor, policy).shared:
        return [(MONITOR_SETTING, job | {"setting": OWN_GROUP}, 1.0)]
    out: list[Sample] = [(MONITOR_SETTING, job | {"setting": OWN_GROUP}, 0.0)]
    out += [
        (MONITOR_SETTING, job | {"setting": k}, v)
        for k, v in monitor_settings(monitor).items()
        if v != _DEFAULT_SETTINGS[k]
    ]
    for a in policy.alerts:
        if not a.enabled:
            out.append((MONITOR_ALERT_ENABLED, job | {"alertname": a.name}, 0.0))
            continue
        out += [
            (MONITOR_ALERT_THRESHOLD, job | {"alertname": a.name, "param": k}, float(v))
            for k, v in a.params.items()
            if v != _FALLBACK_PARAMS[a.name][k]
        ]
    return out


# ---- the shared group ----------------------------------------------------------------------------


def _published(metric: str, by: str) -> str:
    """A published series under the job's own labels, once however many operator replicas publish it."""
    relabelled = f'label_replace({metric}, "namespace", "$1", "{MONITOR_NAMESPACE_LABEL}", "(.+)")'
    return f"max by ({JOB}, {by}) ({relabelled})"


def _latched(recorded: str, metric: str, by: str) -> Rule:
    """The published series, or while the operator publishes nothing, this rule's own last value: a
    threshold outlives its publisher for as long as Prometheus runs (and a restart of it within the
    lookback), at the cost of one sample per series, where last_over_time over an hour reads 240."""
    return {
        "record": recorded,
        "expr": f"{_published(metric, by)} or ({recorded} unless on() group({MONITOR_SETTINGS_PUBLISHED}))",
    }


def input_rules() -> list[Rule]:
    """The published series, latched, then the jobs the group judges: those published (or latched) as
    shared, and while nothing is published, every job that reports series and has no settings at all (a
    monitor created while the operator was down): judged by the catalogue's defaults, never silenced. A
    job the operator publishes nothing for while it publishes is no monitor of it."""
    unknown = f"{REPORTING} unless on({JOB}) {SETTINGS}"
    return [
        _latched(THRESHOLDS, MONITOR_ALERT_THRESHOLD, "alertname, param"),
        _latched(SETTINGS, MONITOR_SETTING, "setting"),
        _latched(ENABLED, MONITOR_ALERT_ENABLED, "alertname"),
        {
            "record": JOBS,
            "expr": f'group by ({JOB}) ({SETTINGS}{{setting="{OWN_GROUP}"}} == 0) or '
            f"({unknown} unless on() group({MONITOR_SETTINGS_PUBLISHED}))",
        },
    ]


def _with_default(series: str, default: float) -> str:
    """A per-job number: its series, or for a job with none (never published) the catalogue's default."""
    return f"({series} or on({JOB}) (0 * {JOBS} + {_num(default)}))"


@dataclass(frozen=True)
class SharedContext(Context):
    """Context for the shared group: every job's series, numbers read from the published series."""

    @property
    def sel(self) -> str:
        return 'training_job!=""'

    @property
    def namespace_matcher(self) -> str:
        return ""

    @property
    def pod_selector(self) -> str:
        return ""

    def trainer(self) -> str:
        inference = f"{self.setting('inference')} == 1"
        return (
            f"{self.m('trainguard_train_step')} unless on({JOB}) {inference} or "
            f"{self.m('trainguard_inference_latency_seconds')} and on({JOB}) {inference}"
        )

    def describe(self, a: EffectiveAlert) -> str:
        return f' (the job\'s numbers: {THRESHOLDS}{{alertname="{a.name}"}})' if a.params else ""

    def p(self, a: EffectiveAlert, name: str) -> Operand:
        return _with_default(f'{THRESHOLDS}{{alertname="{a.name}",param="{name}"}}', a.p(name))

    def setting(self, name: str) -> Operand:
        return _with_default(f'{SETTINGS}{{setting="{name}"}}', _DEFAULT_SETTINGS[name])


def _judged(rule: Rule, unless: str = "") -> Rule:
    """The rule for the jobs the shared group judges, less those `unless` names."""
    expr = f"({rule['expr']}) and on({JOB}) {JOBS}"
    return rule | {"expr": f"{expr} unless on({JOB}) ({unless})" if unless else expr}


def settings_missing_rule(severity_style: str = GRADE) -> Rule:
    """The dead-man alert of the publisher: jobs report series, and no settings were published for them
    (the operator is down, or does not know the job). Their rules keep the last published numbers, or
    the catalogue's defaults."""
    published = f'label_replace({MONITOR_SETTING}, "namespace", "$1", "{MONITOR_NAMESPACE_LABEL}", "(.+)")'
    return {
        "alert": SETTINGS_MISSING,
        "expr": f"count({REPORTING} unless on({JOB}) {published}) > 0",
        "for": SETTINGS_MISSING_FOR,
        "labels": grade_labels("P2", severity_style),
        "annotations": {
            "summary": "No monitor settings are published for training jobs that report series",
            "description": "{{ $value }} training jobs report series but the operator publishes no "
            f"{MONITOR_SETTING} for them: their alerts run on the last published thresholds, or on the "
            "catalogue's defaults. Check the operator's pods and the scrape of its metrics port.",
            "probable_cause": "the operator is down or not scraped, or runs with --rule-form per-monitor "
            "while the shared rules are loaded",
        },
    }


def shared_group(severity_style: str = GRADE, lookups: bool = False) -> dict[str, Any]:
    """The catalogue's rules for every job at once: the same for any set of monitors. Its alerts' correlation
    annotations look nothing up unless `lookups` (--shared-annotation-lookups): the group serves every
    job, and in an alert storm the lookups, a few queries per active alert at every evaluation, would
    cost more than its rules (docs/performance.md)."""
    ctx = SharedContext(DEFAULT_MONITOR, severity_style, lookups)
    recording = [_judged(r) for r in recording_rules(ctx)]
    alerting = [
        _judged(
            alert_rule(ctx, dataclasses.replace(a, enabled=True), DEFAULT_POLICY),
            f'{ENABLED}{{alertname="{a.name}"}} == 0',
        )
        for a in DEFAULT_POLICY.alerts
    ]
    return {
        "name": SHARED_GROUP,
        "interval": DEFAULT_MONITOR.spec.exporter.scrape_interval,
        "rules": input_rules() + recording + alerting + [settings_missing_rule(severity_style)],
    }


def shared_groups(severity_style: str = GRADE, parts: int = 1, lookups: bool = False) -> list[dict[str, Any]]:
    """The shared group, or its rules in at most `parts` groups that Prometheus evaluates in parallel
    (render/rule_split.py, --shared-rule-groups)."""
    return split_group(shared_group(severity_style, lookups), parts, inputs=len(input_rules()))


def monitor_groups(
    monitor: TrainingJobMonitor, policy: EffectivePolicy, severity_style: str = GRADE
) -> list[dict[str, Any]]:
    """What a monitor adds to the shared group: its whole own group when the shared one cannot judge it,
    else a group of its custom rules if it has any, else nothing."""
    if not rule_form(monitor, policy).shared:
        return [rule_group(monitor, policy, severity_style)]
    if not policy.custom_rules:
        return []
    ctx = Context(monitor, severity_style)
    return [
        {
            "name": f"trainguard.{monitor.namespace}.{monitor.name}",
            "interval": monitor.spec.exporter.scrape_interval,
            "rules": custom_rules(ctx, policy),
        }
    ]


assert set(LITERAL_PARAMS) <= set(ALERTS_BY_NAME)


def exposition(judged: list[tuple[TrainingJobMonitor, EffectivePolicy]]) -> str:
    """published_series of every monitor in the text exposition format: for a Prometheus without the
    operator (`trainguard render --format prometheus --rule-form shared`), served by any static
    endpoint, such as node_exporter's textfile collector."""
    samples = [s for m, p in judged for s in published_series(m, p)]
    lines: list[str] = []
    for metric in RULE_SETTINGS_METRICS:
        lines += [f"# HELP {metric.name} {metric.help}", f"# TYPE {metric.name} gauge"]
        if metric.name == MONITOR_SETTINGS_PUBLISHED:
            lines.append(f"{metric.name} {len(judged)}")
            continue
        for name, labels, value in samples:
            if name == metric.name:
                inner = ",".join(f'{k}="{labels[k]}"' for k in metric.labels)
                lines.append(f"{name}{{{inner}}} {_num(value)}")
    return "\n".join(lines) + "\n"
