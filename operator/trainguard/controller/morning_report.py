"""The morning report in the running operator: on the leader's periodic pass, each monitor whose quiet
hours have just ended gets one report of its night (remediation/morning_report.py), posted to
Alertmanager for its IM and e-mail receivers.

Once per night: after posting, the leader writes the night into the monitor's annotation
`trainguard.io/morning-report` (kopf ignores annotations under the operator's `trainguard.io` prefix,
so this starts no reconcile), and a night whose key is there is not reported again, after a restart or
a change of leader too. A crash between the post and the annotation posts the same alert again, which
Alertmanager does not notify twice (the same labels, its group notified within repeat_interval).
A failure (Prometheus or Alertmanager down) writes nothing and is retried RETRY_S later, until the
night's grace (remediation.morning_report.GRACE_S) is over.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_api_client import PrometheusConnect

from trainguard.api import GROUP, VERSION, AlertPolicy, InvalidInput, TrainingJobMonitor, parse_object
from trainguard.remediation import alertmanager
from trainguard.remediation import morning_report as report
from trainguard.render.policy import effective_policy

log = logging.getLogger("trainguard.morning_report")

MARKER = "trainguard.io/morning-report"
"""Annotation of a monitor: the `night` key of the last report sent for it."""
CHECK_S = 60.0
"""How often the pass looks for a night that has ended (it reads each monitor's policies)."""
RETRY_S = 300.0


def prometheus_client(url: str, timeout: int = 10) -> report.PrometheusQuery:
    """prometheus-api-client's PrometheusConnect, with a timeout on every query."""
    client: report.PrometheusQuery = PrometheusConnect(url=url, disable_ssl=False, timeout=timeout)
    return client


@dataclass
class MorningReports:
    kube: Any
    """list_monitors() and get_policy(ns, name) of controller.kube.Kube, and its `custom` client (the
    marker is a merge patch of the monitor's annotations)."""
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
        for body in self.kube.list_monitors():
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
        monitor = _parsed(body)
        if not isinstance(monitor, TrainingJobMonitor):
            return 0
        policies = []
        for ref in monitor.spec.policy_refs:
            policy = _parsed(self.kube.get_policy(monitor.namespace, ref.name))
            if not isinstance(policy, AlertPolicy):
                return 0  # its reconcile reports the monitor Degraded
            policies.append(policy)
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
        self.kube.custom.patch_namespaced_custom_object(
            GROUP, VERSION, ns, "trainingjobmonitors", name,
            {"metadata": {"annotations": {MARKER: night.key}}}, _request_timeout=getattr(self.kube, "timeout", 30.0),
        )  # fmt: skip
        return 1 if rows else 0


def _parsed(body: dict[str, Any] | None) -> TrainingJobMonitor | AlertPolicy | None:
    if body is None:
        return None
    try:
        return parse_object({k: v for k, v in body.items() if k != "status"})
    except InvalidInput:
        return None
