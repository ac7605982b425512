"""An alert's own signal: the series its rule reads, derived from the rules the renderer produces for
the monitor (render/prometheus.py), never from a table kept by hand beside them. The report plots them
first, with the threshold where the monitor's effective policy gives one, and weighs the catalogue's
probable cause for the alert with their values at the alert time ahead of the inferred findings.

A rule's expression is scanned for the catalogue's metric names, Prometheus' `up` and the names the
monitor's recording rules record (`trainguard:...`, dcgm-exporter's joined `trainguard_dcgm:...`): a
recorded series is plotted as recorded, since it is what the rule compared. The warm-up gate the
baseline alerts share (`and on(...) trainguard:train_step:max > warmup`) only says when the rule may
judge, so it is left out. Pure: the edge (diagnosis/fetch.py) fetches the series."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog import ALERTS_BY_NAME, METRICS_BY_NAME
from trainguard.catalog.metrics import COMMON_LABELS, DCGM_LABELS
from trainguard.diagnosis.model import Evidence, Finding, Series
from trainguard.render.policy import EffectivePolicy
from trainguard.render.prometheus import Context, Rule, rule_group

PROMETHEUS_SERIES: dict[str, tuple[str, ...]] = {"up": COMMON_LABELS}
"""Series Prometheus makes itself that the catalogue's rules read, with the labels the job's scrape gives."""

SELECTORS: tuple[str, ...] = ("pod", "node", "gpu", "interface", "device", "port")
"""An alert's labels that pick its series out of the job's, where the series carries them."""

NOT_PLOTTED: dict[str, str] = {}
"""Catalogue alerts whose rule reads no series a plot can draw, with why (a test keeps it exact)."""

_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{")
_COMPARED = r"\{[^}]*\}\s*(>=|<=|==|!=|>|<)\s*(-?[0-9][0-9.]*(?:e[-+]?[0-9]+)?)(?![0-9A-Za-z_.{(\[])"
_LEADING_BY = re.compile(r"^[^{]*?\bby \(([^)]*)\)")


@dataclass(frozen=True)
class Signal:
    """One series an alert's rule reads, and the number the rule compares it with where that number is
    one of the alert's params in the monitor's effective policy (`param` names it)."""

    series: str
    labels: tuple[str, ...]
    """The labels the series carries (the report scopes it by the alert's selectors among them)."""
    op: str = ""
    threshold: float | None = None
    param: str = ""
    made_of: tuple[str, ...] = ()
    """The series it is recorded from (for a recorded one), with itself: a finding whose evidence reads
    one of them names the alert's own cause."""

    def describe_threshold(self) -> str:
        if self.threshold is None:
            return ""
        return f"fires {self.op} {self.param} = {self.threshold:g}"


@dataclass(frozen=True)
class OwnSignal:
    """What the report shows of the alert itself: its catalogue cause, the series its rule reads and
    those series as fetched for the alert's job, scoped by its selectors."""

    alert: str
    probable_cause: str
    signals: tuple[Signal, ...]
    series: tuple[Series, ...] = ()

    def of(self, name: str) -> list[Series]:
        return [s for s in self.series if s.metric == name]

    @property
    def made_of(self) -> set[str]:
        return {n for sig in self.signals for n in sig.made_of}


def _recorded(rules: Iterable[Rule]) -> dict[str, str]:
    return {r["record"]: r["expr"] for r in rules if "record" in r}


def _known(name: str, recorded: Mapping[str, str]) -> bool:
    return name in METRICS_BY_NAME or name in PROMETHEUS_SERIES or name in recorded


def _labels(name: str, recorded: Mapping[str, str], seen: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The labels a series carries: the catalogue's for its metrics; for a recorded one, those of its
    leading aggregation, else of the first series its expression reads."""
    if name in METRICS_BY_NAME:
        metric = METRICS_BY_NAME[name]
        return tuple(dict.fromkeys((*COMMON_LABELS, *(DCGM_LABELS if metric.is_gpu else ()), *metric.labels)))
    if name in PROMETHEUS_SERIES:
        return PROMETHEUS_SERIES[name]
    expr = recorded.get(name)
    if expr is None or name in seen:
        return ("namespace", "training_job")
    if name.startswith("trainguard_dcgm:"):
        return _labels(name.removeprefix("trainguard_dcgm:"), recorded, seen | {name})
    by = _LEADING_BY.match(expr)
    if by:
        return tuple(x.strip() for x in by.group(1).split(",") if x.strip() and x.strip() != "le")
    first = next((m.group(1) for m in _SELECTOR.finditer(expr) if _known(m.group(1), recorded)), None)
    return _labels(first, recorded, seen | {name}) if first else ("namespace", "training_job")


def sources(name: str, recorded: Mapping[str, str], seen: frozenset[str] = frozenset()) -> set[str]:
    """The series `name` is made of: itself and, for a recorded series, what its expression reads."""
    out = {name}
    expr = recorded.get(name)
    if expr is None or name in seen:
        return out
    for m in _SELECTOR.finditer(expr):
        read = m.group(1)
        for base in (read, re.sub(r"_(bucket|sum|count)$", "", read)):
            if _known(base, recorded):
                out |= sources(base, recorded, seen | {name})
    return out


def _threshold(expr: str, name: str, params: Mapping[str, float]) -> tuple[str, float, str] | None:
    """The number the expression compares `name`'s selector with, where it is one of the params."""
    for m in re.finditer(re.escape(name) + _COMPARED, expr):
        value = float(m.group(2))
        param = next((k for k, v in params.items() if math.isclose(v, value)), None)
        if param is not None:
            return m.group(1), value, param
    return None


def rule_signals(expr: str, recorded: Mapping[str, str], params: Mapping[str, float]) -> tuple[Signal, ...]:
    names = list(dict.fromkeys(m.group(1) for m in _SELECTOR.finditer(expr) if _known(m.group(1), recorded)))
    out = []
    for name in names:
        compared = _threshold(expr, name, params)
        op, value, param = compared if compared else ("", None, "")
        made_of = tuple(sorted(sources(name, recorded)))
        out.append(Signal(name, _labels(name, recorded), op, value, param, made_of))
    return tuple(out)


def alert_signals(monitor: TrainingJobMonitor, policy: EffectivePolicy) -> dict[str, tuple[Signal, ...]]:
    """Every alert the monitor's rule group holds (the catalogue's enabled ones and the policies' own)
    to the series its expression reads, in the order it reads them."""
    group = rule_group(monitor, policy)
    recorded = _recorded(group["rules"])
    gate = f" and {Context(monitor).warmed_up}"
    params = {a.name: a.params for a in policy.alerts}
    return {
        r["alert"]: rule_signals(str(r["expr"]).replace(gate, ""), recorded, params.get(r["alert"], {}))
        for r in group["rules"]
        if "alert" in r
    }


def scope(signal: Signal, alert_labels: Mapping[str, str]) -> dict[str, str]:
    """The alert's selector labels that the signal's series carries: the matchers that pick the
    alert's own pod, node or GPU out of the job's series."""
    return {k: alert_labels[k] for k in SELECTORS if alert_labels.get(k) and k in signal.labels}


def own_signal(name: str, signals: Sequence[Signal], series: Sequence[Series] = ()) -> OwnSignal:
    alert = ALERTS_BY_NAME.get(name)
    return OwnSignal(name, alert.probable_cause if alert else "", tuple(signals), tuple(series))


def _at(s: Series, at: float) -> float | None:
    before = [v for t, v in s.points if t <= at and math.isfinite(v)]
    return before[-1] if before else None


def evidence(own: OwnSignal, at: float) -> list[Evidence]:
    """Each signal's value at the alert time (its last point at or before it): of the series furthest
    past the threshold's side where there are several (the highest for >, the lowest for <)."""
    out = []
    for sig in own.signals:
        valued = [(v, s) for s in own.of(sig.series) if (v := _at(s, at)) is not None]
        if not valued:
            continue
        low = sig.op in ("<", "<=")
        value, s = (min if low else max)(valued, key=lambda p: p[0])
        note = "at the alert" + (
            f"; the rule {sig.describe_threshold()}" if sig.threshold is not None else ""
        )
        out.append(Evidence(sig.series, value, sig.threshold, s.labels, note))
    return out


def own_first(findings: Sequence[Finding], own: OwnSignal) -> tuple[list[Finding], bool]:
    """The findings with those that name the alert's own cause (their evidence reads one of the series
    its rule reads, or one those are recorded from) moved first, the order kept otherwise; and whether
    any does (then the catalogue's cause is not put ahead of them)."""
    read = own.made_of
    named = [f for f in findings if any(e.metric in read for e in f.evidence)]
    return named + [f for f in findings if f not in named], bool(named)
