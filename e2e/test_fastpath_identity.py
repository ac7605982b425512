"""The fast path's sender on the local control plane: the running operator reviews a pod-bound,
audience-bound ServiceAccount token (from the TokenRequest API, as the kubelet projects it) and takes
the pod and node from it. A pod of the monitored job is believed about its own node only, a pod of
another job is refused, and so is a token minted for another audience or the monitor's old token.

The pods are bound to fake nodes by name and never run: the check reads the pod, not its containers."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from e2e.cluster import Cluster
from e2e.monitors import quickstart, ready
from e2e.podprocesses import bound_token
from e2e.receiver import alert_payload, monitor_token, post, records
from tests.processes import wait_for
from trainguard.catalog.events import EVENTS_AUDIENCE
from trainguard.remediation import tokens
from trainguard.remediation.identity import NODE_NAME, POD_NAME, POD_UID

pytestmark = pytest.mark.e2e

JOB = "llama-pretrain"


def bare_pod(cluster: Cluster, ns: str, name: str, app: str, node: str) -> dict[str, Any]:
    """A pod of ServiceAccount `trainer` labelled app=`app`, bound to `node` (no scheduler, no kubelet)."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": {
            "serviceAccountName": "trainer",
            "nodeName": node,
            "containers": [{"name": "trainer", "image": "registry.invalid/llama:1"}],
        },
    }
    created = cluster.core.create_namespaced_pod(ns, body)
    return dict(cluster.api.sanitize_for_serialization(created))


def xid_event(ns: str, node: str, pod: str) -> dict[str, Any]:
    labels = alert_payload(ns, node)["alerts"][0]["labels"] | {"pod": pod}
    return {"source": "sidecar", "labels": labels, "annotations": {"summary": "fatal XID 79"},
            "fingerprint": "x", "startsAt": time.time()}  # fmt: skip


def test_the_fast_path_believes_the_sending_pod_not_the_body(
    operator: Cluster, ns: str, clean_nodes: None
) -> None:
    monitor, policy = quickstart(ns)
    monitor["spec"]["remediation"] = {"dryRun": True}  # the record says which node it would cordon
    operator.apply([monitor, policy])
    wait_for("monitor Ready", lambda: ready(operator, ns))
    operator.core.create_namespaced_service_account(ns, {"metadata": {"name": "trainer"}})
    node_a, node_b = sorted(n.metadata.name for n in operator.core.list_node().items)[:2]
    mine = bare_pod(operator, ns, f"{JOB}-0", JOB, node_a)
    other = bare_pod(operator, ns, "bert-0", "bert", node_a)
    token = bound_token(operator.core, mine, EVENTS_AUDIENCE)

    # what this apiserver says of such a token: the pod, its uid and (Kubernetes 1.30+) its node
    version = client.VersionApi(operator.api).get_code().git_version
    asked = {"spec": {"token": token, "audiences": [EVENTS_AUDIENCE]}}
    review = operator.api.sanitize_for_serialization(
        client.AuthenticationV1Api(operator.api).create_token_review(asked)
    )["status"]
    extra = review["user"]["extra"]
    print(f"\nkube-apiserver {version}: TokenReview extra {sorted(extra)}")
    assert review["authenticated"] and review["audiences"] == [EVENTS_AUDIENCE]
    assert review["user"]["username"] == f"system:serviceaccount:{ns}:trainer"
    assert (extra[POD_NAME], extra[POD_UID], extra[NODE_NAME]) == (
        [f"{JOB}-0"],
        [mine["metadata"]["uid"]],
        [node_a],
    )

    # the job's pod on node A claiming node B and another pod: taken as itself, on node A
    status, answer = post(operator, "/v1/events", xid_event(ns, node_b, f"{JOB}-9"), token)
    assert status == 200, answer
    record = wait_for("the dry-run record", lambda: (r := records(operator, ns)) and r[0], timeout=30)
    assert record["alert"] == "GPUCriticalXid" and record["node"] == node_a, record
    log = (operator.workdir / "operator.log").read_text(errors="replace")
    assert f"from pod {ns}/{JOB}-0 claimed node={node_b!r} (is {node_a!r})" in log

    # a pod of another job, with a valid token of its own
    status, answer = post(
        operator,
        "/v1/events",
        xid_event(ns, node_a, "bert-0"),
        bound_token(operator.core, other, EVENTS_AUDIENCE),
    )
    assert status == 403, answer
    assert (
        answer["error"]
        == f"pod {ns}/bert-0 is not a pod of {ns}/{JOB} (the monitor's selector does not match it)"
    )

    # the job's own pod, with a token for another audience; the monitor's events token is no identity
    for refused in (bound_token(operator.core, mine, "https://kubernetes.default.svc.cluster.local"),
                    monitor_token(operator, tokens.EVENTS, ns, JOB)):  # fmt: skip
        status, answer = post(operator, "/v1/events", xid_event(ns, node_a, f"{JOB}-0"), refused)
        assert status == 401, answer
        assert token not in str(answer)
    time.sleep(2)
    assert len(records(operator, ns)) == 1, "nothing refused reached the planner"
