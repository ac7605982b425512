"""The edge of the diagnostic report: fetch a job's series from Prometheus (prometheus-api-client), its
pods' log lines around the alert and their terminations from the Kubernetes API, its remediation
records and runbook from the monitor, then hand everything to the pure builder in diagnosis/.

The Python client has no `sinceTime` for pod logs, so the window's start is given as `since_seconds`
counted back from now, with `timestamps=true` and `limit_bytes`; the lines are then cut to +-30 s of
the alert by their own timestamps. dcgm-exporter's series (gpuBackend: dcgm) are read through the
catalogue's joined recording rules (`trainguard_dcgm:<name>`) when the plain name has none.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from prometheus_api_client import PrometheusConnect

from trainguard.api import AlertPolicy, InvalidInput, TrainingJobMonitor, parse_object
from trainguard.catalog import ALERTS_BY_NAME, METRICS_BY_NAME
from trainguard.diagnosis import JobEvent, Series, Snapshot, diagnose, labels_of
from trainguard.diagnosis import signals as sig
from trainguard.diagnosis.logs import WINDOW_S, LogLine, parse_timestamped
from trainguard.diagnosis.report import AlertInfo, Report, ReportInput, build
from trainguard.remediation.records import unix
from trainguard.render.policy import effective_policy
from trainguard.render.prometheus import REPORT_CONFIGMAP_PREFIX
from trainguard.render.sidecar import EXPORTER

log = logging.getLogger("trainguard.report")

EXPORTER_INFO = METRICS_BY_NAME["trainguard_exporter_info"].name

STEP_S = 15
LOG_LIMIT_BYTES = 256 * 1024
"""Per container: the window's lines, bounded so a chatty trainer cannot flood the operator."""
SEVERITY_ORDER = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}

FETCHED: tuple[str, ...] = tuple(
    sorted({v for k, v in vars(sig).items() if k.isupper() and isinstance(v, str) and not k.startswith("_")})
)
"""Every series a rule or a plot reads."""


class RangeQuery(Protocol):
    """What the report needs of prometheus_api_client.PrometheusConnect."""

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any: ...

    def custom_query_range(
        self,
        query: str,
        start_time: datetime,
        end_time: datetime,
        step: str,
        params: dict[str, Any] | None = None,
    ) -> Any: ...


def prometheus_client(url: str, timeout: int = 10) -> RangeQuery:
    """prometheus-api-client's PrometheusConnect, with a timeout on every query."""
    client: RangeQuery = PrometheusConnect(url=url, disable_ssl=False, timeout=timeout)
    return client


def _quoted(v: str) -> str:
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _job(namespace: str, job: str) -> str:
    return f"namespace={_quoted(namespace)},training_job={_quoted(job)}"


def parse_range(result: Iterable[dict[str, Any]], metric: str) -> list[Series]:
    """A range query's matrix as Series of `metric` (labels without __name__)."""
    out = []
    for item in result:
        labels = {k: str(v) for k, v in (item.get("metric") or {}).items() if k != "__name__"}
        pts = tuple((float(t), float(v)) for t, v in item.get("values") or [])
        out.append(Series(metric, labels_of(labels), pts))
    return out


def fetch_series(
    prom: RangeQuery, namespace: str, job: str, at: float, *, before: float, after: float
) -> list[Series]:
    start, end = datetime.fromtimestamp(at - before, UTC), datetime.fromtimestamp(at + after, UTC)
    series: list[Series] = []
    for metric in FETCHED:
        names = [metric, f"trainguard_dcgm:{metric}"] if metric.startswith("DCGM_FI_") else [metric]
        for name in names:
            got = parse_range(
                prom.custom_query_range(f"{name}{{{_job(namespace, job)}}}", start, end, f"{STEP_S}s"), metric
            )
            if got:
                series += got
                break
    return series


def _instant(prom: RangeQuery, query: str, at: float) -> list[dict[str, Any]]:
    return list(prom.custom_query(query, params={"time": f"{at:.3f}"}) or [])


def trace_id(prom: RangeQuery, namespace: str, job: str, at: float) -> str:
    for item in _instant(prom, f"{EXPORTER_INFO}{{{_job(namespace, job)}}}", at):
        tid = (item.get("metric") or {}).get("trace_id")
        if tid:
            return str(tid)
    return ""


def firing(prom: RangeQuery, namespace: str, job: str, at: float) -> list[dict[str, str]]:
    """The job's alerts firing at `at` (Prometheus' ALERTS), most severe first."""
    items = _instant(prom, f'ALERTS{{alertstate="firing",{_job(namespace, job)}}}', at)
    labels = [{k: str(v) for k, v in (i.get("metric") or {}).items()} for i in items]
    return sorted(
        labels, key=lambda m: (SEVERITY_ORDER.get(m.get("severity", ""), 9), m.get("alertname", ""))
    )


def pod_logs(core: Any, namespace: str, pods: list[dict[str, Any]], at: float, now: float) -> list[LogLine]:
    """Each container's lines from WINDOW_S before the alert (except the exporter's), bounded in bytes."""
    since = max(1, math.ceil(now - (at - WINDOW_S)))
    lines: list[LogLine] = []
    for pod in pods:
        name = pod["metadata"]["name"]
        for c in (pod.get("spec") or {}).get("containers") or []:
            if c.get("name") == EXPORTER:
                continue
            try:
                text = core.read_namespaced_pod_log(
                    name, namespace, container=c["name"], timestamps=True, since_seconds=since,
                    limit_bytes=LOG_LIMIT_BYTES, _request_timeout=30,
                )  # fmt: skip
            except Exception as exc:  # a pod gone or not started has no log: the report goes on
                log.info("no log of %s/%s container %s: %s", namespace, name, c.get("name"), exc)
                continue
            lines += parse_timestamped(name, str(text or ""), c["name"])
    return lines


def pod_events(pods: list[dict[str, Any]]) -> list[JobEvent]:
    """Terminations the pods' statuses remember (OOMKilled, Error, ...), as job faults."""
    events = []
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName") or ""
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if cs.get("name") == EXPORTER:
                continue
            for state in (
                (cs.get("state") or {}).get("terminated"),
                (cs.get("lastState") or {}).get("terminated"),
            ):
                if state and state.get("finishedAt") and state.get("reason") != "Completed":
                    at = unix(str(state["finishedAt"]))
                    events.append(
                        JobEvent(at, str(state.get("reason") or "Terminated"), pod["metadata"]["name"], node)
                    )
    return events


def runbook_url(kube: Any, monitor: TrainingJobMonitor, alert: str) -> str:
    policies = []
    for ref in monitor.spec.policy_refs:
        body = kube.get_policy(monitor.namespace, ref.name)
        try:
            policy = parse_object({k: v for k, v in (body or {}).items() if k != "status"}) if body else None
        except InvalidInput:
            policy = None
        if isinstance(policy, AlertPolicy):
            policies.append(policy)
    base = effective_policy(monitor, policies).runbook_base_url
    return f"{base}#{alert.lower()}" if base and alert else ""


def build_report(
    kube: Any,
    prom: RangeQuery,
    namespace: str,
    name: str,
    *,
    alert: str | None,
    at: float,
    now: float,
    labels: dict[str, str] | None = None,
) -> Report:
    """Everything fetched for one monitor's job around `at`, then the pure builder. The alert's labels are
    those firing at `at` (the most severe when `alert` is None) unless given."""
    body = kube.get_monitor(namespace, name)
    if body is None:
        raise LookupError(f"no TrainingJobMonitor {namespace}/{name}")
    monitor = parse_object({k: v for k, v in body.items() if k != "status"})
    if not isinstance(monitor, TrainingJobMonitor):
        raise LookupError(f"{namespace}/{name} is not a TrainingJobMonitor")
    if labels is None:
        fired = firing(prom, namespace, name, at)
        labels = next(
            (f for f in fired if f.get("alertname") == alert), fired[0] if fired and not alert else {}
        )
    alert_name = alert or labels.get("alertname", "") or "on demand"
    snap_series = fetch_series(prom, namespace, name, at, before=1800, after=150)
    pods = kube.list_pods(namespace, monitor.spec.selector.to_selector_string())
    snapshot = Snapshot(at, tuple(snap_series), tuple(pod_events(pods)), alert_name)
    info = AlertInfo(
        alert_name,
        labels.get("severity", ""),
        at,
        namespace,
        name,
        node=labels.get("node", ""),
        gpu=labels.get("gpu", ""),
        pod=labels.get("pod", ""),
        summary="" if labels else "report on demand: no firing alert of that name at this time",
        runbook_url=runbook_url(kube, monitor, alert_name if labels else ""),
        trace_id=trace_id(prom, namespace, name, at),
    )
    records = list(((body.get("status") or {}).get("remediations")) or [])
    logs = pod_logs(kube.core, namespace, pods, at, now)
    return build(ReportInput(info, snapshot, diagnose(snapshot), logs, records))


# ---- the P2 pass: a report per firing P2, in a ConfigMap owned by the monitor, linked from an Event ----

REPORT_SEVERITY = "P2"
CONFIGMAP_LIMIT = 900 * 1024
"""Under a ConfigMap's 1 MiB: past it the HTML (with its plots) is left out and the Markdown kept."""


def report_name(monitor: str, alert: dict[str, str]) -> str:
    """One ConfigMap per firing alert, stable across passes and operator restarts (its existence is the
    record that the report was written), named by the alert's identity: its name and its catalogue
    scope's labels. The P2 rule's `report_configmap` annotation derives the same name in Prometheus
    (render/prometheus.report_configmap_template), so the notification names the ConfigMap."""
    alertname = alert.get("alertname", "")
    spec = ALERTS_BY_NAME.get(alertname)
    scope = spec.scope.labels if spec else ()
    rest = [alert.get(k, "") for k in scope if k not in ("namespace", "training_job")]
    joined = "-".join([REPORT_CONFIGMAP_PREFIX, monitor, alertname, *rest]).lower()
    return re.sub("[^a-z0-9]+", "-", joined)[:253].rstrip("-")


def report_configmap(
    body: dict[str, Any], name: str, alert: dict[str, str], report: Report
) -> dict[str, Any]:
    meta = body["metadata"]
    data = {"report.md": report.markdown}
    if len(report.markdown) + len(report.html) < CONFIGMAP_LIMIT:
        data["report.html"] = report.html
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {
                "app.kubernetes.io/managed-by": "trainguard",
                "trainguard.io/monitor": meta["name"],
                "trainguard.io/alert": alert.get("alertname", "")[:63],
            },
            "ownerReferences": [
                {
                    "apiVersion": body["apiVersion"],
                    "kind": body["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                }
            ],
        },
        "data": data,
    }


def active_at(prom: RangeQuery, namespace: str, job: str, alert: dict[str, str], now: float) -> float:
    """When the alert became active (ALERTS_FOR_STATE's value), so the report centres on the onset;
    now when Prometheus does not say."""
    want = {k: v for k, v in alert.items() if k not in ("alertstate", "__name__")}
    name = _quoted(alert.get("alertname", ""))
    for item in _instant(prom, f"ALERTS_FOR_STATE{{alertname={name},{_job(namespace, job)}}}", now):
        labels = {k: str(v) for k, v in (item.get("metric") or {}).items() if k != "__name__"}
        if labels == want:
            return float(item["value"][1])
    return now


def open_command(namespace: str, name: str) -> str:
    """What a person runs to open a report (the Event says it)."""
    return f"kubectl -n {namespace} get configmap {name} -o jsonpath='{{.data.report\\.html}}' > {name}.html"


@dataclass
class DiagnosticReports:
    """On the leader's periodic pass: every monitor's firing P2 alerts (Prometheus' ALERTS), each
    reported once into a ConfigMap owned by the monitor (so it goes with it) and an Event on the monitor
    naming it. create-if-absent is the once: a ConfigMap already there means already reported."""

    kube: Any
    leader: Callable[[], bool]
    prometheus: RangeQuery | None
    clock: Callable[[], float] = time.time
    check_s: float = 60.0
    _next: float = 0.0
    _done: set[tuple[str, str]] = field(default_factory=set)

    def run(self) -> int:
        now = self.clock()
        if self.prometheus is None or now < self._next or not self.leader():
            return 0
        self._next = now + self.check_s
        written = 0
        for body in self.kube.list_monitors():
            meta = body.get("metadata") or {}
            ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
            try:
                written += self._one(body, ns, name, now)
            except Exception as exc:
                log.warning("diagnostic reports of %s/%s failed: %s", ns, name, exc)
        return written

    def _one(self, body: dict[str, Any], ns: str, name: str, now: float) -> int:
        assert self.prometheus is not None
        written = 0
        for alert in firing(self.prometheus, ns, name, now):
            if alert.get("severity") != REPORT_SEVERITY:
                continue
            cm_name = report_name(name, alert)
            if (ns, cm_name) in self._done:
                continue
            at = active_at(self.prometheus, ns, name, alert, now)
            report = build_report(
                self.kube,
                self.prometheus,
                ns,
                name,
                alert=alert.get("alertname"),
                at=at,
                now=now,
                labels=alert,
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
