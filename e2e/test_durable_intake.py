"""A 200 from the operator's receiver means the signal will be acted on, on the local control plane: the
signal is in the monitor's status.pendingSignals before the answer, so an operator killed before it
planned leaves it there and the next one acts on it; twelve copies of one fault are one pending entry and
one record.

The planner is kept from deciding in the way a cluster can do it to any operator: a
ValidatingAdmissionPolicy refuses status writes that carry remediation records in the test's namespace
(an admission outage, a policy gone wrong), while the receiver's write of the pending signal, which
carries none, goes through. No test-only switch in the operator is involved."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.cluster import Cluster
from e2e.monitors import MON, start_job
from e2e.podprocesses import bound_token
from e2e.receiver import alert_payload, finished, monitor_token, post, records
from e2e.sidecars import sidecar_that_saw
from tests.processes import wait_for
from trainguard.catalog.events import EVENTS_AUDIENCE
from trainguard.remediation import tokens

pytestmark = pytest.mark.e2e

JOB = "llama-pretrain"
MARK = "e2e: remediation records refused"
ROOM = {"maxCordonedNodes": 3}
"""The tests share three nodes, and a planner counts the cordons it planned against the cap for an hour
even once the test's cleanup took their annotations off: room for each test's own cordon."""


def pending(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    return list(((cluster.get(*MON, ns, JOB) or {}).get("status") or {}).get("pendingSignals") or [])


def _probe(cluster: Cluster, ns: str) -> bool:
    """Whether a status write carrying a record is refused by the policy now (a dry run: nothing stays)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    record = {"id": "probe", "fingerprint": "probe", "alert": "Probe", "class": "nodeFault", "phase": "Planned",
              "created": now, "updated": now}  # fmt: skip
    try:
        cluster.custom.patch_namespaced_custom_object_status(
            MON[0].split("/")[0], MON[0].split("/")[1], ns, "trainingjobmonitors", JOB,
            {"status": {"remediations": [record]}}, dry_run="All",
        )  # fmt: skip
    except ApiException as exc:
        if MARK in (exc.body or ""):
            return True
        raise
    return False


@contextmanager
def records_refused(cluster: Cluster, ns: str) -> Iterator[None]:
    """Status writes of the monitor that carry remediation records are refused in `ns` until the block
    ends (and the policy is gone, as the apiserver sees it)."""
    adm = client.AdmissionregistrationV1Api(cluster.api)
    name = f"refuse-records-{ns}"
    adm.create_validating_admission_policy({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": ["trainguard.io"], "apiVersions": ["*"],
                                                         "operations": ["UPDATE"],
                                                         "resources": ["trainingjobmonitors/status"]}]},
                 "validations": [{"expression": "!has(object.status) || !has(object.status.remediations) || "
                                                "size(object.status.remediations) == 0", "message": MARK}]},
    })  # fmt: skip
    adm.create_validating_admission_policy_binding({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}},
    })  # fmt: skip
    try:
        wait_for("the policy refusing records", lambda: _probe(cluster, ns), timeout=30)
        yield
    finally:
        adm.delete_validating_admission_policy_binding(name)
        adm.delete_validating_admission_policy(name)
        wait_for("the policy gone", lambda: not _probe(cluster, ns), timeout=30)


def test_a_p0_answered_200_is_acted_on_by_the_next_operator_when_the_first_is_killed_before_it_planned(
    operator: Cluster, ns: str, clean_nodes: None
) -> None:
    pods = start_job(operator, ns, ROOM)
    node = pods[0].spec.node_name
    token = monitor_token(operator, tokens.ALERTS, ns, JOB)
    body = alert_payload(ns, node)
    with records_refused(operator, ns):
        status, answer = post(operator, "/v1/alerts", body, token)
        assert status == 200 and answer["accepted"] == 1, answer
        # the 200 came after the write: no waiting
        [entry] = pending(operator, ns)
        assert (entry["alertname"], entry["labels"]["node"]) == ("GPUCriticalXid", node), entry
        for proc in list(operator.operators):  # killed: no cleanup, its queue lost
            proc.kill()
            proc.wait()
            operator.operators.remove(proc)
    assert records(operator, ns) == [] and len(pending(operator, ns)) == 1
    assert not operator.core.read_node(node).spec.unschedulable
    # a new replica (a higher priority: the killed one's peering entry holds its priority for a minute);
    # the node's sidecar saw the XID, which the remediation confirms before it cordons: serving before
    # the replica starts, which may confirm at once
    with sidecar_that_saw(pods[0], monitor_token(operator, tokens.EVENTS, ns, JOB)):
        operator.start_operator(priority=150, keep_ports=True)
        done = finished(operator, ns, "the remediation of the pending signal finished", timeout=120)
    assert done["phase"] == "Succeeded", json.dumps(done, indent=1)
    assert done["id"] == entry["id"]
    assert operator.core.read_node(node).spec.unschedulable is True
    assert pending(operator, ns) == [] and len(records(operator, ns)) == 1


def test_twelve_copies_of_one_fault_posted_at_once_are_one_pending_entry_and_one_record(
    operator: Cluster, ns: str, clean_nodes: None
) -> None:
    pods = start_job(operator, ns, ROOM)
    node = pods[0].spec.node_name
    am = alert_payload(ns, node)
    labels = am["alerts"][0]["labels"]
    sidecar = {"source": "sidecar", "labels": {k: labels[k] for k in ("alertname", "severity", "namespace",
               "training_job", "node", "gpu", "pod")}, "annotations": {}, "startsAt": time.time() - 10}  # fmt: skip
    sender = operator.api.sanitize_for_serialization(pods[0])  # the pod on that node, with its bound token
    posts = [("/v1/alerts", am, monitor_token(operator, tokens.ALERTS, ns, JOB))] * 9 + [
        ("/v1/events", sidecar, bound_token(operator.core, sender, EVENTS_AUDIENCE))
    ] * 3
    answers: list[int] = []
    start = threading.Barrier(len(posts))

    def send(path: str, payload: dict[str, Any], token: str) -> None:
        start.wait()
        answers.append(post(operator, path, payload, token)[0])

    # the node's sidecar saw the XID and serves before the refusal ends: the leader's pass may plan and
    # confirm the entry the moment the apiserver takes its record (it once came first, and found no sidecar)
    with sidecar_that_saw(pods[0], monitor_token(operator, tokens.EVENTS, ns, JOB)):
        with records_refused(operator, ns):
            threads = [threading.Thread(target=send, args=p) for p in posts]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert answers == [200] * 12
            [entry] = pending(operator, ns)
            assert entry["source"] == "sidecar", "the copy that started earliest"
        # the policy gone, the leader's pass plans the entry its planner could not record
        done = finished(operator, ns, "the remediation finished", timeout=120)
    assert done["phase"] == "Succeeded", json.dumps(done, indent=1)
    time.sleep(3)
    assert len(records(operator, ns)) == 1 and pending(operator, ns) == []
