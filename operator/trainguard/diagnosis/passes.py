"""The reports in the running operator, on the leader's periodic pass (controller/periodic.Loop), reading
the watch caches.

Diagnostic reports: every monitor's firing P2 alerts (Prometheus' ALERTS), each reported once into a
ConfigMap owned by the monitor (diagnosis/configmap.py) and an Event on the monitor naming it.

Morning reports: each monitor whose quiet hours have just ended gets one report of its night
(diagnosis/morning.py), posted to Alertmanager for its IM and e-mail receivers.

Once per night: after posting, the leader writes the night into the monitor's annotation
`trainguard.io/morning-report` (kopf ignores annotations under the operator's `trainguard.io` prefix,
so this starts no reconcile), and a night whose key is there is not reported again, after a restart or
a change of leader too. A crash between the post and the annotation posts the same alert again, which
Alertmanager does not notify twice (the same labels, its group notified within repeat_interval).
A failure (Prometheus or Alertmanager down) writes nothing and is retried RETRY_S later, until the
night's grace (diagnosis.morning.GRACE_S) is over.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainguard.api import PolicyProblem, monitor_of, policies_for
from trainguard.catalog.severity import grade_of
from trainguard.clients import alertmanager
from trainguard.diagnosis import morning as report
from trainguard.diagnosis.configmap import REPORT_SEVERITY, open_command, report_configmap, report_name
from trainguard.diagnosis.fetch import (
    RangeQuery,
    ReportAPI,
    ReportReads,
    active_at,
    build_report,
    firing_by_job,
)
from trainguard.render.policy import effective_policy

log = logging.getLogger("trainguard.morning_report")

MARKER = "trainguard.io/morning-report"
"""Annotation of a monitor: the `night` key of the last report sent for it."""
CHECK_S = 60.0
"""How often the pass looks for a night that has ended (it reads each monitor's policies)."""
RETRY_S = 300.0


Obj = dict[str, Any]


class PassReads(ReportReads, Protocol):
    def monitors(self) -> list[Obj]: ...


class PassAPI(ReportAPI, Protocol):
    def create_if_absent(self, obj: Obj) -> bool: ...

    def post_event(self, regarding: Obj, reason: str, message: str, type_: str = "Normal") -> None: ...

    def patch_monitor(self, namespace: str, name: str, patch: Obj) -> Obj: ...


@dataclass
class MorningReports:
    kube: PassAPI
    """The marker is a merge patch of the monitor's annotations."""
    reads: PassReads
    leader: Callable[[], bool]
    alertmanager_url: str | None
    prometheus: report.PrometheusQuery | None
    clock: Callable[[], float] = time.time
    check_s: float = CHECK_S
    _next_check: float = 0.0
    _retry_at: dict[tuple[str, str], float] = field(default_factory=dict)
    _warned: bool = False

    def run(self) -> int:
        """One pass (the leader's, at most every `check_s`): returns how many reports were posted."""
        now = self.clock()
        if now < self._next_check or not self.leader():
            return 0
        self._next_check = now + self.check_s
        if self.prometheus is None or not self.alertmanager_url:
            if not self._warned:
                log.info("no morning reports: they need the Prometheus URL (TRAINGUARD_PROMETHEUS_URL) and "
                         "--alertmanager-url")  # fmt: skip
                self._warned = True
            return 0
        posted = 0
        for body in self.reads.monitors():
            meta = body.get("metadata") or {}
            ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
            if now < self._retry_at.get((ns, name), 0.0):
                continue
            try:
                posted += self._one(body, now)
            except Exception as exc:
                self._retry_at[(ns, name)] = now + RETRY_S
                log.warning("morning report of %s/%s failed, retried in %ds: %s", ns, name, int(RETRY_S), exc)
        return posted

    def _one(self, body: dict[str, Any], now: float) -> int:
        assert self.prometheus is not None and self.alertmanager_url
        monitor = monitor_of(body)
        if monitor is None:
            return 0
        try:
            policies = policies_for(monitor, self.reads.policy)
        except PolicyProblem:
            return 0  # its reconcile reports the monitor Degraded
        quiet = effective_policy(monitor, policies).quiet_hours
        sent = ((body.get("metadata") or {}).get("annotations") or {}).get(MARKER)
        night = report.due(quiet, now, sent)
        if night is None:
            return 0
        ns, name = monitor.namespace, monitor.name
        series, firing = report.query_night(self.prometheus, ns, name, night, now)
        rows = report.tally(series, firing, quiet.allowlist)
        if rows:
            summary, description = report.report_text(ns, name, night, rows)
            until = report.next_night_start(quiet, now)
            alert = report.report_alert(
                ns, name, night, summary=summary, description=description, now=now, until=until
            )
            alertmanager.post_alerts(self.alertmanager_url, [alert], clock=lambda: now)
            log.info("morning report of %s/%s for the night to %s: %s", ns, name, night.key, summary)
        else:
            log.info("morning report of %s/%s for the night to %s: nothing fired", ns, name, night.key)
        self.kube.patch_monitor(ns, name, {"metadata": {"annotations": {MARKER: night.key}}})
        return 1 if rows else 0


@dataclass
class DiagnosticReports:
    """On the leader's periodic pass: every monitor's firing P2 alerts (Prometheus' ALERTS, one query a
    pass), each reported once into a ConfigMap owned by the monitor (so it goes with it) and an Event on
    the monitor naming it. create-if-absent is the once: a ConfigMap already there means already reported."""

    kube: PassAPI
    reads: PassReads
    leader: Callable[[], bool]
    prometheus: RangeQuery | None
    clock: Callable[[], float] = time.time
    check_s: float = 60.0
    pod_logs: bool = True
    """Quote the job's pod logs (RBAC: get on pods/log cluster-wide); False: `--no-pod-logs`."""
    _next: float = 0.0
    _done: set[tuple[str, str]] = field(default_factory=set)

    def run(self) -> int:
        now = self.clock()
        if self.prometheus is None or now < self._next or not self.leader():
            return 0
        self._next = now + self.check_s
        try:
            jobs = firing_by_job(self.prometheus, now)
        except Exception as exc:
            log.warning("diagnostic reports: the firing alerts cannot be read now: %s", exc)
            return 0
        written = 0
        for body in self.reads.monitors():
            meta = body.get("metadata") or {}
            ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
            if (ns, name) not in jobs:
                continue
            try:
                written += self._one(body, ns, name, now, jobs[(ns, name)])
            except Exception as exc:
                log.warning("diagnostic reports of %s/%s failed: %s", ns, name, exc)
        return written

    def _one(self, body: dict[str, Any], ns: str, name: str, now: float, alerts: list[dict[str, str]]) -> int:
        assert self.prometheus is not None
        written = 0
        for alert in alerts:
            if grade_of(alert) != REPORT_SEVERITY:
                continue
            cm_name = report_name(name, alert)
            if (ns, cm_name) in self._done:
                continue
            at = active_at(self.prometheus, ns, name, alert, now)
            report = build_report(
                self.kube,
                self.reads,
                self.prometheus,
                ns,
                name,
                alert=alert.get("alertname"),
                at=at,
                now=now,
                labels=alert,
                read_logs=self.pod_logs,
            )
            created = self.kube.create_if_absent(report_configmap(body, cm_name, alert, report))
            self._done.add((ns, cm_name))
            if not created:
                continue
            self.kube.post_event(
                body,
                "DiagnosticReport",
                f"{alert.get('alertname')} ({REPORT_SEVERITY}): report in ConfigMap {cm_name}; open it with: "
                + open_command(ns, cm_name),
            )
            written += 1
        return written
