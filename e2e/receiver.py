"""The operator's remediation receiver as Alertmanager and the sidecars reach it (its key, an
Alertmanager payload, a POST over its TLS), and what the operator made of a signal: the monitor's
remediation records and the decisions to do nothing that it only logs."""

from __future__ import annotations

import base64
import datetime as dt
import json
import ssl
import urllib.error
import urllib.request
from typing import Any

from e2e.cluster import OPERATOR_NS, Cluster
from e2e.monitors import MON
from tests.processes import wait_for
from trainguard.remediation import tokens


def operator_key(cluster: Cluster) -> bytes:
    """The operator key every monitor's tokens are derived from (remediation.tokens)."""
    secret = cluster.core.read_namespaced_secret("trainguard-receiver-key", OPERATOR_NS)
    return base64.b64decode(secret.data["key"]).strip()


def monitor_token(
    cluster: Cluster, purpose: str, ns: str, name: str = "llama-pretrain", uid: str | None = None
) -> str:
    """The monitor's token for `purpose` (tokens.ALERTS, tokens.EVENTS) as the operator derives it: from its
    key and the uid of the monitor as the apiserver holds it now. `uid` stands in for a monitor that
    does not exist (a token the operator must refuse)."""
    if uid is None:
        monitor = cluster.get(*MON, ns, name)
        assert monitor is not None, f"no TrainingJobMonitor {ns}/{name}"
        uid = str(monitor["metadata"]["uid"])
    return tokens.derive(operator_key(cluster), purpose, ns, name, uid)


def alert_payload(ns: str, node: str, alertname: str = "GPUCriticalXid") -> dict[str, Any]:
    """Alertmanager's webhook body for one firing P0 of the quickstart's job on `node`."""
    labels = {"alertname": alertname, "severity": "P0", "namespace": ns, "training_job": "llama-pretrain",
              "node": node, "gpu": "3", "pod": "llama-pretrain-0", "UUID": "GPU-3", "prometheus": "mon/k8s"}  # fmt: skip
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "version": "4", "receiver": "trainguard-operator", "status": "firing", "groupKey": "{}:{}",
        "groupLabels": {}, "commonLabels": labels, "commonAnnotations": {}, "externalURL": "http://am",
        "alerts": [{"status": "firing", "labels": labels, "annotations": {"summary": "XID 79"},
                    "startsAt": started, "endsAt": "0001-01-01T00:00:00Z", "fingerprint": "0"}],
    }  # fmt: skip


def post(
    cluster: Cluster, path: str, body: dict[str, Any], token: str | None, name: str = "operator"
) -> tuple[int, dict[str, Any]]:
    """POST `body` to the receiver of the operator replica `name`: its status and JSON answer."""
    port = cluster.receiver_ports[name]
    ca = cluster.webhook_certs("127.0.0.1")[2]
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    req = urllib.request.Request(
        f"https://127.0.0.1:{port}{path}", json.dumps(body).encode(), headers, method="POST"
    )
    try:
        with urllib.request.urlopen(
            req, context=ssl.create_default_context(cafile=str(ca)), timeout=10
        ) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def records(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    """The remediation records in the status of the quickstart's monitor in `ns`."""
    return list(
        ((cluster.get(*MON, ns, "llama-pretrain") or {}).get("status") or {}).get("remediations") or []
    )


def finished(cluster: Cluster, ns: str, what: str, timeout: float) -> dict[str, Any]:
    """The first remediation record of the quickstart's monitor in `ns` once it is Succeeded or Failed."""

    def done() -> dict[str, Any] | None:
        found = records(cluster, ns)
        return found[0] if found and found[0]["phase"] in ("Succeeded", "Failed") else None

    return wait_for(what, done, timeout=timeout)


def step(record: dict[str, Any], kind: str) -> dict[str, Any]:
    """The record's step of `kind`."""
    return next(s for s in record["steps"] if s["kind"] == kind)


def decisions(
    cluster: Cluster, ns: str, alertname: str, name: str = "operator", job: str = "llama-pretrain"
) -> list[str]:
    """The operator's logged decisions to do nothing about `alertname` of the job (a duplicate, an escalated
    copy, notify only: remediation/plan.py's quiet skips, which write no record): how a test knows that the
    planner, on its own thread, has taken in a signal that was answered 200 on posting."""
    text = (cluster.workdir / f"{name}.log").read_text(errors="replace")
    return [ln for ln in text.splitlines() if f"{alertname} for {ns}/{job}: " in ln]
