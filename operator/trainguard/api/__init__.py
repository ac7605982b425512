"""The custom resources as typed models: the single source of truth for `crds/`.

`trainguard.io/v1alpha1` TrainingJobMonitor and AlertPolicy, validated by pydantic in the CLI and by
the generated CRD schema (with the same CEL rules) in the apiserver.
"""

from trainguard.api.common import API_VERSION, GROUP, VERSION, duration_seconds, format_duration
from trainguard.api.load import (
    Documents,
    InvalidInput,
    PolicyProblem,
    Problem,
    load_documents,
    monitor_of,
    parse_object,
    parse_spec,
    policies_for,
)
from trainguard.api.monitor import TrainingJobMonitor, TrainingJobMonitorSpec
from trainguard.api.policy import AlertPolicy, AlertPolicySpec

__all__ = [
    "API_VERSION",
    "GROUP",
    "VERSION",
    "AlertPolicy",
    "AlertPolicySpec",
    "Documents",
    "InvalidInput",
    "PolicyProblem",
    "Problem",
    "TrainingJobMonitor",
    "TrainingJobMonitorSpec",
    "duration_seconds",
    "format_duration",
    "load_documents",
    "monitor_of",
    "parse_object",
    "parse_spec",
    "policies_for",
]
