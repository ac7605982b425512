"""A node trainguard cordoned needs a person: the notice that says so until the node is returned.

When the operator moves a job off a faulty node within seconds, the fault's alert resolves with the
faulty pod's exporter before the P0 group_wait is over, and Alertmanager never notifies a group that
only ever held a resolved alert. The job is safe; the node is still broken and out of service. So the
leader posts `TrainguardNodeCordoned` (P2: e-mail and ticket, not the phone at 3 a.m.) for every node
its records cordoned and its annotations still show cordoned, refreshed on each pass, until
`trainguard uncordon` returns the node (Alertmanager then resolves it at its endsAt).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trainguard.catalog.alerts import BREAKER_OPEN, NODE_CORDONED, WITHHELD
from trainguard.catalog.severity import grade_labels
from trainguard.remediation.escalation import format_time
from trainguard.remediation.model import Phase, StepKind
from trainguard.remediation.plan import ECC_DEGRADED

SEVERITY = "P2"
HOLD_S = 300.0
"""How long a posted notice stays active without a refresh: the leader refreshes it on every pass, so
it resolves this long after the node is uncordoned (or the operator stops)."""


def _cordoned_by(record: Mapping[str, Any]) -> str | None:
    """The node a record's Cordon step cordoned (a dry run cordons nothing)."""
    if record.get("dryRun"):
        return None
    for step in record.get("steps") or []:
        if step.get("kind") == StepKind.CORDON and step.get("phase") == Phase.SUCCEEDED:
            node = (step.get("params") or {}).get("node") or record.get("node")
            return str(node) if node else None
    return None


def cordon_notices(
    monitors: Iterable[tuple[str, str, Iterable[Mapping[str, Any]]]],
    cordoned: Mapping[str, float],
    now: float,
) -> list[dict[str, Any]]:
    """Postable alerts, one per job and node: `monitors` are (namespace, name, records); `cordoned` the
    nodes trainguard's annotations show cordoned, with when. The newest record that cordoned a node
    names the fault."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for namespace, name, records in monitors:
        for record in records:
            node = _cordoned_by(record)
            if node is None or node not in cordoned:
                continue
            since = cordoned[node]
            job = (
                "the job was left running on it until it next restarts"
                if record.get("class") == ECC_DEGRADED  # isolated, not moved
                else "the job was moved off it"
            )
            labels = {"alertname": NODE_CORDONED, **grade_labels(SEVERITY), "namespace": namespace,
                      "training_job": name, "node": node, "remediation": str(record.get("id", ""))}  # fmt: skip
            out[(namespace, name, node)] = {
                "labels": labels,
                "annotations": {
                    "summary": f"node {node} is cordoned by trainguard after {record.get('alert', 'a fault')}: "
                    f"repair it, then run `trainguard uncordon {node}`",
                    "description": f"cordoned at {format_time(since)} by remediation {record.get('id', '')} of "
                    f"{namespace}/{name}; {job} and the node takes no new pods",
                },
                "startsAt": format_time(since),
                "endsAt": format_time(now + HOLD_S),
            }
    return [out[k] for k in sorted(out)]


def withheld(record: Mapping[str, Any], message: str) -> dict[str, Any]:
    """The postable P0 of a NOTIFY step: what trainguard did not do and why, for the job's receivers.
    `record` carries its monitor's namespace and trainingJob."""
    labels = {"alertname": WITHHELD, **grade_labels("P0"), "namespace": str(record.get("namespace", "")),
              "training_job": str(record.get("trainingJob", "")), "remediation": str(record.get("id", ""))}  # fmt: skip
    if record.get("node"):
        labels["node"] = str(record["node"])
    return {
        "labels": labels,
        "annotations": {
            "summary": f"trainguard withheld an action: {message}",
            "description": f"{record.get('alert')}: {message}",
        },
    }


def breaker_open(
    pool: str, pool_label: str, opened_at: float, reason: str, now: float, *, resolved: bool = False
) -> dict[str, Any]:
    """The postable P0 of an open circuit breaker, for the platform (no namespace: a tenant's
    AlertmanagerConfig does not match it; the platform's own route must). Refreshed on every pass
    while open (it ends HOLD_S after the last refresh); `resolved` ends it now, when the breaker re-arms."""
    labels = {"alertname": BREAKER_OPEN, **grade_labels("P0")}
    if pool_label:
        labels["pool_label"] = pool_label
    if pool:
        labels["pool"] = pool
    where = (
        f"{pool_label}={pool}" if pool else (f"nodes without {pool_label}" if pool_label else "all GPU nodes")
    )
    return {
        "labels": labels,
        "annotations": {
            "summary": f"trainguard stopped cordoning in {where}: {reason}",
            "description": f"the circuit breaker opened at {format_time(opened_at)}: node faults there are "
            "not acted on (each is posted as TrainguardRemediationWithheld) until the pool has looked up for "
            "the re-arm time, or `trainguard guardrails reset`",
        },
        "startsAt": format_time(opened_at),
        "endsAt": format_time(now if resolved else now + HOLD_S),
    }
