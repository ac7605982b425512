"""What the escalation tests decide on: Alertmanager's alerts of the job as its API returns them, at a fixed
now, and escalation on at 15 minutes (tests/remediation/test_escalation.py, test_commands.py,
test_ecc_isolation_plan.py)."""

from __future__ import annotations

import time
from typing import Any

from trainguard.remediation.escalation import Settings, format_time

NOW = 1_700_000_000.0
MIN = 60.0
NS, NAME = "ml", "llama-pretrain"
JOB = {"namespace": NS, "training_job": NAME}
ON = Settings(enabled=True, after_s=15 * MIN)


def am(
    name: str,
    severity: str,
    age_s: float,
    state: str = "active",
    *,
    silenced_by: tuple[str, ...] = (),
    inhibited_by: tuple[str, ...] = (),
    fingerprint: str = "",
    ends_in_s: float = 300.0,
    **labels: str,
) -> dict[str, Any]:
    """An alert as GET /api/v2/alerts returns it."""
    all_labels = {"alertname": name, "severity": severity, **JOB, **labels}
    return {
        "labels": all_labels,
        "annotations": {"summary": f"{name} summary", "runbook_url": "https://runbooks/x"},
        "startsAt": format_time(NOW - age_s),
        "endsAt": format_time(NOW + ends_in_s),
        "updatedAt": format_time(NOW),
        "generatorURL": "http://prometheus/graph",
        "fingerprint": fingerprint or f"fp-{name}-{severity}-{sorted(labels.items())}",
        "receivers": [{"name": "im"}],
        "status": {"state": state, "silencedBy": list(silenced_by), "inhibitedBy": list(inhibited_by)},
    }


def posted(name: str, severity: str, age_s: float, **labels: str) -> dict[str, Any]:
    """A postable alert of the job (POST /api/v2/alerts) that started `age_s` ago by the real clock (a
    real Alertmanager keeps it) and lasts an hour."""
    now = time.time()
    return {
        "labels": {"alertname": name, "severity": severity, **JOB, **labels},
        "annotations": {"summary": name},
        "startsAt": format_time(now - age_s),
        "endsAt": format_time(now + 3600),
    }
