"""The built-in knowledge of trainguard: the metric contract and the alert catalogue.

Plain data, importing nothing of the project, so that the renderers, the exporter, the docs and the
tests all read the same names and defaults.
"""

from trainguard.catalog.alerts import (
    ALERT_NAMES,
    ALERTS,
    ALERTS_BY_NAME,
    FATAL_XIDS,
    MODE_PROFILES,
    SEVERITIES,
    SEVERITY_ORDER,
    Alert,
    Layer,
    Mode,
    P0Class,
    Param,
    Scope,
)
from trainguard.catalog.metrics import (
    COMMON_LABELS,
    DCGM_LABELS,
    METRICS,
    METRICS_BY_NAME,
    Metric,
    MetricType,
)

__all__ = [
    "ALERTS",
    "ALERTS_BY_NAME",
    "ALERT_NAMES",
    "COMMON_LABELS",
    "DCGM_LABELS",
    "FATAL_XIDS",
    "METRICS",
    "METRICS_BY_NAME",
    "MODE_PROFILES",
    "SEVERITIES",
    "SEVERITY_ORDER",
    "Alert",
    "Layer",
    "Metric",
    "MetricType",
    "Mode",
    "P0Class",
    "Param",
    "Scope",
]
