"""All correlation rules over one snapshot, and how their findings are reconciled with each other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from trainguard.diagnosis.hardware import hardware
from trainguard.diagnosis.model import Cause, Evidence, Finding, Snapshot, strongest_first
from trainguard.diagnosis.straggler import straggler
from trainguard.diagnosis.throughput import network_trouble, throughput_drop
from trainguard.diagnosis.training import data_pipeline, model_hyperparameters

Rule = Callable[[Snapshot], list[Finding]]

RULES: tuple[Rule, ...] = (data_pipeline, model_hyperparameters, throughput_drop, hardware, straggler)


def diagnose(snap: Snapshot) -> list[Finding]:
    """Every rule's findings, strongest first. A straggler makes its peers wait in collectives, so the
    communication share of a throughput drop is folded into the straggler finding unless the network
    itself shows trouble (NIC loss, ECN marking)."""
    findings = [f for rule in RULES for f in rule(snap)]
    stragglers = [f for f in findings if f.cause is Cause.STRAGGLER]
    comm = [f for f in findings if f.cause is Cause.THROUGHPUT_COMMUNICATION]
    if stragglers and comm and not network_trouble(snap):
        findings = [f for f in findings if f.cause is not Cause.THROUGHPUT_COMMUNICATION]
        lead = stragglers[0]
        extra = (
            Evidence(e.metric, e.value, e.reference, e.labels, "peers waiting: " + e.note)
            for e in comm[0].evidence
        )
        findings = [
            replace(f, evidence=(*f.evidence, *extra), confidence=min(0.95, f.confidence + 0.05))
            if f is lead
            else f
            for f in findings
        ]
    return strongest_first(findings)
