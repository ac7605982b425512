"""The status of one monitored job, pure: its health, alerts, throughput against baseline, checkpoint,
last remediation and training time lost, from what status/fetch.py read.

Training time lost, as defined here (docs/diagnosis.md): over the monitor's finished remediation
records that stopped training (not a dry run, a Pause or RestartGang step that succeeded), the sum of
  - the stop: from the record's creation (the alert reaching the operator) to its last update (its
    last step done: the gang restarted and placed), a lower bound of fault-to-resume, since the pods
    still load the checkpoint after it;
  - the redo, for a record whose RestartGang succeeded: the steps since the last full checkpoint at the
    record's creation (the highest trainguard_train_step minus the highest
    trainguard_checkpoint_last_step{kind="full"} of the 5 minutes before it) divided by the job's step
    rate then (deriv of trainguard_train_step over those 5 minutes: the slope of its samples, right for
    a job younger than the window, where rate() would divide by all 5 minutes), the work the gang does
    again.
A redo Prometheus cannot tell (the series gone past retention) counts 0 and the total is marked "+?".
Records beyond the 50 the status keeps are not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainguard.catalog import SEVERITY_ORDER
from trainguard.catalog.severity import grade_of
from trainguard.remediation.goodput import Goodput, monitor_goodput
from trainguard.times import unix

THROUGHPUT = "trainguard:train_tokens_per_second_per_gpu:avg"
BASELINE = "trainguard:train_tokens_per_second_per_gpu:avg:baseline_mean"
CHECKPOINT_STEP = "trainguard_checkpoint_last_step"
CHECKPOINT_TIME = "trainguard_checkpoint_last_success_timestamp_seconds"
TRAIN_STEP = "trainguard_train_step"
STOPPING_STEPS = frozenset({"Pause", "RestartInPlace", "RestartGang", "ReplacePod"})
RESTARTS = frozenset({"RestartInPlace", "RestartGang", "ReplacePod"})
"""A restart redoes the steps since the checkpoint it resumed from: in place, by new pods, or the faulty
node's pod replaced through its owner."""
REDO_WINDOW = "5m"
"""The redo is read over the window before a record's creation, not at that instant: by then the failed
pod's target may be gone and its series marked stale."""


@dataclass(frozen=True)
class Alert:
    name: str
    severity: str
    node: str = ""
    gpu: str = ""


@dataclass(frozen=True)
class Series:
    """The job's instant values read from Prometheus; None where the series is absent."""

    throughput: float | None = None
    baseline: float | None = None
    checkpoint_step: float | None = None
    checkpoint_time: float | None = None
    lost_now: Mapping[str, float] = field(default_factory=dict)
    """Share of wall time lost now by each cause the sidecars see and the records cannot (stall,
    checkpoint_stall, slow_rank: the goodput recording rules, render/prometheus.py); empty without them."""
    ettr_all: float | None = None
    """The ETTR over the rules' window (an hour) with every cause, the records' too (trainguard:job_ettr:ratio)."""


@dataclass(frozen=True)
class Redo:
    """At a record's creation: the job's step, its last full checkpoint's step and its step rate (/s)."""

    step: float | None
    checkpoint_step: float | None
    rate: float | None

    @property
    def seconds(self) -> float | None:
        if self.step is None or self.checkpoint_step is None or not self.rate or self.rate <= 0:
            return None
        return max(0.0, self.step - self.checkpoint_step) / self.rate


@dataclass(frozen=True)
class Remediation:
    alert: str
    phase: str
    steps: str
    """The step kinds, in order (`Pause,RequestCheckpoint,Cordon,...`)."""
    created: float
    updated: float
    node: str = ""
    dry_run: bool = False


@dataclass(frozen=True)
class JobStatus:
    namespace: str
    name: str
    health: str
    """Healthy, Degraded (a P1 firing), Critical (a P0 firing), NotReady (the monitor's Ready is not True)."""
    ready_reason: str
    alerts: tuple[Alert, ...]
    series: Series
    now: float
    last_remediation: Remediation | None
    lost_s: float
    lost_partial: bool
    """A redo could not be told: `lost_s` is a lower bound."""
    remediations: int = 0
    goodput: Goodput | None = None
    """What the operator's goodput metrics export (remediation/goodput.py); None without a creation time."""
    rules_form: str = ""
    """The monitor's status.rules.form (per-monitor, shared, own-group); "" before the operator wrote it."""
    rules_reasons: tuple[str, ...] = ()
    """Why its rules keep a group of their own under the shared form (status.rules.reasons' messages)."""

    @property
    def by_severity(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for a in self.alerts:
            counts[a.severity or "?"] = counts.get(a.severity or "?", 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: SEVERITY_ORDER.get(kv[0], 9)))

    @property
    def throughput_ratio(self) -> float | None:
        s = self.series
        if s.throughput is None or not s.baseline:
            return None
        return s.throughput / s.baseline

    @property
    def checkpoint_age_s(self) -> float | None:
        t = self.series.checkpoint_time
        return None if t is None or t <= 0 else max(0.0, self.now - t)


def _ready(body: Mapping[str, Any]) -> tuple[bool, str]:
    for c in (body.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return str(c.get("status")) == "True", str(c.get("reason") or "")
    return False, "NoStatus"


def health(ready: bool, alerts: Iterable[Alert]) -> str:
    """The worst of: a P0 firing (Critical), the monitor not Ready (NotReady), a P1 firing (Degraded)."""
    severities = {a.severity for a in alerts}
    if "P0" in severities:
        return "Critical"
    if not ready:
        return "NotReady"
    if "P1" in severities:
        return "Degraded"
    return "Healthy"


def _remediation(record: Mapping[str, Any]) -> Remediation:
    return Remediation(
        alert=str(record.get("alert", "")),
        phase=str(record.get("phase", "")),
        steps=",".join(str(s.get("kind", "")) for s in record.get("steps") or []),
        created=unix(str(record.get("created", ""))),
        updated=unix(str(record.get("updated", ""))),
        node=str(record.get("node", "")),
        dry_run=bool(record.get("dryRun")),
    )


def stopped_training(record: Mapping[str, Any]) -> bool:
    """Finished, not a dry run, and a step that stops training (Pause, a restart) succeeded."""
    if record.get("dryRun") or record.get("phase") not in ("Succeeded", "Failed"):
        return False
    return any(
        s.get("kind") in STOPPING_STEPS and s.get("phase") == "Succeeded" for s in record.get("steps") or []
    )


def restarted(record: Mapping[str, Any]) -> bool:
    return any(s.get("kind") in RESTARTS and s.get("phase") == "Succeeded" for s in record.get("steps") or [])


def time_lost(records: Sequence[Mapping[str, Any]], redo: Mapping[str, Redo]) -> tuple[float, bool]:
    """Seconds of training lost (module docstring) and whether a redo was unknown (a lower bound)."""
    total, partial = 0.0, False
    for r in records:
        if not stopped_training(r):
            continue
        total += max(0.0, unix(str(r.get("updated", ""))) - unix(str(r.get("created", ""))))
        if restarted(r):
            seconds = redo.get(str(r.get("id", "")), Redo(None, None, None)).seconds
            if seconds is None:
                partial = True
            else:
                total += seconds
    return total, partial


def alerts_of(labels: Iterable[Mapping[str, str]]) -> tuple[Alert, ...]:
    """Distinct alerts (name, severity, node, gpu), most severe first."""
    got = {Alert(m.get("alertname", ""), grade_of(m), m.get("node", ""), m.get("gpu", "")) for m in labels}
    return tuple(sorted(got, key=lambda a: (SEVERITY_ORDER.get(a.severity, 9), a.name, a.node, a.gpu)))


def job_status(
    body: Mapping[str, Any],
    alerts: Iterable[Mapping[str, str]],
    series: Series,
    redo: Mapping[str, Redo],
    now: float,
) -> JobStatus:
    """One job's status from its monitor (with status), its firing alerts' labels and its series."""
    meta = body.get("metadata") or {}
    ready, reason = _ready(body)
    got = alerts_of(alerts)
    records = list((body.get("status") or {}).get("remediations") or [])
    lost, partial = time_lost(records, redo)
    newest = max(records, key=lambda r: unix(str(r.get("created", "")))) if records else None
    rules = (body.get("status") or {}).get("rules") or {}
    return JobStatus(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        health=health(ready, got),
        ready_reason=reason,
        alerts=got,
        series=series,
        now=now,
        last_remediation=_remediation(newest) if newest else None,
        lost_s=lost,
        lost_partial=partial,
        remediations=len(records),
        goodput=monitor_goodput(body, now) if meta.get("creationTimestamp") else None,
        rules_form=str(rules.get("form") or ""),
        rules_reasons=tuple(
            str(r.get("message") or r.get("reason") or "") for r in rules.get("reasons") or []
        ),
    )
