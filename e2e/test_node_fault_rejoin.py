"""A node fault of a JobSet gang whose pods run `trainguard launch`, end to end on the local control plane
with the real JobSet controller v0.11.1: a 2-rank torch.distributed gang (DDP over gloo on CPU,
examples/train_ddp.py, e2e/launched.py), its exporters run from the pods' specs. A fatal XID on rank 0's
node (the rank that hosts the rendezvous store) reaches the operator by the sidecar's fast path, or by
Prometheus (the exporter scraped, the rule firing, Alertmanager posting to the operator); the record
confirms it with the node's sidecar, cordons and taints the node, takes the healthy rank's emergency
checkpoint, replaces only rank 0's pod through the JobSet (its child Job recreated, nothing counted
against maxRestarts) onto the warm spare, restarts the healthy rank's trainer in place as a new
generation, and the replacement's first trainer joins that generation (its sidecar holds it from the
resume-from pointer). Both ranks' first step after it is the checkpoint's step + 1; the healthy rank's
pod is never replaced."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster import Cluster
from e2e.launched import JOB, JOBSET_OWNER, WORLD, logs, resumed, start_gang
from e2e.pipeline import Monitoring, Sink, exporter_step, finished, inject
from e2e.podprocesses import PodProcesses
from e2e.receiver import records
from e2e.test_workload_owners import jobsets  # noqa: F401 - the fixture: the JobSets' teardown
from tests.processes import wait_for

pytestmark = pytest.mark.e2e

STEPS = [
    "ConfirmFault",
    "Cordon",
    "Taint",
    "RequestCheckpoint",
    "ReplacePod",
    "RestartInPlace",
    "ConfirmPlacement",
]


def step(record: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(s for s in record["steps"] if s["kind"] == kind)


def scraped(mon: Monitoring, ns: str) -> None:
    """Prometheus scraping both exporters and settled after its last reload (as e2e/pipeline.start)."""
    wait_for("Prometheus scraping every exporter", lambda: len(mon.query(
        f'up{{namespace="{ns}", container="trainguard-exporter"}} == 1')) == WORLD, timeout=30)  # fmt: skip
    wait_for("Prometheus settled after its last reload", mon.settled, timeout=30)


def rejoined_after_a_fault_on_rank_0(
    cluster: Cluster, ns: str, pods: PodProcesses, spare: str, path: str
) -> None:
    faulty, healthy = sorted(pods.running(), key=lambda r: r.rank)
    t0 = time.monotonic()
    inject(faulty, "xid-79")
    try:
        (record,) = finished(cluster, ns, timeout=120)
    except (AssertionError, ValueError) as exc:
        raise AssertionError(f"{exc}\nrecords: {records(cluster, ns)}\n{logs(pods)}") from None
    done_s = time.monotonic() - t0
    assert record["phase"] == "Succeeded", f"{record}\n{logs(pods)}"
    assert [s["kind"] for s in record["steps"]] == STEPS, record
    generation = step(record, "RestartInPlace")["progress"]["generation"]
    found = re.search(r"restarted in place from step (\d+)", step(record, "RestartInPlace")["detail"])
    assert found, record
    ckpt = int(found.group(1))

    def joined() -> dict[str, dict[str, Any]]:
        runs = pods.running()
        return resumed(runs, generation) if len(runs) == WORLD else {}

    try:
        gen = wait_for(f"both ranks' generation {generation} at its first step", joined, timeout=60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{record}\n{logs(pods)}") from None
    resumed_s = time.monotonic() - t0
    for name, g in gen.items():
        assert g["resumed"] == ckpt and g["first"] == ckpt + 1, (name, g, ckpt)
    now = {r.uid: r for r in pods.running()}
    assert healthy.uid in now, "the healthy rank's pod was not replaced"
    (new,) = [r for r in now.values() if r.uid != healthy.uid]
    assert new.uid != faulty.uid and new.node == spare, (new.node, faulty.node, spare)
    assert new.rank == faulty.rank
    loaded = [ln for r in (new, now[healthy.uid]) for ln in r.trainer_log().splitlines()
              if ln.startswith(f"resuming after the checkpoint of step {ckpt}")]  # fmt: skip
    assert len(loaded) == WORLD and all("weights loaded" in ln for ln in loaded), (
        f"every rank loads its own shard of the checkpoint (never fresh weights): {loaded}"
    )
    status = cluster.get("jobset.x-k8s.io/v1alpha2", "JobSet", ns, JOB) or {}
    assert (status.get("status") or {}).get("restarts", 0) == 0, "nothing counted against maxRestarts"
    node = cluster.core.read_node(faulty.node)
    assert node.spec.unschedulable and any(t.key == "trainguard.io/faulty" for t in node.spec.taints or [])
    wait_for("training going on past the restart", lambda: min(exporter_step(r) for r in pods.running())
             > ckpt + 5, timeout=60)  # fmt: skip
    print(f"\n{path}: node fault on {faulty.node} -> record done in {done_s:.1f}s, both ranks resumed in "
          f"{resumed_s:.1f}s (generation {generation} from step {ckpt}); steps: "
          + "; ".join(f"{s['kind']}: {s['detail'][:120]}" for s in record["steps"]))  # fmt: skip
    return record


@pytest.mark.usefixtures("jobset_controller")
class TestJobSetRejoin:
    def test_a_node_fault_by_the_fast_path_replaces_one_pod_and_the_healthy_rank_restarts_in_place(
        self,
        stack: tuple[Cluster, Monitoring, Sink],
        jobsets: str,  # noqa: F811 - the fixture imported above
        clean_nodes: None,
        spare: str,
        tmp_path: Path,
    ) -> None:
        cluster = stack[0]
        with start_gang(cluster, jobsets, tmp_path, owner=JOBSET_OWNER) as pods:
            rejoined_after_a_fault_on_rank_0(cluster, jobsets, pods, spare, "fast path")

    def test_a_node_fault_by_prometheus_does_the_same(
        self,
        stack: tuple[Cluster, Monitoring, Sink],
        jobsets: str,  # noqa: F811 - the fixture imported above
        clean_nodes: None,
        spare: str,
        tmp_path: Path,
    ) -> None:
        cluster, mon, _ = stack
        with start_gang(cluster, jobsets, tmp_path, owner=JOBSET_OWNER, fastpath=False) as pods:
            scraped(mon, jobsets)
            record = rejoined_after_a_fault_on_rank_0(cluster, jobsets, pods, spare, "Prometheus")
            # the sidecars have no fast path here: the record is the rules' (XID 79 fires both), by Alertmanager
            assert record["alert"] in ("GPUCriticalXid", "GPULost"), record
