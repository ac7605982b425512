"""The edge of the diagnostic report: fetch a job's series from Prometheus (prometheus-api-client), its
pods' log lines around the alert and their terminations from the Kubernetes API, its remediation
records and runbook from the monitor, then hand everything to the pure builder in diagnosis/.

The Python client has no `sinceTime` for pod logs, so the window's start is given as `since_seconds`
counted back from now, with `timestamps=true` and `limit_bytes`; the lines are then cut to +-30 s of
the alert by their own timestamps. dcgm-exporter's series (gpuBackend: dcgm) are read through the
catalogue's joined recording rules (`trainguard_dcgm:<name>`) when the plain name has none. The alert's
own signal (the series its rule reads, diagnosis/own_signal.py) is fetched too, scoped by the alert's
pod, node, GPU (and interface, device, port) labels where its series carry them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Protocol

from trainguard.api import PolicyProblem, TrainingJobMonitor, parse_spec, policies_for
from trainguard.api.common import LabelSelector
from trainguard.api.promql import quoted
from trainguard.catalog import METRICS_BY_NAME, SEVERITY_ORDER
from trainguard.catalog.severity import grade_of
from trainguard.diagnosis import JobEvent, Series, Snapshot, diagnose, labels_of
from trainguard.diagnosis import signals as sig
from trainguard.diagnosis.logs import WINDOW_S, LogLine, parse_timestamped
from trainguard.diagnosis.own_signal import OwnSignal, Signal, alert_signals, own_signal, scope
from trainguard.diagnosis.report import AlertInfo, Report, ReportInput, build
from trainguard.render.policy import EffectivePolicy, effective_policy
from trainguard.render.sidecar import EXPORTER
from trainguard.times import unix

log = logging.getLogger("trainguard.report")

EXPORTER_INFO = METRICS_BY_NAME["trainguard_exporter_info"].name

STEP_S = 15
LOG_LIMIT_BYTES = 256 * 1024
"""Per container: the window's lines, bounded so a chatty trainer cannot flood the operator."""

FETCHED: tuple[str, ...] = tuple(
    sorted({v for k, v in vars(sig).items() if k.isupper() and isinstance(v, str) and not k.startswith("_")})
)
"""Every series a diagnosis rule or a generic plot reads (the alert's own are fetched by fetch_own)."""


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


Obj = dict[str, Any]


class ReportAPI(Protocol):
    """kube.Kube's calls a report makes: the monitor read now (its records), and the pods' logs."""

    def get_monitor(self, namespace: str, name: str) -> Obj | None: ...

    def pod_log(self, namespace: str, pod: str, container: str, *, since_s: int, limit_bytes: int) -> str: ...


class ReportReads(Protocol):
    """kube.ClusterCache in the operator, kube.ApiReads in `trainguard report`."""

    def policy(self, namespace: str, name: str) -> Obj | None: ...

    def pods(self, namespace: str, selector: LabelSelector) -> list[Obj]: ...


def _job(namespace: str, job: str) -> str:
    return f"namespace={quoted(namespace)},training_job={quoted(job)}"


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


def fetch_own(
    prom: RangeQuery,
    namespace: str,
    job: str,
    at: float,
    *,
    signals: Iterable[Signal],
    labels: dict[str, str],
    before: float,
    after: float,
) -> list[Series]:
    """The series the alert's rule reads, as recorded where the rule reads a recorded one, narrowed to
    the alert's own pod, node or GPU where the series carries that label."""
    start, end = datetime.fromtimestamp(at - before, UTC), datetime.fromtimestamp(at + after, UTC)
    series: list[Series] = []
    for sig_ in signals:
        matchers = _job(namespace, job) + "".join(f",{k}={quoted(v)}" for k, v in scope(sig_, labels).items())
        query = f"{sig_.series}{{{matchers}}}"
        series += parse_range(prom.custom_query_range(query, start, end, f"{STEP_S}s"), sig_.series)
    return series


def own_signal_of(
    prom: RangeQuery,
    monitor: TrainingJobMonitor,
    policy: EffectivePolicy,
    alert: str,
    *,
    labels: dict[str, str],
    at: float,
) -> OwnSignal | None:
    """The alert's own signal fetched around `at`; None for an alert the monitor's rules do not hold."""
    signals = alert_signals(monitor, policy).get(alert)
    if signals is None:
        return None
    got = fetch_own(
        prom, monitor.namespace, monitor.name, at, signals=signals, labels=labels, before=1800, after=150
    )
    return own_signal(alert, signals, got)


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
    return _most_severe_first([{k: str(v) for k, v in (i.get("metric") or {}).items()} for i in items])


def firing_by_job(prom: RangeQuery, at: float) -> dict[tuple[str, str], list[dict[str, str]]]:
    """Every job's alerts firing at `at`, by (namespace, training_job), each most severe first: one query
    for a pass over every monitor, not one a monitor (2,000 a minute at 2,000 jobs)."""
    jobs: dict[tuple[str, str], list[dict[str, str]]] = {}
    for item in _instant(prom, 'ALERTS{alertstate="firing",training_job!=""}', at):
        labels = {k: str(v) for k, v in (item.get("metric") or {}).items()}
        jobs.setdefault((labels.get("namespace", ""), labels.get("training_job", "")), []).append(labels)
    return {key: _most_severe_first(alerts) for key, alerts in jobs.items()}


def _most_severe_first(alerts: list[dict[str, str]]) -> list[dict[str, str]]:
    return sorted(alerts, key=lambda m: (SEVERITY_ORDER.get(grade_of(m), 9), m.get("alertname", "")))


def pod_logs(
    kube: ReportAPI, namespace: str, pods: list[dict[str, Any]], at: float, now: float
) -> list[LogLine]:
    """Each container's lines from WINDOW_S before the alert (except the exporter's), bounded in bytes."""
    since = max(1, math.ceil(now - (at - WINDOW_S)))
    lines: list[LogLine] = []
    for pod in pods:
        name = pod["metadata"]["name"]
        for c in (pod.get("spec") or {}).get("containers") or []:
            if c.get("name") == EXPORTER:
                continue
            try:
                text = kube.pod_log(namespace, name, c["name"], since_s=since, limit_bytes=LOG_LIMIT_BYTES)
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


def policy_of(reads: ReportReads, monitor: TrainingJobMonitor) -> EffectivePolicy | None:
    """The monitor's effective policy; None while a policy it names is missing or invalid (its status
    says why)."""
    try:
        return effective_policy(monitor, policies_for(monitor, reads.policy))
    except PolicyProblem:
        return None


def runbook_url(reads: ReportReads, monitor: TrainingJobMonitor, alert: str) -> str:
    """The policy's runbook for the alert; none while a policy the monitor names is missing or invalid."""
    policy = policy_of(reads, monitor)
    base = policy.runbook_base_url if policy else ""
    return f"{base}#{alert.lower()}" if base and alert else ""


def build_report(
    kube: ReportAPI,
    reads: ReportReads,
    prom: RangeQuery,
    namespace: str,
    name: str,
    *,
    alert: str | None,
    at: float,
    now: float,
    labels: dict[str, str] | None = None,
    read_logs: bool = True,
) -> Report:
    """Everything fetched for one monitor's job around `at`, then the pure builder. The alert's labels are
    those firing at `at` (the most severe when `alert` is None) unless given. Without `read_logs` no pod
    log is read (the operator's --no-pod-logs: no RBAC for pods/log) and the report says so."""
    body = kube.get_monitor(namespace, name)
    if body is None:
        raise LookupError(f"no TrainingJobMonitor {namespace}/{name}")
    monitor = parse_spec(body)
    if not isinstance(monitor, TrainingJobMonitor):
        raise LookupError(f"{namespace}/{name} is not a TrainingJobMonitor")
    if labels is None:
        fired = firing(prom, namespace, name, at)
        labels = next(
            (f for f in fired if f.get("alertname") == alert), fired[0] if fired and not alert else {}
        )
    alert_name = alert or labels.get("alertname", "") or "on demand"
    snap_series = fetch_series(prom, namespace, name, at, before=1800, after=150)
    pods = reads.pods(namespace, monitor.spec.selector)
    snapshot = Snapshot(at, tuple(snap_series), tuple(pod_events(pods)), alert_name)
    info = AlertInfo(
        alert_name,
        grade_of(labels),
        at,
        namespace,
        name,
        node=labels.get("node", ""),
        gpu=labels.get("gpu", ""),
        pod=labels.get("pod", ""),
        summary="" if labels else "report on demand: no firing alert of that name at this time",
        runbook_url=runbook_url(reads, monitor, alert_name if labels else ""),
        trace_id=trace_id(prom, namespace, name, at),
    )
    records = list(((body.get("status") or {}).get("remediations")) or [])
    logs = pod_logs(kube, namespace, pods, at, now) if read_logs else []
    # the catalogue's defaults where a policy is missing: the rules Prometheus runs may be older, but
    # the series an alert reads do not change with its numbers
    policy = policy_of(reads, monitor) or effective_policy(monitor, [])
    own = own_signal_of(prom, monitor, policy, alert_name, labels=labels, at=at)
    return build(ReportInput(info, snapshot, diagnose(snapshot), logs, records, logs_read=read_logs, own=own))


def active_at(prom: RangeQuery, namespace: str, job: str, alert: dict[str, str], now: float) -> float:
    """When the alert became active (ALERTS_FOR_STATE's value), so the report centres on the onset;
    now when Prometheus does not say."""
    want = {k: v for k, v in alert.items() if k not in ("alertstate", "__name__")}
    name = quoted(alert.get("alertname", ""))
    for item in _instant(prom, f"ALERTS_FOR_STATE{{alertname={name},{_job(namespace, job)}}}", now):
        labels = {k: str(v) for k, v in (item.get("metric") or {}).items() if k != "__name__"}
        if labels == want:
            return float(item["value"][1])
    return now
