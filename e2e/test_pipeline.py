"""The full P0 pipeline on the local control plane, everything real but the containers' images.

A 2-pod Indexed Job on fake GPU nodes. Each pod's injected exporter runs as a local process from the
pod's own spec (simulated GPUs, fault injection on) and examples/train_tiny.py trains through the SDK
beside it (e2e/podprocesses.py). Prometheus scrapes the exporters and evaluates the rules read back
from the apiserver; Alertmanager routes with the config read back from the apiserver, its webhook
pointing at the operator's TLS receiver (e2e/pipeline.py), both run from the configuration the real
prometheus-operator generates (e2e/prometheus_operator.py).
The operator acts through the real scheduler and Job controller.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from e2e.cluster import Cluster
from e2e.pipeline import (
    JOB,
    OPERATOR,
    Monitoring,
    Sink,
    diagnostics,
    exporter_step,
    finished,
    inject,
    resumed_from,
    start,
)
from e2e.receiver import alert_payload, decisions, monitor_token, post, records
from tests.exposition import scrape, value
from tests.processes import wait_for
from trainguard.remediation import tokens

pytestmark = pytest.mark.e2e

GPU_FAULT_STEPS = ["ConfirmFault", "Cordon", "Taint", "RequestCheckpoint", "RestartGang", "ConfirmPlacement"]
"""A GPU fault's plan: the node's sidecar confirms it, cordon and taint, then the checkpoint and the restart."""


class Stages:
    """First time each condition held, polled together: the timeline of one fault."""

    def __init__(self, checks: dict[str, Callable[[], object]]) -> None:
        self.checks, self.seen, self.t0 = checks, dict[str, float](), time.monotonic()

    def poll(self) -> bool:
        for name, check in self.checks.items():
            if name not in self.seen:
                try:
                    if check():
                        self.seen[name] = time.monotonic() - self.t0
                except (OSError, LookupError, ValueError):
                    pass
        return len(self.seen) == len(self.checks)

    def report(self) -> str:
        return "  ".join(f"{k} {v:.1f}s" for k, v in sorted(self.seen.items(), key=lambda kv: kv[1]))


def test_a_node_fault_is_checkpointed_cordoned_and_the_gang_resumes_on_a_healthy_node_and_the_spare(
    stack: tuple[Cluster, Monitoring, Sink], ns: str, clean_nodes: None, spare: str, tmp_path: Path
) -> None:
    cluster, mon, sink = stack
    with start(stack, ns, tmp_path) as pods:
        a, b = sorted(pods.running(), key=lambda r: r.rank)
        old = {a.name, b.name}
        stages = Stages({
            "alert firing in Prometheus": lambda: mon.firing("GPUCriticalXid", namespace=ns, node=a.node),
            "record written": lambda: records(cluster, ns),
            "checkpoint acknowledged": lambda: any(s["kind"] == "RequestCheckpoint" and s["phase"] == "Succeeded"
                                                   for s in records(cluster, ns)[0]["steps"]),
            "node cordoned": lambda: cluster.core.read_node(a.node).spec.unschedulable,
            "gang placed": lambda: records(cluster, ns)[0]["phase"] == "Succeeded",
            "training resumed": lambda: len(resumed_from(pods, old)) == 2,
        })  # fmt: skip
        inject(a, "xid-79")
        deadline = time.monotonic() + 180
        while not stages.poll() and time.monotonic() < deadline:
            time.sleep(0.2)
        print(f"\nnode fault on {a.node}: {stages.report()}")
        missing = sorted(set(stages.checks) - set(stages.seen))
        assert not missing, f"never: {missing}; {stages.report()}\n" + diagnostics(
            cluster, mon, pods, ns, sink
        )
        # The fault pages by the fast path (the operator posts it into Alertmanager, held five minutes); the
        # rule's own copy resolves with the faulty pod's exporter within seconds and stays muted. The node
        # stays broken: the operator's TrainguardNodeCordoned (P2: e-mail and ticket) says so.
        (record,) = records(cluster, ns)
        kinds = [s["kind"] for s in record["steps"]]
        assert kinds == GPU_FAULT_STEPS, record
        assert record["steps"][0]["detail"].startswith(f"confirmed by the sidecar of {a.name} on {a.node}"), (
            record
        )
        checkpoint = record["steps"][3]["detail"]
        assert "saved on" in checkpoint, checkpoint
        saved = int(float(checkpoint.split("checkpoint step ")[1].split()[0]))
        node = cluster.core.read_node(a.node)
        assert any(t.key == "trainguard.io/faulty" for t in node.spec.taints or [])
        placed = {r.node for r in pods.running()}
        assert placed == {b.node, spare}, (placed, record["steps"][-1])
        steps = {float(ln.split("step ")[1].split()[0]) for ln in resumed_from(pods, old)}
        restart = next(s["detail"] for s in record["steps"] if s["kind"] == "RestartGang")
        pointer = float(restart.split("resume-from step ")[1].split()[0])
        # the newest checkpoint every rank has, the faulty node's rank included (its replacement loads its
        # own shard): not the emergency one only the healthy rank saved
        assert steps == {pointer} and pointer <= saved, (
            f"both ranks resume from the pointer {pointer} (emergency checkpoint {saved}): {steps}"
        )
        # paged by the fast path within seconds, which nothing orders before the gang's resumption
        wait_for(
            "the fault paged",
            lambda: sink.received("phone", "GPULost", namespace=ns, node=a.node),
            timeout=30,
        )
        wait_for("TrainguardNodeCordoned e-mailed (P2 group_wait 1m)", lambda: sink.received(
            "email", "TrainguardNodeCordoned", namespace=ns, node=a.node), timeout=120)  # fmt: skip
        wait_for("training going on past the checkpoint", lambda: min(exporter_step(r) for r in pods.running()) > saved,
                 timeout=30)  # fmt: skip


def test_nan_loss_pauses_training_and_pins_the_good_checkpoint_without_cordoning(
    stack: tuple[Cluster, Monitoring, Sink], ns: str, clean_nodes: None, tmp_path: Path
) -> None:
    cluster, _mon, sink = stack
    with start(stack, ns, tmp_path) as pods:
        a = pods.running()[0]
        inject(a, "nan-loss", gpu=None)
        (record,) = finished(cluster, ns, timeout=60)
        assert record["alert"] == "TrainingLossNonFinite", record
        assert [s["kind"] for s in record["steps"]] == ["Pause", "PinCheckpoint", "RestartInPlace"], record
        assert record["phase"] == "Succeeded", record
        assert "pinned step" in record["steps"][1]["detail"], record["steps"][1]
        # train_tiny.py runs without trainguard launch: nothing restarts it, it stays paused at the pin
        assert record["steps"][2]["phase"] == "Skipped", record["steps"][2]
        assert "training stays paused at the pin" in record["steps"][2]["detail"], record["steps"][2]

        def still() -> bool:  # the trainers see the pause at their next control refresh
            before = {r.name: exporter_step(r) for r in pods.running()}
            time.sleep(3)
            return before == {r.name: exporter_step(r) for r in pods.running()}

        wait_for("training paused", still, timeout=45, interval=0)
        assert not any(n.spec.unschedulable for n in cluster.core.list_node().items), "a NaN never cordons"
        assert sink.received("phone", "TrainingLossNonFinite", namespace=ns) or wait_for(
            "the page", lambda: sink.received("phone", "TrainingLossNonFinite", namespace=ns), timeout=30
        )


def test_an_oom_killed_trainer_pages_training_interrupted_and_the_gang_restarts_from_the_checkpoint(
    stack: tuple[Cluster, Monitoring, Sink], ns: str, clean_nodes: None, tmp_path: Path
) -> None:
    cluster, mon, sink = stack
    with start(stack, ns, tmp_path) as pods:
        victim = pods.running()[0]
        old = {r.name for r in pods.running()}
        t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        cluster.core.patch_namespaced_pod_status(victim.name, ns, {"status": {"phase": "Failed", "containerStatuses": [
            {"name": "trainer", "ready": False, "restartCount": 0, "image": "registry.invalid/llama:1", "imageID": "",
             "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": t, "finishedAt": t}}}]}})  # fmt: skip
        (record,) = finished(cluster, ns)
        assert record["alert"] == "TrainingInterrupted" and record["phase"] == "Succeeded", record
        assert [(s["kind"], s["phase"]) for s in record["steps"]] == [
            ("RestartInPlace", "Skipped"), ("RestartGang", "Succeeded"), ("ConfirmPlacement", "Succeeded")
        ], record  # fmt: skip
        wait_for("TrainingInterrupted paged", lambda: sink.received("phone", "TrainingInterrupted", namespace=ns),
                 timeout=30)  # fmt: skip
        try:  # two exporters and two trainers start from cold Python: slow on a loaded two-core CI machine
            lines = wait_for(
                "both new trainers resumed", lambda: len(x := resumed_from(pods, old)) == 2 and x, timeout=120
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n" + diagnostics(cluster, mon, pods, ns, sink)) from None
        gang = next(
            s for s in record["steps"] if s["kind"] == "RestartGang"
        )  # after the skipped in-place one
        assert "resume-from" in gang["detail"] or "checkpoint" in gang["detail"], record
        # the placement awaited both ranks, the OOM-killed one's late replacement too (its Failed pod
        # and the new one share a completion index): counting only the live pod it deleted, it cleared
        # resume-from on the first new pod, and the other rank started from fresh weights
        assert gang["progress"]["count"] == 2, gang
        assert all("resuming after the checkpoint of step" in ln for ln in lines)
        # what ConfirmPlacement checked: each new pod says the pointer the webhook gave its exporter
        given = json.loads(gang["progress"]["resumeFrom"])
        for name in {r.name for r in pods.running()} - old:
            meta = cluster.core.read_namespaced_pod(name, ns).metadata
            said = json.loads((meta.annotations or {})["trainguard.io/resume-from"])
            assert (said["step"], said["path"]) == (given["step"], given["path"]), (name, said, given)


def test_a_forged_alert_changes_nothing(
    stack: tuple[Cluster, Monitoring, Sink], ns: str, clean_nodes: None, tmp_path: Path
) -> None:
    cluster, _, _ = stack
    with start(stack, ns, tmp_path) as pods:
        a = pods.running()[0]
        for token in (None, "forged", monitor_token(cluster, tokens.EVENTS, ns, JOB),
                      monitor_token(cluster, tokens.ALERTS, ns, "another-job", uid="no-such-monitor")):  # fmt: skip
            status, _ = post(cluster, "/v1/alerts", alert_payload(ns, a.node), token, name=OPERATOR)
            assert status == 401, token
        time.sleep(3)
        assert records(cluster, ns) == []
        assert not cluster.core.read_node(a.node).spec.unschedulable
        assert {r.name for r in pods.running()} == {r.name for r in pods.runs.values()}


def test_one_fault_by_the_fast_path_and_by_alertmanager_acts_once(
    stack: tuple[Cluster, Monitoring, Sink], ns: str, clean_nodes: None, tmp_path: Path
) -> None:
    cluster, mon, sink = stack
    with start(stack, ns, tmp_path, {"actions": {"nodeFault": "Cordon"}}) as pods:
        a = pods.running()[0]
        inject(a, "ecc-dbe")
        (first,) = finished(cluster, ns, timeout=60)
        # Alertmanager got it too, and posted it to the operator as it notified the phone
        wait_for("Alertmanager's notification", lambda: sink.received("phone", "GPUDoubleBitECCError", namespace=ns),
                 timeout=60)  # fmt: skip
        # The operator takes that post in on its planner's thread. The sidecar sent the DBE and its XID 48; one
        # made the record, the other is a duplicate of it; Alertmanager's DBE is one more duplicate: count the
        # records once the planner has said so (or has written a second record)
        dbe = "GPUDoubleBitECCError"
        expected = 1 + (first["alert"] != dbe)
        wait_for("the operator's decision on Alertmanager's DBE", lambda: len(decisions(cluster, ns, dbe, OPERATOR))
                 >= expected or len(records(cluster, ns)) > 1, timeout=60)  # fmt: skip
        (record,) = records(cluster, ns)
        assert [s["kind"] for s in record["steps"]] == ["ConfirmFault", "Cordon", "Taint"], record
        # the sidecar's events came in as its pod (its bound ServiceAccount token), none was refused
        fast = scrape(cluster.metrics_url(OPERATOR))
        assert (value(fast, "trainguard_operator_signals_received_total", source="fastpath", result="accepted")
                or 0) >= 1, fast.get("trainguard_operator_signals_received_total")  # fmt: skip
        assert not value(
            fast, "trainguard_operator_signals_received_total", source="fastpath", result="unauthorized"
        )
        # the operator's receiver sits first in that route: Alertmanager delivered to it as well
        failed = [ln for ln in (mon.dir / "alertmanager.log").read_text().splitlines()
                  if "Notify attempt failed" in ln and "trainguard-operator" in ln]  # fmt: skip
        assert not failed, failed


def test_at_the_cordon_cap_a_second_node_fault_notifies_instead_of_cordoning(
    stack: tuple[Cluster, Monitoring, Sink], ns: str, clean_nodes: None, tmp_path: Path
) -> None:
    cluster, _mon, sink = stack
    cap = {"actions": {"nodeFault": "Cordon"}, "maxCordonedNodes": 1, "cordonWindow": "10m"}
    with start(stack, ns, tmp_path, cap) as pods:
        a, b = sorted(pods.running(), key=lambda r: r.rank)
        inject(a, "xid-79")
        finished(cluster, ns, 1, timeout=60)
        inject(b, "xid-79")
        second = finished(cluster, ns, 2, timeout=60)[1]
        assert [s["kind"] for s in second["steps"]] == ["Notify"], second
        assert "cap" in (second.get("skipped") or second.get("message") or ""), second
        assert not cluster.core.read_node(b.node).spec.unschedulable
        wait_for("the withheld remediation paged", lambda: sink.received(
            "phone", "TrainguardRemediationWithheld", namespace=ns), timeout=60)  # fmt: skip


def test_an_operator_killed_during_a_remediation_completes_it_exactly_once(
    stack: tuple[Cluster, Monitoring, Sink], ns: str, clean_nodes: None, tmp_path: Path
) -> None:
    cluster, mon, _sink = stack
    with start(stack, ns, tmp_path) as pods:
        a, b = sorted(pods.running(), key=lambda r: r.rank)
        for r in (a, b):  # the checkpoint request will wait: the trainers cannot answer
            assert r.trainer is not None
            r.trainer.send_signal(signal.SIGSTOP)
        inject(a, "xid-79")
        wait_for("the checkpoint request under way", lambda: (r := records(cluster, ns)) and any(
            s["kind"] == "RequestCheckpoint" and s["phase"] == "InProgress" for s in r[0]["steps"]), timeout=60)  # fmt: skip
        proc = next(p for p in cluster.operators)
        proc.kill()
        proc.wait()
        cluster.operators.remove(proc)
        for r in (a, b):
            assert r.trainer is not None
            r.trainer.send_signal(signal.SIGCONT)
        cluster.start_operator(priority=200, name=OPERATOR, keep_ports=True,
                               extra=("--alertmanager-url", mon.alertmanager))  # fmt: skip
        (record,) = finished(cluster, ns)
        assert record["phase"] == "Succeeded", record
        kinds = [s["kind"] for s in record["steps"]]
        assert kinds == GPU_FAULT_STEPS, record
        wait_for("the new gang running", lambda: len(pods.running()) == 2 and not ({r.name for r in pods.running()}
                 & {a.name, b.name}), timeout=60)  # fmt: skip
        time.sleep(4)
        created = {r.uid for r in [*pods.finished, *pods.runs.values()]}
        assert len(created) == 4, f"the gang was restarted once: {sorted(r.name for r in pods.finished)}"
        assert len(records(cluster, ns)) == 1


def test_dry_run_records_the_whole_plan_and_changes_nothing(
    stack: tuple[Cluster, Monitoring, Sink], ns: str, clean_nodes: None, tmp_path: Path
) -> None:
    cluster, _mon, _sink = stack
    with start(stack, ns, tmp_path, {"dryRun": True}) as pods:
        a = pods.running()[0]
        names = {r.name for r in pods.running()}
        inject(a, "xid-79")
        (record,) = finished(cluster, ns, timeout=60)
        assert record["dryRun"] is True
        assert [s["kind"] for s in record["steps"]] == GPU_FAULT_STEPS
        assert {s["phase"] for s in record["steps"]} == {"DryRun"}
        time.sleep(3)
        assert not cluster.core.read_node(a.node).spec.unschedulable
        assert {r.name for r in pods.running()} == names
        assert len(records(cluster, ns)) == 1
