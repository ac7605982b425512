"""The operator reads pods, nodes, Leases, Jobs, monitors and policies from watch caches: once its caches
have listed, an admission request, a P0 signal and the P0 loop's periodic pass make no LIST call; and a
steady resync pass, which compares each monitor with the caches (its objects watched as metadata), makes
no request about a monitor at all.

Counted by the apiserver itself: the local control plane audits the operator ServiceAccount's LIST
requests (e2e/controlplane/local.py, AUDIT_POLICY), and the operator's Kubernetes client names itself
`trainguard/<version> (operator)`, apart from kopf's own watches in the same process (kopf lists its
monitors and policies again whenever one of its watch streams ends; that is kopf's, not ours).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster import RESYNC_SECONDS, Cluster
from e2e.monitors import quickstart, ready, start_job
from e2e.receiver import alert_payload, monitor_token, post, records
from tests.exposition import scrape
from tests.processes import wait_for
from trainguard.remediation import tokens

pytestmark = pytest.mark.e2e
OPERATOR_USER = "system:serviceaccount:trainguard-system:trainguard-operator"
CACHES = ("jobs", "leases", "monitors", "nodes", "pods", "policies",
          # the owned objects' metadata, started with the others where the cluster serves them
          "prometheusrules.monitoring.coreos.com", "alertmanagerconfigs.monitoring.coreos.com",
          "podmonitors.monitoring.coreos.com")  # fmt: skip


def operator_lists(audit_log: Path) -> list[dict[str, Any]]:
    """The operator's own LIST requests the apiserver has answered so far (kopf's left out)."""
    out = []
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        if (
            event.get("verb") == "list"
            and (event.get("user") or {}).get("username") == OPERATOR_USER
            and str(event.get("userAgent", "")).startswith("trainguard/")
        ):
            out.append(event)
    return out


def described(events: list[dict[str, Any]]) -> str:
    return "\n".join(f"  {e.get('requestURI')} ({e.get('userAgent')})" for e in events)


def cache_counts(metrics_url: str) -> dict[str, dict[str, float]]:
    families = scrape(metrics_url)
    return {
        kind: {r: v for labels, v in families.get(f"trainguard_operator_watch_cache_{kind}_total", [])
               for r in [dict(labels).get("resource", "")]}
        for kind in ("lists", "watches")
    }  # fmt: skip


def test_no_list_call_in_steady_state(operator: Cluster, ns: str, clean_nodes: None) -> None:
    if operator.audit_log is None:
        pytest.skip(
            "the apiserver's audit log is the local control plane's (TRAINGUARD_E2E_KUBECONFIG has none)"
        )
    pods = start_job(operator, ns, {"dryRun": True})
    metrics = operator.metrics_url()
    # every cache listed once and is watching (the first read of each waits for it)
    wait_for("every watch cache listed and watching", lambda: all(
        (c := cache_counts(metrics))["lists"].get(r, 0) >= 1 and c["watches"].get(r, 0) >= 1 for r in CACHES
    ), timeout=60)  # fmt: skip
    started = operator_lists(operator.audit_log)
    assert {e["objectRef"]["resource"] for e in started} >= {"pods", "nodes", "leases", "jobs"}, (
        "the audit log shows the caches' first lists (so the count below can see a LIST at all):\n"
        + described(started)
    )
    before = len(started)
    lists_before = cache_counts(metrics)["lists"]

    # an admission request: a pod of the monitor's selector gets its sidecar from the cached monitor
    operator.core.create_namespaced_pod(ns, {
        "metadata": {"name": "llama-pretrain-extra", "labels": {"app": "llama-pretrain"}},
        "spec": {"containers": [{"name": "trainer", "image": "registry.invalid/llama:1"}]},
    })  # fmt: skip
    extra = operator.core.read_namespaced_pod("llama-pretrain-extra", ns)
    names = [c.name for c in [*(extra.spec.init_containers or []), *extra.spec.containers]]
    assert "trainguard-exporter" in names, names

    # a P0 signal, planned (dry run) on the cached nodes and pods
    token = monitor_token(operator, tokens.ALERTS, ns, "llama-pretrain")
    status, answer = post(operator, "/v1/alerts", alert_payload(ns, pods[0].spec.node_name), token)
    assert status == 200 and answer["accepted"] == 1, answer
    wait_for("the signal's record", lambda: records(operator, ns), timeout=30)

    # the P0 pass (every 2 s here) and the pod count (the extra pod is counted from the cache)
    wait_for("the pod count with the extra pod", lambda: (
        (operator.get("trainguard.io/v1alpha1", "TrainingJobMonitor", ns, "llama-pretrain") or {})
        .get("status", {}).get("podsMonitored") == 3), timeout=30)  # fmt: skip
    time.sleep(5)  # two more P0 passes over the monitor, its pods, the nodes and their Leases

    after = operator_lists(operator.audit_log)[before:]
    assert after == [], f"LIST calls in steady state:\n{described(after)}"
    assert cache_counts(metrics)["lists"] == lists_before, "no cache listed again"


STEADY_ALLOWED = {
    ("get", "configmaps"): "the circuit breaker's manual reset, read once per P0 pass",
    ("get", "clusterkopfpeerings"): "which replica leads, read once per pass",
    (
        "patch",
        "secrets",
    ): "the token Secrets, written again every --secret-rewrite-seconds, here as short as the "
    "resync (e2e/cluster.py) so that a hand edit's repair is seen within seconds",
}
"""Requests a steady operator makes that are not a monitor's reconcile, each with why."""


def operator_requests(audit_log: Path, since: int) -> list[dict[str, Any]]:
    """The operator's own requests (its client's user agent; kopf's left out) answered after line `since`."""
    out = []
    for line in audit_log.read_text().splitlines()[since:]:
        event = json.loads(line)
        if (event.get("user") or {}).get("username") == OPERATOR_USER and str(
            event.get("userAgent", "")
        ).startswith("trainguard/"):
            out.append(event)
    return out


def resyncs(metrics_url: str) -> float:
    return sum(v for _, v in scrape(metrics_url).get("trainguard_operator_resyncs_total", []))


def test_a_steady_resync_pass_reads_nothing_by_name_and_applies_nothing(operator: Cluster, ns: str) -> None:
    if operator.audit_log is None:
        pytest.skip(
            "the apiserver's audit log is the local control plane's (TRAINGUARD_E2E_KUBECONFIG has none)"
        )
    operator.apply(quickstart(ns))
    wait_for("monitor Ready", lambda: ready(operator, ns))
    metrics = operator.metrics_url()
    time.sleep(RESYNC_SECONDS + 3)  # one resync pass after Ready: the owned objects' caches have listed
    since = len(operator.audit_log.read_text().splitlines())
    before = resyncs(metrics)
    time.sleep(2 * RESYNC_SECONDS + 3)  # two more passes
    assert resyncs(metrics) - before >= 2, "the resync passed over the monitor"
    seen = operator_requests(operator.audit_log, since)
    about_monitors = [
        e for e in seen
        if (e["verb"], e["objectRef"].get("resource")) not in STEADY_ALLOWED or e["verb"] == "list"
    ]  # fmt: skip
    assert about_monitors == [], "requests in a steady resync pass:\n" + "\n".join(
        f"  {e['verb']} {e.get('requestURI')}" for e in about_monitors
    )


def monitor_writes(audit_log: Path, since: int, ns: str) -> list[dict[str, Any]]:
    """Every write of the operator's process to the monitors of `ns` answered after line `since`, kopf's
    included (any user agent), with the subresource it wrote."""
    out = []
    for line in audit_log.read_text().splitlines()[since:]:
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if (
            (event.get("user") or {}).get("username") == OPERATOR_USER
            and event.get("verb") in ("patch", "update")
            and ref.get("resource") == "trainingjobmonitors"
            and ref.get("namespace") == ns
        ):
            out.append(event)
    return out


def test_a_new_monitor_costs_its_status_write_and_no_write_of_kopf_to_the_object(
    operator: Cluster, ns: str
) -> None:
    """kopf records what it handled in status.observedGeneration (controller/diffbase.py), not in an
    annotation of its own: a new monitor is written once Ready, through its status, and its metadata
    and spec are never patched (there were two kopf patches per monitor before)."""
    if operator.audit_log is None:
        pytest.skip(
            "the apiserver's audit log is the local control plane's (TRAINGUARD_E2E_KUBECONFIG has none)"
        )
    since = len(operator.audit_log.read_text().splitlines())
    operator.apply(quickstart(ns))
    monitor = wait_for("monitor Ready", lambda: ready(operator, ns))
    assert monitor["status"]["observedGeneration"] == monitor["metadata"]["generation"], monitor["status"]
    time.sleep(3)  # kopf's own patch, when there was one, followed the handler's within a second
    writes = monitor_writes(operator.audit_log, since, ns)
    status = [w for w in writes if w["objectRef"].get("subresource") == "status"]
    others = [w for w in writes if w["objectRef"].get("subresource") != "status"]
    assert status, "the audit log shows the operator's status write (so the count below can see a write)"
    assert others == [], "writes to the monitor object itself:\n" + "\n".join(
        f"  {w['verb']} {w.get('requestURI')} ({w.get('userAgent')})" for w in others
    )
    annotations = (
        operator.get("trainguard.io/v1alpha1", "TrainingJobMonitor", ns, "llama-pretrain") or {}
    ).get("metadata", {}).get("annotations") or {}
    assert not [k for k in annotations if "kopf" in k or "last-handled" in k], annotations
