"""A hardware claim confirmed by Prometheus: the job's own rule fired there for that node and GPU; and
the last checkpoint a silent rank said it saved.

The second witness of a GPU fault, beside the node's sidecar (executor.Executor._confirm_fault). With
`gpuBackend: dcgm` the sidecar reads no GPU and can confirm nothing, and a sidecar restarted after the
fault has forgotten it; Prometheus keeps what the job's rules saw. Its ALERTS series are written by the
rule evaluation itself, with namespace, pod and node from the scrape targets (the PodMonitor's
relabelings, docs/trust.md), so an alert posted straight into Alertmanager's API leaves no trace there.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

log = logging.getLogger("trainguard.remediation.alert_history")

CHECKPOINT_STEP = "trainguard_checkpoint_last_step"

WITHIN = "1h"
"""How far back a firing (or pending) rule counts: the sidecar keeps a detected fault as long."""


class Query(Protocol):
    """The one call of prometheus-api-client's PrometheusConnect this reads with."""

    def custom_query(self, query: str) -> Any: ...


def _quote(value: str) -> str:
    """A PromQL string literal: the backslash and the double quote escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def alerts_query(alert: str, namespace: str, training_job: str, node: str, gpu: str = "") -> str:
    """The query that finds the rule's ALERTS series for that job, node (and GPU) in the last WITHIN."""
    labels = {"alertname": alert, "namespace": namespace, "training_job": training_job, "node": node}
    if gpu:
        labels["gpu"] = gpu
    matchers = ",".join(f"{k}={_quote(v)}" for k, v in labels.items())
    return f"max_over_time(ALERTS{{{matchers}}}[{WITHIN}])"


def last_step_query(namespace: str, training_job: str, pod: str) -> str:
    """The step of the last checkpoint the pod's sidecar reported saved, any kind, as last scraped within
    WITHIN (namespace, training_job and pod are target labels: a pod cannot claim another's)."""
    labels = {"namespace": namespace, "training_job": training_job, "pod": pod}
    matchers = ",".join(f"{k}={_quote(v)}" for k, v in labels.items())
    return f"max(last_over_time({CHECKPOINT_STEP}{{{matchers}}}[{WITHIN}]))"


class AlertHistory:
    """Asks the Prometheus that evaluates the jobs' rules (the operator's --prometheus-url)."""

    def __init__(self, prometheus: Query, url: str = "") -> None:
        self.prometheus = prometheus
        self.url = url

    def saw(self, alert: str, namespace: str, training_job: str, node: str, gpu: str = "") -> bool:
        """Whether the job's rule for `alert` was pending or firing on `node` (and `gpu`) within WITHIN.
        Raises when Prometheus cannot be asked: an unknown is not a confirmation."""
        result = self.prometheus.custom_query(alerts_query(alert, namespace, training_job, node, gpu))
        return bool(result)

    def last_saved_step(self, namespace: str, training_job: str, pod: str) -> float | None:
        """The step of the pod's last checkpoint as Prometheus last scraped it: what a rank on a dead node
        said before it went silent. None when Prometheus holds no such series; raises when it cannot be
        asked."""
        result = self.prometheus.custom_query(last_step_query(namespace, training_job, pod))
        return float(result[0]["value"][1]) if result else None

    def where(self) -> str:
        return f"Prometheus {self.url}".rstrip()
