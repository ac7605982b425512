"""The platform's guardrails through the running operator on the local control plane, with a real
Alertmanager: a monitor asking for maxCordonedNodes 1000 gets the operator's ceiling and the withheld
cordon reaches Alertmanager as TrainguardRemediationWithheld; 4 of 8 nodes of a pool going NotReady
together open its circuit breaker (no node cordoned, TrainguardRemediationBreakerOpen in Alertmanager),
and it re-arms by itself once the pool has looked up for --breaker-rearm."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator

import pytest

from e2e.cluster import Cluster
from e2e.monitors import start_job
from e2e.pipeline import OPERATOR, Monitoring, Sink, operator_stack
from e2e.receiver import alert_payload, finished, monitor_token, post, records
from e2e.sidecars import sidecar_that_saw
from tests.processes import wait_for
from trainguard.catalog.alerts import BREAKER_OPEN, WITHHELD
from trainguard.remediation import tokens

pytestmark = pytest.mark.e2e

POOL_LABEL = "e2e.trainguard.io/pool"
REARM_S = 20
STORM = tuple(f"storm-node-{i}" for i in range(8))
FLAGS = ("--max-cordoned-nodes", "1", "--max-cordons-per-window", "100", "--pool-label", POOL_LABEL,
         "--breaker-threshold", "30%", "--breaker-min-down", "3", "--breaker-rearm", f"{REARM_S}s")  # fmt: skip


@pytest.fixture(scope="module")
def guarded(cluster: Cluster) -> Iterator[tuple[Cluster, Monitoring, Sink]]:
    with operator_stack(cluster, flags=FLAGS) as s:
        yield s


def test_a_monitor_asking_for_1000_gets_the_operators_ceiling_and_the_withheld_cordon_pages(
    guarded: tuple[Cluster, Monitoring, Sink], ns: str, clean_nodes: None
) -> None:
    cluster, mon, _ = guarded
    pods = start_job(cluster, ns, {"maxCordonedNodes": 1000, "cordonWindow": "1s"})
    first, second = pods[0].spec.node_name, pods[1].spec.node_name
    token = monitor_token(cluster, tokens.ALERTS, ns, "llama-pretrain")
    with sidecar_that_saw(pods[0], monitor_token(cluster, tokens.EVENTS, ns, "llama-pretrain")):
        assert post(cluster, "/v1/alerts", alert_payload(ns, first), token, OPERATOR)[0] == 200
        done = finished(cluster, ns, "the first remediation done", timeout=120)
    assert done["phase"] == "Succeeded", json.dumps(done, indent=1)
    time.sleep(2)  # past the monitor's own 1s window: only the operator's ceiling can withhold now
    t0 = time.monotonic()
    assert (
        post(cluster, "/v1/alerts", alert_payload(ns, second, "GPUDoubleBitECCError"), token, OPERATOR)[0]
        == 200
    )
    withheld = wait_for("the second record", lambda: len(r := records(cluster, ns)) == 2 and r[1], timeout=30)
    assert [s["kind"] for s in withheld["steps"]] == ["Notify"], withheld
    assert withheld["skipped"].startswith("cordon ceiling reached"), withheld
    assert "--max-cordoned-nodes 1" in withheld["skipped"], withheld
    paged = wait_for(
        f"{WITHHELD} in Alertmanager", lambda: mon.alerts(alertname=WITHHELD, namespace=ns), timeout=60
    )
    print(f"\nwithheld at the ceiling -> {WITHHELD} in Alertmanager in {time.monotonic() - t0:.1f}s")
    assert paged[0]["labels"]["severity"] == "P0" and "ceiling" in paged[0]["annotations"]["summary"], paged
    assert not cluster.core.read_node(second).spec.unschedulable, "the ceiling held: one node cordoned"


def set_ready(cluster: Cluster, node: str, up: bool) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ready = {"type": "Ready", "status": "True" if up else "False", "reason": "KubeletReady" if up else "KubeletNotReady",
             "message": "e2e", "lastHeartbeatTime": now, "lastTransitionTime": now}  # fmt: skip
    current = cluster.core.read_node(node)
    others = [cluster.core.api_client.sanitize_for_serialization(c) for c in current.status.conditions or []
              if c.type != "Ready"]  # fmt: skip
    cluster.core.patch_node_status(node, {"status": {"conditions": [*others, ready]}})


@pytest.fixture
def storm_pool(cluster: Cluster) -> Iterator[tuple[str, ...]]:
    """Eight more fake GPU nodes, labelled as one pool."""
    kubelet = cluster.start_fake_nodes(prefix="storm-node-", count=8)
    try:
        wait_for(
            "8 storm nodes Ready",
            lambda: {n.metadata.name for n in cluster.core.list_node().items
                     if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])}
            >= set(STORM),
            timeout=90,
        )  # fmt: skip
        for name in STORM:
            cluster.core.patch_node(name, {"metadata": {"labels": {POOL_LABEL: "storm"}}})
        yield STORM
    finally:
        kubelet.terminate()
        kubelet.wait(timeout=30)
        for name in STORM:
            cluster.core.delete_node(name)


def test_four_of_eight_nodes_down_together_open_the_breaker_and_it_re_arms_by_itself(
    guarded: tuple[Cluster, Monitoring, Sink], ns: str, clean_nodes: None, storm_pool: tuple[str, ...]
) -> None:
    cluster, mon, _ = guarded
    pods = start_job(cluster, ns, {"maxCordonedNodes": 1000}, {POOL_LABEL: "storm"})
    faulty, healthy = pods[0].spec.node_name, pods[1].spec.node_name
    down = [faulty, *[n for n in storm_pool if n not in (faulty, healthy)][:3]]
    stop = threading.Event()

    def keep_down() -> None:
        """The fake kubelet re-posts Ready=True on its heartbeat, which a dead node's would not."""
        while not stop.is_set():
            for node in down:
                if any(
                    c.type == "Ready" and c.status == "True"
                    for c in cluster.core.read_node(node).status.conditions
                ):
                    set_ready(cluster, node, False)
            stop.wait(1.0)

    for node in down:
        set_ready(cluster, node, False)
    keeper = threading.Thread(target=keep_down, daemon=True)
    keeper.start()
    try:
        t0 = time.monotonic()
        opened = wait_for(f"{BREAKER_OPEN} in Alertmanager", lambda: mon.alerts(alertname=BREAKER_OPEN, pool="storm"),
                          timeout=60)  # fmt: skip
        print(f"\n4 of 8 nodes down -> {BREAKER_OPEN} in Alertmanager in {time.monotonic() - t0:.1f}s")
        assert opened[0]["labels"]["severity"] == "P0" and opened[0]["labels"]["pool_label"] == POOL_LABEL
        # the four are marked NotReady one after another: a pass between the third and the fourth opens the
        # breaker on three (at least 30% and 3 opens it), one after them on four
        assert re.search(r"\b[34] of 8 node\(s\) look down", opened[0]["annotations"]["summary"]), opened
        token = monitor_token(cluster, tokens.ALERTS, ns, "llama-pretrain")
        assert post(cluster, "/v1/alerts", alert_payload(ns, faulty), token, OPERATOR)[0] == 200
        withheld = wait_for("a record withheld by the breaker", lambda: [
            r for r in records(cluster, ns) if r.get("skipped", "").startswith("circuit breaker open")], timeout=60)  # fmt: skip
        assert [s["kind"] for s in withheld[0]["steps"]] == ["Notify"], withheld
        time.sleep(3)
        assert all(not r.get("steps") or [s["kind"] for s in r["steps"]] == ["Notify"] for r in records(cluster, ns)), (
            json.dumps(records(cluster, ns), indent=1))  # fmt: skip
        cordoned = [n for n in storm_pool if cluster.core.read_node(n).spec.unschedulable]
        assert cordoned == [], f"the breaker was open, yet {cordoned} were cordoned"
    finally:
        stop.set()
        keeper.join(timeout=10)
    for node in down:
        set_ready(cluster, node, True)
    t1 = time.monotonic()
    wait_for(f"{BREAKER_OPEN} resolved", lambda: not mon.alerts(alertname=BREAKER_OPEN, pool="storm"),
             timeout=REARM_S + 60)  # fmt: skip
    rearmed = time.monotonic() - t1
    print(
        f"pool up again -> breaker re-armed and its page resolved in {rearmed:.1f}s (--breaker-rearm {REARM_S}s)"
    )
    assert rearmed >= REARM_S - 1, f"re-armed after {rearmed:.1f}s, before the {REARM_S}s clear time"
    # re-armed: a node fault on a node of the pool acts again
    token = monitor_token(cluster, tokens.ALERTS, ns, "llama-pretrain")
    events = monitor_token(cluster, tokens.EVENTS, ns, "llama-pretrain")
    with sidecar_that_saw(pods[1], events, fault="ecc-dbe"):
        assert (
            post(cluster, "/v1/alerts", alert_payload(ns, healthy, "GPUDoubleBitECCError"), token, OPERATOR)[
                0
            ]
            == 200
        )
        acted = wait_for("a remediation that cordons", lambda: [r for r in records(cluster, ns) if r["phase"] in
                         ("Succeeded", "Failed") and any(s["kind"] == "Cordon" for s in r["steps"])], timeout=120)  # fmt: skip
    assert acted[0]["phase"] == "Succeeded", json.dumps(acted, indent=1)
    assert cluster.core.read_node(healthy).spec.unschedulable
