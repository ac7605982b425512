"""A node fault of a gang whose pods run `trainguard launch`, end to end on the local control plane with the
real controllers: a 2-rank torch.distributed gang (DDP over gloo on CPU, examples/train_ddp.py,
e2e/launched.py), its exporters run from the pods' specs, as a JobSet (JobSet v0.11.1) and as a
PyTorchJob (training-operator v1.9.3). A fatal XID on rank 0's node (the rank that hosts the rendezvous
store) reaches the operator by the sidecar's fast path (for the JobSet also by Prometheus: the
exporter scraped, the rule firing, Alertmanager posting to the operator); the record confirms it, cordons and taints the
node, takes the healthy rank's emergency checkpoint, replaces only rank 0's pod through the owner (the
JobSet's child Job recreated, nothing counted against maxRestarts; the PyTorchJob's pod evicted and
recreated under its name by the training-operator, nothing counted against backoffLimit) onto the warm
spare, restarts the healthy rank's trainer in place as a new generation, and the replacement's first
trainer joins that generation (its sidecar holds it from the resume-from pointer). Both ranks' first
step after it is the checkpoint's step + 1; the healthy rank's pod is never replaced."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster import Cluster
from e2e.controlplane.controllers import Controller
from e2e.launched import (
    JOB,
    JOBSET_OWNER,
    PYTORCH_API,
    PYTORCHJOB_OWNER,
    TRAINJOB_OWNER,
    WORLD,
    logs,
    new_ranks_resumed,
    resumed,
    start_gang,
)
from e2e.pipeline import Monitoring, Sink, exporter_step, finished, inject
from e2e.podprocesses import PodProcesses, PodRun
from e2e.receiver import records, step
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


def scraped(mon: Monitoring, ns: str) -> None:
    """Prometheus scraping both exporters and settled after its last reload (as e2e/pipeline.start)."""
    wait_for("Prometheus scraping every exporter", lambda: len(mon.query(
        f'up{{namespace="{ns}", container="trainguard-exporter"}} == 1')) == WORLD, timeout=30)  # fmt: skip
    wait_for("Prometheus settled after its last reload", mon.settled, timeout=30)


def rejoined_after_a_fault_on_rank_0(
    cluster: Cluster,
    ns: str,
    pods: PodProcesses,
    spare: str,
    *,
    path: str,
    counted_nothing: Callable[[], None],
) -> tuple[dict[str, Any], PodRun, PodRun]:
    """A fatal XID on rank 0's node, and the record checked: only rank 0's pod replaced (onto `spare`, at
    the same rank), the healthy rank restarted in place, both ranks' first step the checkpoint's step + 1
    from their own shards, the node cordoned and tainted, and `counted_nothing()` (it asserts the owner
    counted no failure or restart). The record, the faulty rank's pod and its replacement."""
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
    counted_nothing()
    node = cluster.core.read_node(faulty.node)
    assert node.spec.unschedulable and any(t.key == "trainguard.io/faulty" for t in node.spec.taints or [])
    wait_for("training going on past the restart", lambda: min(exporter_step(r) for r in pods.running())
             > ckpt + 5, timeout=60)  # fmt: skip
    counted_nothing()
    print(f"\n{path}: node fault on {faulty.node} -> record done in {done_s:.1f}s, both ranks resumed in "
          f"{resumed_s:.1f}s (generation {generation} from step {ckpt}); steps: "
          + "; ".join(f"{s['kind']}: {s['detail'][:120]}" for s in record["steps"]))  # fmt: skip
    return record, faulty, new


def jobset_counted_nothing(cluster: Cluster, ns: str) -> Callable[[], None]:
    def check() -> None:
        status = cluster.get("jobset.x-k8s.io/v1alpha2", "JobSet", ns, JOB) or {}
        assert (status.get("status") or {}).get("restarts", 0) == 0, "nothing counted against maxRestarts"

    return check


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
            rejoined_after_a_fault_on_rank_0(
                cluster,
                jobsets,
                pods,
                spare,
                path="JobSet, fast path",
                counted_nothing=jobset_counted_nothing(cluster, jobsets),
            )

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
            record, _, _ = rejoined_after_a_fault_on_rank_0(
                cluster,
                jobsets,
                pods,
                spare,
                path="JobSet, Prometheus",
                counted_nothing=jobset_counted_nothing(cluster, jobsets),
            )
            # the sidecars have no fast path here: the record is the rules' (XID 79 fires both), by Alertmanager
            assert record["alert"] in ("GPUCriticalXid", "GPULost"), record


@pytest.fixture
def pytorchjobs(cluster: Cluster, training_operator_controller: Controller, ns: str) -> Iterator[str]:
    """The namespace, whose PyTorchJobs are deleted after the test and their pods waited out (the ns
    fixture deletes pods, which a running PyTorchJob would only recreate, holding the fake GPUs)."""
    yield ns
    cluster.delete_owners(ns, "kubeflow.org", "v1", "pytorchjobs", "training.kubeflow.org/job-name")


class TestPyTorchJobRejoin:
    def test_a_node_fault_replaces_one_pod_and_the_healthy_rank_restarts_in_place(
        self,
        stack: tuple[Cluster, Monitoring, Sink],
        pytorchjobs: str,
        clean_nodes: None,
        spare: str,
        tmp_path: Path,
    ) -> None:
        operator = stack[0]

        def counted_nothing() -> None:
            """What the training-operator counts against runPolicy.backoffLimit: its Running pods' container
            restarts (none), and a failed pod while the job runs (it would fail it past the limit: never
            Failed). It may say Restarting while the evicted pod terminates; that counts nothing."""
            job = operator.get(PYTORCH_API, "PyTorchJob", pytorchjobs, JOB) or {}
            conditions = {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions") or []}
            assert conditions.get("Failed") != "True" and conditions.get("Succeeded") != "True", conditions
            pods = operator.core.list_namespaced_pod(
                pytorchjobs, label_selector=PYTORCHJOB_OWNER.label_selector
            )
            restarts = [c.restart_count for p in pods.items for c in p.status.container_statuses or []]
            assert not any(restarts), restarts

        with start_gang(operator, pytorchjobs, tmp_path, owner=PYTORCHJOB_OWNER) as pods:
            _, faulty, new = rejoined_after_a_fault_on_rank_0(
                operator,
                pytorchjobs,
                pods,
                spare,
                path="PyTorchJob, fast path",
                counted_nothing=counted_nothing,
            )
        assert new.name == faulty.name == f"{JOB}-master-0", (
            "recreated under its name by the training-operator"
        )


@pytest.fixture
def trainjobs(cluster: Cluster, trainer_controller: Controller, ns: str) -> Iterator[str]:
    """The namespace, whose TrainJobs are deleted after the test and their pods waited out."""
    yield ns
    cluster.delete_owners(
        ns, "trainer.kubeflow.org", "v1alpha1", "trainjobs", "jobset.sigs.k8s.io/jobset-name"
    )


class TestTrainJobGangRestart:
    def test_a_node_fault_restarts_the_gang_through_its_jobset_counting_nothing(
        self,
        stack: tuple[Cluster, Monitoring, Sink],
        trainjobs: str,
        clean_nodes: None,
        spare: str,
        tmp_path: Path,
    ) -> None:
        """A TrainJob's ranks are the pods of one child Job of its JobSet (numNodes 2): its faulty pod is
        not replaced alone (only that Job could recreate it, after its back-off and once the old pod is
        terminal: it never came within two minutes here). The gang is restarted through the JobSet
        instead: its child Job deleted and recreated at once, nothing counted against maxRestarts, both
        ranks resuming from the pointer, each from its own shard, away from the faulty node."""
        cluster = stack[0]
        counted_nothing = jobset_counted_nothing(cluster, trainjobs)
        with start_gang(cluster, trainjobs, tmp_path, owner=TRAINJOB_OWNER) as pods:
            faulty, healthy = sorted(pods.running(), key=lambda r: r.rank)
            t0 = time.monotonic()
            inject(faulty, "xid-79")
            try:
                (record,) = finished(cluster, trainjobs, timeout=120)
            except (AssertionError, ValueError) as exc:
                raise AssertionError(f"{exc}\nrecords: {records(cluster, trainjobs)}\n{logs(pods)}") from None
            assert record["phase"] == "Succeeded", f"{record}\n{logs(pods)}"
            assert [s["kind"] for s in record["steps"]] == [
                "ConfirmFault", "Cordon", "Taint", "RequestCheckpoint", "RestartGang", "ConfirmPlacement"
            ], record  # fmt: skip
            found = re.search(r"resume-from step (\d+)", step(record, "RestartGang")["detail"])
            assert found, record
            ckpt = int(found.group(1))
            old = {faulty.uid, healthy.uid}

            gen = new_ranks_resumed(pods, old, WORLD, 90, lambda: f"{record}\n{logs(pods)}")
            resumed_s = time.monotonic() - t0
            for name, g in gen.items():
                assert g["resumed"] == ckpt and g["first"] == ckpt + 1, (name, g, ckpt)
            placed = {r.node for r in pods.running() if r.uid not in old}
            assert faulty.node not in placed and spare in placed, (placed, faulty.node)
            counted_nothing()
            print(f"\nTrainJob: node fault on {faulty.node} -> both new ranks resumed in {resumed_s:.1f}s from step "
                  f"{ckpt}; steps: " + "; ".join(f"{s['kind']}: {s['detail'][:120]}" for s in record["steps"]))  # fmt: skip
