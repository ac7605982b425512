"""Diagnosis: pure correlation rules from a job's series and events around an alert to probable causes
with their evidence, and the diagnostic report built from them. No I/O here: the controller and the
CLI fetch the series and logs and call in."""

from trainguard.diagnosis.model import Cause, Evidence, Finding, JobEvent, Series, Snapshot, Spans, labels_of
from trainguard.diagnosis.rules import RULES, diagnose

__all__ = [
    "RULES",
    "Cause",
    "Evidence",
    "Finding",
    "JobEvent",
    "Series",
    "Snapshot",
    "Spans",
    "diagnose",
    "labels_of",
]
