"""A hardware claim confirmed by Prometheus: the job's own rule fired there for that node and GPU.

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

    def where(self) -> str:
        return f"Prometheus {self.url}".rstrip()
