"""A node death under a JobSet gang whose pods run `trainguard launch`, end to end on the local control
plane with the real JobSet controller v0.11.1: the 2-rank DDP gang of e2e/test_node_fault_rejoin.py, and
rank 0's node (the rank that hosts the rendezvous store) dies: its kubelet stops (no Lease renewal, no
Ready status, its pods left as they are: e2e/nodes.py's `kubelet_stopped`) and every process of its pod
is frozen (SIGSTOP: the sidecar answers nothing, the trainer neither steps nor exits, and the gloo
connections stay open, so the healthy rank hangs in its all-reduce: e2e/podprocesses.py's `freeze`).

No exporter reports it: the operator judges the node down itself (its Lease unchanged for 18 s) and its
own GPUNodeDown record cordons and taints the node, asks the healthy rank for a checkpoint (which a rank
hung in a collective cannot take: the step waits out emergencyCheckpointTimeout, 20 s here), replaces
only rank 0's pod through the JobSet (the pod marked Failed with DisruptionTarget and force-deleted,
since its kubelet will never confirm) onto the warm spare, restarts the healthy rank's trainer in place
as a new generation, and the replacement's first trainer joins it. Both ranks' first step after it is
the checkpoint's step + 1; the healthy rank's pod is never replaced, the JobSet counts no restart."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import watch

from e2e.cluster import Cluster
from e2e.launched import JOB, JOBSET_OWNER, WORLD, first_step_at, logs, resumed, start_gang
from e2e.nodes import kubelet_stopped
from e2e.pipeline import FINAL, exporter_step
from e2e.receiver import records, step
from e2e.test_workload_owners import jobsets  # noqa: F401 - the fixture: the JobSets' teardown
from tests.processes import wait_for
from trainguard.catalog.kubernetes import FAULTY_TAINT
from trainguard.times import parse_rfc3339

pytestmark = pytest.mark.e2e

STEPS = ["Cordon", "Taint", "RequestCheckpoint", "ReplacePod", "RestartInPlace", "ConfirmPlacement"]
CHECKPOINT_TIMEOUT_S = 20.0
"""start_gang's emergencyCheckpointTimeout: the longest RequestCheckpoint may wait for a hung rank."""


def at(record: dict[str, Any], kind: str) -> float:
    """When (Unix seconds, the operator's clock: this machine's) the step last changed: when it ended."""
    return parse_rfc3339(step(record, kind)["time"])


class PodEnd:
    """Watches the namespace's pods for the deletion of the pod `uid`; keeps the object the DELETED event
    carries (the pod's last state) and when it came."""

    def __init__(self, cluster: Cluster, ns: str, uid: str) -> None:
        self.cluster, self.ns, self.uid = cluster, ns, uid
        self.last: dict[str, Any] | None = None
        self.at: float | None = None
        self.w = watch.Watch()
        self.thread = threading.Thread(target=self._run, name="pod-end", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        rv = self.cluster.core.list_namespaced_pod(self.ns).metadata.resource_version
        for event in self.w.stream(self.cluster.core.list_namespaced_pod, self.ns, resource_version=rv,
                                   timeout_seconds=600):  # fmt: skip
            pod = event["object"]
            if event["type"] == "DELETED" and pod.metadata.uid == self.uid:
                self.last = self.cluster.api.sanitize_for_serialization(pod)
                self.at = time.time()
                self.w.stop()
                return

    def stop(self) -> None:
        self.w.stop()


def node_down(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    return [r for r in records(cluster, ns) if r.get("alert") == "GPUNodeDown"]


@pytest.mark.usefixtures("jobset_controller")
class TestJobSetNodeDeath:
    def test_a_dead_node_is_found_by_the_operator_and_its_pod_replaced_while_the_healthy_rank_restarts_in_place(
        self,
        operator: Cluster,
        jobsets: str,  # noqa: F811 - the fixture imported above
        clean_nodes: None,
        spare: str,
        tmp_path: Path,
    ) -> None:
        ns = jobsets
        pods = start_gang(operator, ns, tmp_path, owner=JOBSET_OWNER)
        with pods:
            dead, healthy = sorted(pods.running(), key=lambda r: r.rank)
            assert dead.rank == "0", dead
            end = PodEnd(operator, ns, dead.uid)
            try:
                with kubelet_stopped(operator.core, dead.node) as renewed:
                    frozen = pods.freeze(dead.node)
                    assert [r.uid for r in frozen] == [dead.uid] and dead.frozen, frozen
                    try:
                        (record,) = wait_for("the GPUNodeDown record done", lambda: (r := node_down(operator, ns))
                                             and all(x["phase"] in FINAL for x in r) and r, timeout=180)  # fmt: skip
                    except (AssertionError, ValueError) as exc:
                        raise AssertionError(
                            f"{exc}\nrecords: {records(operator, ns)}\n{logs(pods)}"
                        ) from None
                    assert record["node"] == dead.node, record
                    assert record["phase"] == "Succeeded", f"{record}\n{logs(pods)}"
                    assert [s["kind"] for s in record["steps"]] == STEPS, record
                    assert step(record, "ReplacePod")["params"].get("nodeDown") == "true", record
                    # the pod went while its kubelet was stopped: only a forced deletion ends it then
                    wait_for("the dead node's pod deleted", lambda: end.last is not None, timeout=30)
                    node = operator.core.read_node(dead.node)
                    assert node.spec.unschedulable and any(
                        t.key == FAULTY_TAINT for t in node.spec.taints or []
                    )
                    generation = step(record, "RestartInPlace")["progress"]["generation"]
                    found = re.search(
                        r"restarted in place from step (\d+)", step(record, "RestartInPlace")["detail"]
                    )
                    assert found, record
                    ckpt = int(found.group(1))

                    def joined() -> dict[str, dict[str, Any]]:
                        runs = pods.running()
                        return resumed(runs, generation) if len(runs) == 2 else {}

                    try:  # the replacement is a new pod: its first trainer imports torch cold (~30 s on 2 busy cores)
                        gen = wait_for(
                            f"both ranks' generation {generation} at its first step", joined, timeout=150
                        )
                    except AssertionError as exc:
                        raise AssertionError(f"{exc}\n{record}\n{logs(pods)}") from None
                    runs = pods.running()
                    firsts = [first_step_at(r, generation) for r in runs]
            finally:
                end.stop()
            assert end.last is not None
            last = end.last
            assert last["status"]["phase"] == "Failed", last["status"]
            target = [c for c in last["status"].get("conditions") or [] if c["type"] == "DisruptionTarget"]
            assert target and target[0]["status"] == "True" and target[0]["reason"] == "TrainguardNodeDown", (
                target
            )
            assert last["metadata"].get("deletionGracePeriodSeconds") == 0, last["metadata"]
            for name, g in gen.items():
                assert g["resumed"] == ckpt and g["first"] == ckpt + 1, (name, g, ckpt)
            now = {r.uid: r for r in runs}
            assert healthy.uid in now, "the healthy rank's pod was not replaced"
            (new,) = [r for r in now.values() if r.uid != healthy.uid]
            assert new.uid != dead.uid and new.node == spare and new.rank == dead.rank, (
                new,
                dead.node,
                spare,
            )
            status = operator.get("jobset.x-k8s.io/v1alpha2", "JobSet", ns, JOB) or {}
            assert (status.get("status") or {}).get("restarts", 0) == 0, "nothing counted against maxRestarts"
            saved = tmp_path / "checkpoints" / f"step-{ckpt:08d}"  # the newest checkpoint every rank has
            assert all((saved / f"rank-{r}.pt").is_file() for r in range(WORLD)), sorted(
                saved.parent.iterdir()
            )
            others = [r for r in records(operator, ns) if r is not record and r.get("alert") != "GPUNodeDown"]
            assert not [s for r in others for s in r["steps"] if s["kind"] in ("RestartGang", "ReplacePod")
                        and s["phase"] == "Succeeded"], others  # fmt: skip
            wait_for("training going on past the restart", lambda: min(exporter_step(r) for r in pods.running())
                     > ckpt + 5, timeout=60)  # fmt: skip
            checkpoint_s = at(record, "RequestCheckpoint") - at(record, "Taint")
            assert checkpoint_s <= CHECKPOINT_TIMEOUT_S + 5, checkpoint_s
            resumed_at = max(f for f in firsts if f is not None) if all(firsts) else float("nan")
            print(f"\nnode death of {dead.node}: last Lease renewal -> cordoned {at(record, 'Cordon') - renewed:.1f}s, "
                  f"-> record done {at(record, 'ConfirmPlacement') - renewed:.1f}s, -> both ranks resumed "
                  f"{resumed_at - renewed:.1f}s (generation {generation} from step {ckpt}); RequestCheckpoint took "
                  f"{checkpoint_s:.1f}s; the dead pod gone {(end.at or 0) - renewed:.1f}s after; other records: "
                  f"{[(r['alert'], r['phase']) for r in others]}; steps: "
                  + "; ".join(f"{s['kind']}: {s['detail'][:160]}" for s in record["steps"]))  # fmt: skip
