"""Single-bit ECC errors over the daily threshold isolate the node: GPUSingleBitECCErrorsHigh (P1)
posted to the running operator's authenticated receiver the way Alertmanager posts it, on the local
control plane. Each pod's injected exporter and examples/train_tiny.py run as local processes from the
pod's own spec (e2e/podprocesses.py), so the checkpoint request is answered by real trainers.

No Prometheus or Alertmanager here: the alert's rule is covered by the promtool cases and the real
Prometheus test; this is the operator's side. The policy's receivers point at a sink that is never
started, since nothing posts to it."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster import Cluster
from e2e.monitors import ready
from e2e.pipeline import JOB, SELECTOR, Sink, exporter_step, job, objects
from e2e.podprocesses import PodProcesses
from e2e.receiver import decisions, finished, monitor_token, post, records
from tests.processes import wait_for
from trainguard.catalog.kubernetes import CORDONED_BY, FAULTY_TAINT
from trainguard.remediation import tokens
from trainguard.times import unix

pytestmark = pytest.mark.e2e
SBE = "GPUSingleBitECCErrorsHigh"


def sbe_payload(ns: str, node: str, started: str, **extra: str) -> dict[str, Any]:
    labels = {"alertname": SBE, "severity": "P1", "namespace": ns, "training_job": JOB, "node": node,
              "gpu": "2", "pod": f"{JOB}-0", "UUID": "GPU-2", "prometheus": "mon/k8s", **extra}  # fmt: skip
    return {
        "version": "4", "receiver": "trainguard-operator", "status": "firing", "groupKey": "{}:{}",
        "groupLabels": {}, "commonLabels": labels, "commonAnnotations": {}, "externalURL": "http://am",
        "alerts": [{"status": "firing", "labels": labels, "startsAt": started, "endsAt": "0001-01-01T00:00:00Z",
                    "annotations": {"summary": "Many correctable ECC errors"}, "fingerprint": "0"}],
    }  # fmt: skip


def rfc3339(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def start(cluster: Cluster, ns: str, remediation: dict[str, Any] | None = None) -> None:
    cluster.apply(objects(ns, Sink(), remediation))
    wait_for("monitor Ready", lambda: ready(cluster, ns), timeout=60)
    cluster.apply([job(ns)])


@pytest.fixture
def trainers(operator: Cluster, ns: str, tmp_path: Path) -> Iterator[PodProcesses]:
    start(operator, ns, {"emergencyCheckpointTimeout": "30s"})
    with PodProcesses(operator.api, ns, SELECTOR, tmp_path, fastpath=False) as pods:
        try:
            wait_for("2 trainers past their first full checkpoint",
                     lambda: len(r := pods.running()) == 2 and all(exporter_step(x) >= 120 for x in r),
                     timeout=120)  # fmt: skip
        except AssertionError:
            logs = [
                f"{r.name}: {r.exporter_log()[-800:]}\n{r.trainer_log()[-400:]}" for r in pods.runs.values()
            ]
            raise AssertionError(f"{pods.errors[-3:]}\n" + "\n".join(logs)) from None
        yield pods


def _live_pods(cluster: Cluster, ns: str) -> dict[str, tuple[str, str]]:
    """uid -> (name, node) of the job's pods that are not being deleted."""
    return {
        p.metadata.uid: (p.metadata.name, p.spec.node_name)
        for p in cluster.core.list_namespaced_pod(ns, label_selector=SELECTOR).items
        if p.metadata.deletion_timestamp is None
    }


def test_the_node_is_checkpointed_cordoned_and_tainted_and_the_job_keeps_running(
    operator: Cluster, ns: str, clean_nodes: None, trainers: PodProcesses
) -> None:
    before = _live_pods(operator, ns)
    degraded = trainers.running()[0]
    node = degraded.node
    step_before = min(exporter_step(r) for r in trainers.running())
    token = monitor_token(operator, tokens.ALERTS, ns, JOB)
    started = rfc3339(time.time() - 5)

    status, answer = post(operator, "/v1/alerts", sbe_payload(ns, node, started), token)
    assert status == 200 and answer["accepted"] == 1, answer
    done = finished(operator, ns, "the isolation finished", timeout=90)
    assert done["phase"] == "Succeeded", json.dumps(done, indent=1)
    assert (done["alert"], done["class"], done["node"], done["dryRun"]) == (SBE, "eccDegraded", node, False)
    assert [(s["kind"], s["phase"]) for s in done["steps"]] == [
        ("Cordon", "Succeeded"), ("Taint", "Succeeded"), ("RequestCheckpoint", "Succeeded")
    ], "no restart, no placement"  # fmt: skip
    cordon, taint, ckpt = done["steps"]
    # the trainers saved on request, at or past the step they had reached: the checkpoint came, it did
    # not time out (a full one is otherwise due only every 100 steps). The ranks are independent
    # processes (a world of one each), so each saves at its own step: "checkpoint step N" when they met
    # on one (N at or past the step they had reached), "checkpoints past step P" otherwise.
    assert ckpt["detail"].startswith(("checkpoint step ", "checkpoints past step ")), ckpt
    assert all(r.name in ckpt["detail"] for r in trainers.running()), "every rank, the node's too"
    if ckpt["detail"].startswith("checkpoint step "):
        assert float(ckpt["detail"].split()[2]) >= step_before, (step_before, ckpt)
    assert unix(cordon["time"]) <= unix(taint["time"]) <= unix(ckpt["time"]), "cordoned first: " + str(
        done["steps"]
    )
    assert cordon["detail"] == "cordoned" and taint["detail"].startswith("tainted"), done["steps"]

    n = operator.core.read_node(node)
    assert n.spec.unschedulable is True
    assert n.metadata.annotations[CORDONED_BY] == done["id"]
    assert {(t.key, t.value, t.effect) for t in n.spec.taints or []} >= {(FAULTY_TAINT, SBE, "NoSchedule")}
    for other in {nd for _, nd in before.values()} - {node}:
        assert not operator.core.read_node(other).spec.unschedulable, f"only {node} is isolated"

    # nothing was deleted or moved: the same pods on the same nodes, the trainers still training
    assert _live_pods(operator, ns) == before
    at_cordon = exporter_step(degraded)
    wait_for("the trainer on the cordoned node still stepping", lambda: exporter_step(degraded) > at_cordon + 20,
             timeout=30)  # fmt: skip
    assert {r.uid for r in trainers.running()} == set(before)

    def reasons() -> set[str]:
        items = operator.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={JOB}").items
        return {e.reason for e in items}

    # the Event that it succeeded is posted after the record is saved Succeeded, not with it
    wait_for("the remediation's Events", lambda: {"RemediationPlanned", "RemediationSucceeded"} <= reasons(),
             timeout=30)  # fmt: skip

    # the same alert re-posted (Alertmanager's group and repeat intervals), and the P0 copy the
    # operator's escalation posts for it after 15 minutes: neither acts again
    assert post(operator, "/v1/alerts", sbe_payload(ns, node, started), token)[0] == 200
    copy = sbe_payload(ns, node, rfc3339(time.time()), severity="P0", escalated_from="P1")
    assert post(operator, "/v1/alerts", copy, token)[0] == 200
    # each 200 says the alert was queued: look once the planner has decided on both (one thread, in order)
    wait_for("the operator's decisions on the re-post and the copy", lambda: len(decisions(operator, ns, SBE)) >= 2
             or len(records(operator, ns)) > 1, timeout=30)  # fmt: skip
    assert [r["id"] for r in records(operator, ns)] == [done["id"]]
    said = decisions(operator, ns, SBE)
    assert any("escalated copy of GPUSingleBitECCErrorsHigh" in ln for ln in said), said
    assert _live_pods(operator, ns) == before


def test_notify_cordons_nothing(operator: Cluster, ns: str, clean_nodes: None) -> None:
    start(operator, ns, {"actions": {"eccDegraded": "Notify"}})
    pods = wait_for(
        "2 job pods Running",
        lambda: (items := operator.core.list_namespaced_pod(ns, label_selector=SELECTOR).items)
        and len(items) == 2 and all(p.status.phase == "Running" for p in items) and items,
        timeout=90,
    )  # fmt: skip
    node = pods[0].spec.node_name
    token = monitor_token(operator, tokens.ALERTS, ns, JOB)
    status, answer = post(operator, "/v1/alerts", sbe_payload(ns, node, rfc3339(time.time())), token)
    assert status == 200 and answer["accepted"] == 1, answer
    wait_for("the operator's decision", lambda: f"{SBE} for {ns}/{JOB}: notify only" in operator.operator_logs(),
             timeout=30)  # fmt: skip
    assert records(operator, ns) == []
    n = operator.core.read_node(node)
    assert not n.spec.unschedulable
    assert not [t for t in n.spec.taints or [] if t.key == FAULTY_TAINT]
    assert {p.metadata.uid for p in pods} == set(_live_pods(operator, ns))
