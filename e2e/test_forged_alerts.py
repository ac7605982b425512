"""A forged alert posted straight into a real Alertmanager, on the local control plane: anyone who reaches
Alertmanager's API can raise any alert with any labels, and Alertmanager delivers it to the operator with
the job's own token, as it delivers a real one. The operator must act only on what it checks against the
cluster (docs/trust.md): the node must host a live pod of the job, and the job's sidecar on that node must
have seen the GPU fault, before anything is cordoned.

Everything is real but the containers: the monitor's AlertmanagerConfig, as the operator rendered it,
loaded into a real Alertmanager by the real prometheus-operator (e2e/pipeline.py), which posts to the
operator process's TLS receiver with the monitor's alerts token. The fake kubelet runs no container, so
the job's pods have no exporter unless a test serves one on the pod's IP (e2e/sidecars.py): the only
GPUCriticalXid in these tests is the one the test posts (a sidecar here has seen its fault and shows a
healthy GPU again, so no rule of Prometheus raises a copy of its own)."""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.request
from typing import Any

import pytest
import yaml

from e2e.cluster import Cluster
from e2e.monitors import MON, ready
from e2e.nodes import ANNOTATIONS
from e2e.pipeline import JOB, OPERATOR, SELECTOR, Monitoring, Sink, job, objects
from e2e.podprocesses import bound_token
from e2e.receiver import decisions, monitor_token, post, records
from e2e.sidecars import sidecar_that_saw
from tests.exposition import scrape, value
from tests.processes import http_json, wait_for
from trainguard.catalog import ALERTS_BY_NAME
from trainguard.catalog.events import EVENTS_AUDIENCE
from trainguard.catalog.kubernetes import FAULTY_TAINT
from trainguard.catalog.severity import grade_labels
from trainguard.remediation import tokens

pytestmark = pytest.mark.e2e

ALERT = ALERTS_BY_NAME["GPUCriticalXid"]
GPU = 3
"""The GPU the forged alert names, and the one a sidecar that saw the fault saw it on."""
ROOM = {"maxCordonedNodes": 3}
"""The monitor's own cap is not what stops a cordon here."""
FINAL = ("Succeeded", "Failed", "Skipped")
AFTER_CONFIRM = ["Cordon", "Taint", "RequestCheckpoint", "RestartGang", "ConfirmPlacement"]
"""A GPU fault's steps after ConfirmFault (the monitor's default nodeFault action)."""
Stack = tuple[Cluster, Monitoring, Sink]


def forge(mon: Monitoring, ns: str, node: str, pod: str) -> int:
    """POST one firing GPUCriticalXid, with the labels its rule gives it (the catalogue's scope labels,
    its grade in priority and severity), to Alertmanager's /api/v2/alerts (the routes match priority);
    returns its startsAt (whole seconds, a past one of its own: the record of this alert instance has it
    in its id)."""
    starts = int(time.time()) - 7
    values = {"namespace": ns, "training_job": JOB, "pod": pod, "node": node, "gpu": str(GPU)}
    labels = {
        "alertname": ALERT.name,
        **grade_labels(ALERT.severity),
        **{k: values[k] for k in ALERT.scope.labels},
    }
    at = dt.datetime.fromtimestamp(starts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    http_json(f"{mon.alertmanager}/api/v2/alerts", [{"labels": labels, "annotations": {"summary": "forged"},
                                                     "startsAt": at}])  # fmt: skip
    return starts


def routes_to_the_operator(mon: Monitoring, ns: str) -> bool:
    """Alertmanager has loaded the monitor's routes: a route for `ns` and the operator's receiver of it."""
    with urllib.request.urlopen(f"{mon.alertmanager}/api/v2/status", timeout=10) as resp:
        config = yaml.safe_load(json.loads(resp.read())["config"]["original"])
    receivers = {r["name"] for r in config.get("receivers") or []}
    routed = any(
        f'namespace="{ns}"' in (r.get("matchers") or []) for r in config["route"].get("routes") or []
    )
    return routed and any(n.startswith(f"{ns}/") and n.endswith("/trainguard-operator") for n in receivers)


def start_job(stack: Stack, ns: str) -> list[Any]:
    """The monitor (Alertmanager's routes to the operator loaded) and its Job's 2 pods Running, no exporter
    serving: returns the pods."""
    cluster, mon, sink = stack
    cluster.apply(objects(ns, sink, ROOM))
    wait_for("monitor Ready", lambda: ready(cluster, ns), timeout=60)
    cluster.apply([job(ns)])
    pods = wait_for(
        "2 job pods Running",
        lambda: (items := cluster.core.list_namespaced_pod(ns, label_selector=SELECTOR).items)
        and len(items) == 2 and all(p.status.phase == "Running" and p.status.pod_ip for p in items) and items,
        timeout=90,
    )  # fmt: skip
    wait_for("Alertmanager routing the job's alerts to the operator", lambda: routes_to_the_operator(mon, ns),
             timeout=60)  # fmt: skip
    return sorted(pods, key=lambda p: p.metadata.name)


def events_token(cluster: Cluster, ns: str) -> str:
    return monitor_token(cluster, tokens.EVENTS, ns, JOB)


def pending(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    return list(((cluster.get(*MON, ns, JOB) or {}).get("status") or {}).get("pendingSignals") or [])


def accepted_from_alertmanager(cluster: Cluster) -> float:
    samples = scrape(cluster.metrics_url(OPERATOR))
    return value(samples, "trainguard_operator_signals_received_total", source="alertmanager",
                 result="accepted") or 0.0  # fmt: skip


def done(cluster: Cluster, ns: str, n: int = 1) -> list[dict[str, Any]]:
    return wait_for(
        f"{n} remediation record(s) done",
        lambda: len(r := records(cluster, ns)) >= n and all(x["phase"] in FINAL for x in r) and r,
        timeout=120,
    )


def untouched(cluster: Cluster, ns: str, pods: list[Any], nodes: set[str]) -> None:
    """No node of `nodes` cordoned, tainted or annotated by trainguard; every pod of `pods` still there."""
    for name in sorted(nodes):
        node = cluster.core.read_node(name)
        assert not node.spec.unschedulable, f"{name} was cordoned on a forged alert"
        assert not any(t.key == FAULTY_TAINT for t in node.spec.taints or []), f"{name} was tainted"
        assert not set(node.metadata.annotations or {}) & set(ANNOTATIONS), node.metadata.annotations
    now = {p.metadata.uid: p for p in cluster.core.list_namespaced_pod(ns, label_selector=SELECTOR).items}
    assert set(now) == {p.metadata.uid for p in pods}, "the gang was restarted"
    assert all(p.metadata.deletion_timestamp is None for p in now.values()), "a pod of the gang was deleted"


def test_a_forged_alert_naming_a_node_the_job_does_not_use_is_delivered_and_cordons_nothing(
    stack: Stack, ns: str, clean_nodes: None
) -> None:
    cluster, mon, sink = stack
    pods = start_job(stack, ns)
    used = {p.spec.node_name for p in pods}
    other = next(n.metadata.name for n in cluster.core.list_node().items if n.metadata.name not in used)
    before = accepted_from_alertmanager(cluster)
    t0 = time.monotonic()
    forge(mon, ns, other, pods[0].metadata.name)
    # delivered: the operator's receiver took it from Alertmanager and its planner refused it
    refusal = f"{ALERT.name} for {ns}/{JOB} from alertmanager refused: "
    line = wait_for("the operator's refusal", lambda: next((ln for ln in (cluster.workdir / f"{OPERATOR}.log")
                    .read_text(errors="replace").splitlines() if refusal in ln), None), timeout=60)  # fmt: skip
    print(f"\nforged alert posted to Alertmanager -> refused by the operator in {time.monotonic() - t0:.1f}s")
    assert f"names node {other}, which hosts no live pod of {ns}/{JOB}; nothing is done" in line, line
    assert accepted_from_alertmanager(cluster) >= before + 1
    wait_for("the signal decided (out of pendingSignals)", lambda: pending(cluster, ns) == [], timeout=30)
    assert records(cluster, ns) == []
    untouched(cluster, ns, pods, {other, *used})
    # it still pages: the operator's checks keep it from acting, not from being notified (docs/trust.md)
    wait_for("the forged alert paged", lambda: sink.received("phone", ALERT.name, namespace=ns, node=other),
             timeout=30)  # fmt: skip


def test_a_forged_alert_naming_the_jobs_node_fails_at_confirm_fault_when_its_sidecar_did_not_see_it(
    stack: Stack, ns: str, clean_nodes: None
) -> None:
    cluster, mon, _ = stack
    pods = start_job(stack, ns)
    node = pods[0].spec.node_name
    # the node's sidecar answers, and saw no GPU fault (a thermal throttle, over since)
    with sidecar_that_saw(pods[0], events_token(cluster, ns), fault="thermal", cleared=True):
        starts = forge(mon, ns, node, pods[0].metadata.name)
        (record,) = done(cluster, ns)
    assert record["id"].endswith(f"-{starts}"), ("the record of the forged alert instance", record)
    assert record["phase"] == "Failed", json.dumps(record, indent=1)
    first, *rest = record["steps"]
    assert (first["kind"], first["phase"]) == ("ConfirmFault", "Failed"), record
    refused = f"unconfirmed: no sidecar on {node} saw {ALERT.name} on GPU {GPU}"
    assert first["detail"].startswith(refused), first
    assert f"{pods[0].metadata.name} did not see it" in first["detail"], first
    assert [s["kind"] for s in rest] == AFTER_CONFIRM, record
    assert {s["phase"] for s in rest} == {"Planned"}, "nothing after the unconfirmed claim was done"
    untouched(cluster, ns, pods, {p.spec.node_name for p in pods})


def test_the_same_alert_confirmed_by_the_nodes_sidecar_cordons_it(
    stack: Stack, ns: str, clean_nodes: None
) -> None:
    """The control: what the two tests above post is acted on once the claim checks out, so that their
    nothing is the checks' doing, not a route or a token that never worked."""
    cluster, mon, _ = stack
    pods = start_job(stack, ns)
    node = pods[0].spec.node_name
    with sidecar_that_saw(pods[0], events_token(cluster, ns), fault="xid-79", gpu=GPU, cleared=True):
        starts = forge(mon, ns, node, pods[0].metadata.name)
        (record,) = done(cluster, ns)
    assert record["id"].endswith(f"-{starts}"), ("the record of the forged alert instance", record)
    assert record["phase"] == "Succeeded", json.dumps(record, indent=1)
    assert record["steps"][0]["detail"].startswith(
        f"confirmed by the sidecar of {pods[0].metadata.name} on {node}: it saw {ALERT.name} on GPU {GPU}"
    ), record["steps"][0]
    n = cluster.core.read_node(node)
    assert n.spec.unschedulable is True
    assert any(t.key == FAULTY_TAINT and t.effect == "NoSchedule" for t in n.spec.taints or [])
    live = [p for p in cluster.core.list_namespaced_pod(ns, label_selector=SELECTOR).items
            if p.metadata.deletion_timestamp is None]  # fmt: skip
    assert live and not {p.metadata.uid for p in live} & {p.metadata.uid for p in pods}, "the gang restarted"


def test_a_forged_alert_refused_at_confirm_fault_does_not_hold_back_the_real_fault(
    stack: Stack, ns: str, clean_nodes: None
) -> None:
    """A forged claim about a node, refused, must not make the node's real fault a duplicate of it: else a
    forger could keep a node's faults from being acted on by posting first."""
    cluster, mon, _ = stack
    pods = start_job(stack, ns)
    node, pod = pods[0].spec.node_name, pods[0].metadata.name
    forge(mon, ns, node, pod)  # no sidecar serves: unconfirmed
    (forged,) = done(cluster, ns)
    assert forged["phase"] == "Failed" and forged["steps"][0]["kind"] == "ConfirmFault", forged
    # then the GPU fails: the node's sidecar sees it and posts it by the fast path, as its pod
    with sidecar_that_saw(pods[0], events_token(cluster, ns), fault="xid-79", gpu=GPU, cleared=True):
        labels = {"alertname": ALERT.name, "severity": ALERT.severity, "namespace": ns, "training_job": JOB,
                  "pod": pod, "node": node, "gpu": str(GPU)}  # fmt: skip
        event = {"source": "sidecar", "labels": labels, "annotations": {}, "startsAt": time.time()}
        sender = bound_token(cluster.core, cluster.api.sanitize_for_serialization(pods[0]), EVENTS_AUDIENCE)
        before = len(decisions(cluster, ns, ALERT.name, OPERATOR))  # the forged claim's repeats, if any
        status, answer = post(cluster, "/v1/events", event, sender, OPERATOR)
        assert status == 200, answer
        wait_for("the operator's decision on the real fault", lambda: len(records(cluster, ns)) == 2
                 or len(decisions(cluster, ns, ALERT.name, OPERATOR)) > before, timeout=30)  # fmt: skip
        assert len(records(cluster, ns)) == 2, decisions(cluster, ns, ALERT.name, OPERATOR)[before:]
        real = done(cluster, ns, 2)[1]
    assert real["phase"] == "Succeeded", json.dumps(real, indent=1)
    assert cluster.core.read_node(node).spec.unschedulable is True
