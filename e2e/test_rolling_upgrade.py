"""Two operator processes through a rolling upgrade in the middle of a remediation, on the local control
plane: the gang is restarted once, the node cordoned once, the record Succeeded once, the restart budget
spent once.

Everything is real but the containers' images (e2e/pipeline.py: the pods' exporters and trainers as
processes, Prometheus and Alertmanager, the Job controller and the scheduler). The replicas are two
`trainguard operator` processes sharing kopf's peering object; the one with the higher priority leads.

The remediation is held mid-run without a sleep: the trainers are stopped (SIGSTOP), so the emergency
checkpoint the record's RequestCheckpoint step asks for cannot be taken, and the step waits (up to the
monitor's emergencyCheckpointTimeout, longer than any test here) until the test lets the trainers go on.
The record is then past ConfirmFault, Cordon and Taint, with RestartGang and ConfirmPlacement to come.

What each replica did to the cluster is counted by the apiserver itself (e2e/audit.py), and the pods by
the pod runner: a gang restarted twice would show more deleted or created pods, a second cordon a second
write."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.audit import Audit
from e2e.cluster import Cluster
from e2e.pipeline import JOB, Monitoring, Sink, finished, inject, monitoring_stack, start
from e2e.podprocesses import PodProcesses, PodRun
from e2e.receiver import decisions, records
from tests.exposition import scrape, value
from tests.processes import wait_for
from trainguard.catalog.kubernetes import CORDONED_BY
from trainguard.render.sidecar import EXPORTER
from trainguard.times import unix

pytestmark = pytest.mark.e2e

Stack = tuple[Cluster, Monitoring, Sink]
GPU_FAULT_STEPS = ["ConfirmFault", "Cordon", "Taint", "RequestCheckpoint", "RestartGang", "ConfirmPlacement"]
REMEDIATION = {"emergencyCheckpointTimeout": "10m", "maxCordonedNodes": 3, "jobRestartBudget": 1}
"""The checkpoint wait outlasts the test (the test ends it); one restart allowed, so a second one is
refused and says how many the budget counted."""
OLD_IMAGE, NEW_IMAGE = "registry.invalid/trainguard:0.1.0", "registry.invalid/trainguard:0.2.0"
"""The operator's --sidecar-image before and after the upgrade (the chart passes its own image.*)."""


@pytest.fixture(scope="module")
def monitoring(cluster: Cluster) -> Iterator[Stack]:
    with monitoring_stack(cluster) as s:
        yield s


@pytest.fixture
def replicas(monitoring: Stack) -> Iterator[Any]:
    """Starts operator replicas in front of the stack (stopped when the test ends)."""
    cluster, mon, _ = monitoring

    def replica(name: str, priority: int, image: str = OLD_IMAGE) -> subprocess.Popen[bytes]:
        return cluster.start_operator(
            priority=priority,
            name=name,
            extra=("--alertmanager-url", mon.alertmanager, "--sidecar-image", image),
        )

    yield replica
    cluster.stop_all_operators()


def sidecar_images(cluster: Cluster, ns: str, runs: list[PodRun]) -> set[str]:
    """The images of the exporter sidecars the webhook injected into these pods."""
    images = set()
    for run in runs:
        spec = cluster.core.read_namespaced_pod(run.name, ns).spec
        images |= {c.image for c in [*(spec.init_containers or []), *spec.containers] if c.name == EXPORTER}
    return images


def leads(cluster: Cluster, name: str) -> bool:
    """The replica's own word (its trainguard_operator_leader gauge, kopf's rule on the peering object)."""
    return value(scrape(cluster.metrics_url(name)), "trainguard_operator_leader") == 1.0


def hold(pods: PodProcesses, sig: signal.Signals) -> None:
    for run in pods.running():
        assert run.trainer is not None
        run.trainer.send_signal(sig)


def checkpoint_under_way(cluster: Cluster, ns: str) -> dict[str, Any] | None:
    """The record once its RequestCheckpoint step has asked the sidecars and waits (it stays there)."""
    found = records(cluster, ns)
    if not found:
        return None
    step = next(s for s in found[0]["steps"] if s["kind"] == "RequestCheckpoint")
    return found[0] if step["phase"] == "InProgress" and (step.get("progress") or {}).get("asked") else None


def owner_moved(cluster: Cluster, ns: str, old: str) -> dict[str, Any] | None:
    found = records(cluster, ns)
    return found[0] if found and found[0].get("owner") not in (None, "", old) else None


def fault_under_way(cluster: Cluster, ns: str, pods: PodProcesses) -> tuple[PodRun, PodRun, dict[str, Any]]:
    """With the job's trainers stopped, a fatal XID on rank 0's node, and the record waiting in its
    RequestCheckpoint step: the faulty and the healthy rank, and the record."""
    faulty, healthy = sorted(pods.running(), key=lambda r: r.rank)
    hold(pods, signal.SIGSTOP)  # the checkpoint request waits: no trainer can answer it
    inject(faulty, "xid-79")
    record = wait_for(
        "the record waiting for the checkpoint", lambda: checkpoint_under_way(cluster, ns), timeout=60
    )
    assert [s["phase"] for s in record["steps"][:3]] == ["Succeeded"] * 3, record
    return faulty, healthy, record


def restarted_once(
    cluster: Cluster, ns: str, pods: PodProcesses, faulty: PodRun, healthy: PodRun, *, audit: Audit | None
) -> dict[str, Any]:
    """Waits for the record to finish; asserts one record, one cordon, one gang restart; returns the record."""
    (record,) = finished(cluster, ns, timeout=180)
    assert record["phase"] == "Succeeded", json.dumps(record, indent=1)
    assert [s["kind"] for s in record["steps"]] == GPU_FAULT_STEPS, record
    assert [s["phase"] for s in record["steps"]] == ["Succeeded"] * len(GPU_FAULT_STEPS), record
    assert "saved on" in record["steps"][3]["detail"], record["steps"][3]
    node = cluster.core.read_node(faulty.node)
    assert node.spec.unschedulable is True and (node.metadata.annotations or {})[CORDONED_BY] == record["id"]
    old = {faulty.name, healthy.name}
    wait_for("the new gang running", lambda: len(r := pods.running()) == 2 and not {x.name for x in r} & old,
             timeout=90)  # fmt: skip
    announced = wait_for("the RemediationSucceeded Event", lambda: cluster.events(ns, JOB, "RemediationSucceeded"),
                         timeout=30)  # fmt: skip
    assert len(announced) == 1, [e.message for e in announced]
    created = {r.uid for r in [*pods.finished, *pods.runs.values()]}
    assert len(created) == 4, (
        f"the gang restarted once: {sorted(r.name for r in [*pods.finished, *pods.runs.values()])}"
    )
    if audit is not None:
        assert audit.pod_deletions(ns) == Counter(old), audit.pod_deletions(ns)
        assert audit.cordons(faulty.node) == 1, audit.operator_events("patch", "nodes")
    return record


def budget_spent_once(
    cluster: Cluster, ns: str, pods: PodProcesses, leader: str, after: dict[str, Any]
) -> None:
    """One more failure of the job (a trainer OOM-killed) is refused by the restart budget of 1, which
    says how many restarts it counted. The kill comes in a later second than `after` (the restart's
    record) ended: a termination no later than a restart that finished is one that restart answered."""
    ended = unix(after["updated"])
    wait_for(
        "a second past the restart", lambda: time.time() >= math.floor(ended) + 1, timeout=5, interval=0.1
    )
    victim = pods.running()[0]
    # decisions logged before the kill (the restarted gang's own exits, judged part of the restart) are not
    # the decision on it
    before = len(decisions(cluster, ns, "TrainingInterrupted", leader))
    t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cluster.core.patch_namespaced_pod_status(victim.name, ns, {"status": {"phase": "Failed", "containerStatuses": [
        {"name": "trainer", "ready": False, "restartCount": 0, "image": "registry.invalid/llama:1", "imageID": "",
         "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": t, "finishedAt": t}}}]}})  # fmt: skip
    wait_for("the operator's decision on the OOM kill", lambda: len(records(cluster, ns)) == 2
             or len(decisions(cluster, ns, "TrainingInterrupted", leader)) > before, timeout=60)  # fmt: skip
    assert len(records(cluster, ns)) == 2, decisions(cluster, ns, "TrainingInterrupted", leader)[before:]
    refused = finished(cluster, ns, 2, timeout=60)[1]
    assert refused["alert"] == "TrainingInterrupted", refused
    assert refused["skipped"].startswith("restart budget spent: 1 restart(s) of this job in the last 24h"), (
        refused
    )


def test_a_rolling_upgrade_mid_remediation_restarts_the_gang_once(
    monitoring: Stack, replicas: Any, ns: str, clean_nodes: None, tmp_path: Path
) -> None:
    cluster = monitoring[0]
    old_name, new_name = "operator-upgrade-old", "operator-upgrade-new"
    old = replicas(old_name, 60)
    wait_for("the old replica leading", lambda: leads(cluster, old_name), timeout=90)
    audit = Audit(cluster.audit_log) if cluster.audit_log else None
    pods = start(monitoring, ns, tmp_path, REMEDIATION)
    try:
        assert sidecar_images(cluster, ns, pods.running()) == {OLD_IMAGE}
        faulty, healthy, record = fault_under_way(cluster, ns, pods)
        # the rolling upgrade: the new replica starts (a higher priority: it leads) while the old one runs,
        # with the new version's image for the sidecars, as the chart's image.tag gives both
        replicas(new_name, 70, NEW_IMAGE)
        wait_for("the new replica leading, the old one standing by",
                 lambda: leads(cluster, new_name) and not leads(cluster, old_name), timeout=60)  # fmt: skip
        taken = wait_for("the new replica taking the record over", lambda: owner_moved(cluster, ns, record["owner"]),
                         timeout=60)  # fmt: skip
        assert checkpoint_under_way(cluster, ns), ("still mid-run", taken)
        # then the old one is stopped, as a Deployment does once the new pod is ready
        t0 = time.monotonic()
        cluster.stop_operator(old)  # SIGTERM; SIGKILL after 30 s, as the kubelet after the grace period
        stopped_in = time.monotonic() - t0
        assert old.returncode == 0, f"the old replica did not stop on SIGTERM within 30 s: {old.returncode}"
        hold(pods, signal.SIGCONT)
        done = restarted_once(cluster, ns, pods, faulty, healthy, audit=audit)
        assert done["owner"] == taken["owner"], "the new replica finished it"
        assert done["steps"][1]["detail"] == "cordoned", done["steps"][1]
        assert f"resuming remediation {record['id']}" in (cluster.workdir / f"{new_name}.log").read_text()
        # one version: the pods created after the upgrade (the restarted gang) run the new sidecar image
        assert sidecar_images(cluster, ns, pods.running()) == {NEW_IMAGE}
        print(f"\nrolling upgrade mid-remediation: old replica stopped (SIGTERM) in {stopped_in:.1f}s "
              f"(exit {old.returncode}); record {done['phase']}, one restart")  # fmt: skip
        budget_spent_once(cluster, ns, pods, new_name, done)
    finally:
        hold(pods, signal.SIGCONT)
        pods.__exit__(None, None, None)


def test_an_operator_killed_mid_step_is_taken_over_by_a_new_one_that_restarts_the_gang_once(
    monitoring: Stack, replicas: Any, ns: str, clean_nodes: None, tmp_path: Path
) -> None:
    cluster = monitoring[0]
    old_name, new_name = "operator-killed-old", "operator-killed-new"
    old = replicas(old_name, 80)
    wait_for("the old replica leading", lambda: leads(cluster, old_name), timeout=90)
    audit = Audit(cluster.audit_log) if cluster.audit_log else None
    pods = start(monitoring, ns, tmp_path, REMEDIATION)
    try:
        faulty, healthy, record = fault_under_way(cluster, ns, pods)
        old.kill()  # no cleanup: its peering entry stays until it expires, its executor dies mid-step
        old.wait()
        cluster.operators.remove(old)
        t0 = time.monotonic()
        replicas(new_name, 90)  # above the dead replica's entry: it leads at once
        wait_for("the new replica leading", lambda: leads(cluster, new_name), timeout=60)
        taken = wait_for("the new replica resuming the record", lambda: owner_moved(cluster, ns, record["owner"]),
                         timeout=60)  # fmt: skip
        took = time.monotonic() - t0
        assert checkpoint_under_way(cluster, ns), ("still mid-run", taken)
        hold(pods, signal.SIGCONT)
        done = restarted_once(cluster, ns, pods, faulty, healthy, audit=audit)
        assert done["owner"] == taken["owner"], "the new replica finished it"
        print(f"\nold replica killed mid-step: the new one started and resumed the record in {took:.1f}s; "
              f"record {done['phase']}, one restart")  # fmt: skip
        budget_spent_once(cluster, ns, pods, new_name, done)
    finally:
        hold(pods, signal.SIGCONT)
        pods.__exit__(None, None, None)
