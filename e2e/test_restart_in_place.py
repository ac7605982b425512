"""Restart in place, end to end on the local control plane: a 2-rank torch.distributed gang (DDP over gloo
on CPU, examples/train_ddp.py), every pod's trainer run by `trainguard launch` (e2e/launched.py), its
exporter injected and run from the pod's spec (e2e/podprocesses.py). A NaN loss (the exporter's fault
injection, as e2e/test_pipeline.py does it) and an OOM kill of one trainer (SIGKILL, as the kernel's OOM
killer ends a process) each reach the operator by the sidecar's fast path; the record's RestartInPlace
restarts both trainers as generation 1 from the checkpoint every rank has, no pod is deleted (the same
pod UIDs run on), and each rank's first step after it is the checkpoint's step + 1. The gang runs as a
batch Job, and as a Kubeflow TrainJob on the real Trainer v2.2.0 and JobSet v0.11.1 controllers (a
TrainingRuntime that allows restarts, the monitor's workloadRef the TrainJob), whose JobSet and child Job
see nothing: the same objects, no restart counted."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from e2e.cluster import Cluster
from e2e.controlplane.controllers import Controller
from e2e.launched import (
    JOB,
    JOB_OWNER,
    TRAINJOB_OWNER,
    Owner,
    first_step_at,
    generations,
    logs,
    resumed,
    start_gang,
)
from e2e.pipeline import exporter_step, finished, inject
from e2e.podprocesses import PodProcesses
from e2e.receiver import records
from tests.processes import http_json, wait_for

pytestmark = pytest.mark.e2e

TRAINJOB_API = ("trainer.kubeflow.org", "v1alpha1", "trainjobs")


def pod_uids(cluster: Cluster, ns: str) -> set[str]:
    return {p.metadata.uid for p in cluster.core.list_namespaced_pod(ns).items}


def owner_state(cluster: Cluster, ns: str, owner: Owner) -> dict[str, Any]:
    """What a restart by the owner would change: the Job (its uid, failed pods), or the TrainJob's JobSet
    (its uid, restarts, restarts counted towards maxRestarts) and its child Jobs (name -> uid)."""
    batch = client.BatchV1Api(cluster.api)
    if owner.kind == "Job":
        j = batch.read_namespaced_job(JOB, ns)
        return {"job": j.metadata.uid, "failed": j.status.failed or 0}
    js = cluster.get("jobset.x-k8s.io/v1alpha2", "JobSet", ns, JOB) or {}
    status = js.get("status") or {}
    children = batch.list_namespaced_job(ns, label_selector=f"jobset.sigs.k8s.io/jobset-name={JOB}").items
    return {
        "jobset": js.get("metadata", {}).get("uid"),
        "restarts": (status.get("restarts", 0), status.get("restartsCountTowardsMax", 0)),
        "children": {j.metadata.name: (j.metadata.uid, j.status.failed or 0) for j in children},
    }


def assert_ranks_from(owner: Owner, pods: PodProcesses) -> None:
    """Each trainer's rank and world as its owner gives them: a Job's RANK and WORLD_SIZE, or a TrainJob's
    PET_NODE_RANK and PET_NNODES set by Trainer (its PET_MASTER_ADDR rank 0's headless-service hostname,
    which the runtime's MASTER_ADDR overrides here); generation 0 of each rank rendezvoused as that rank."""
    for run in pods.running():
        env = run.trainer_env
        if owner.kind == "TrainJob":
            assert "RANK" not in env and "WORLD_SIZE" not in env, env
            assert (env["PET_NODE_RANK"], env["PET_NNODES"], env["PET_NPROC_PER_NODE"]) == (
                run.rank,
                "2",
                "1",
            ), env
            assert env["PET_MASTER_ADDR"] == f"{JOB}-node-0-0.{JOB}", env
        else:
            assert (env["RANK"], env["WORLD_SIZE"]) == (run.rank, "2"), env
        assert f"rank {run.rank}/2 generation 0 pid " in run.trainer_log(), run.trainer_log()[-2000:]


def diagnostics(cluster: Cluster, ns: str, pods: PodProcesses) -> str:
    return f"records: {records(cluster, ns)}\n{logs(pods)}"


def done(cluster: Cluster, ns: str, pods: PodProcesses) -> list[dict[str, Any]]:
    try:
        return finished(cluster, ns, timeout=90)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnostics(cluster, ns, pods)}") from None


def restarted_from(record: dict[str, Any]) -> int:
    detail = record["steps"][[s["kind"] for s in record["steps"]].index("RestartInPlace")]["detail"]
    found = re.search(r"generation 1 runs on .*, restarted in place from step (\d+)", detail)
    assert found, detail
    return int(found.group(1))


def assert_resumed_in_place(cluster: Cluster, ns: str, pods: PodProcesses, uids: set[str], step: int) -> None:
    """Both ranks' generation 1 resumed after `step` and took step + 1 first; no pod was replaced."""
    runs = sorted(pods.running(), key=lambda r: r.rank)
    try:
        gen1 = wait_for("both ranks' generation 1 at its first step", lambda: resumed(runs, 1), timeout=60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnostics(cluster, ns, pods)}") from None
    for name, g in gen1.items():
        assert g["resumed"] == step and g["first"] == step + 1, (name, g, step)
    assert pod_uids(cluster, ns) == uids, "no pod was deleted or replaced"
    assert not pods.finished and {r.uid for r in pods.running()} == uids
    wait_for(
        "training going on past the restart",
        lambda: min(exporter_step(r) for r in runs) > step + 5,
        timeout=60,
    )


def nan_restarts_in_place(cluster: Cluster, ns: str, workdir: Path, owner: Owner) -> None:
    """A NaN on rank 0: paused, pinned, both trainers restarted in place from the pin, the owner untouched.
    Prints the time from the NaN to both ranks' first step."""
    pods = start_gang(cluster, ns, workdir, owner=owner)
    with pods:
        assert_ranks_from(owner, pods)
        uids, before = pod_uids(cluster, ns), owner_state(cluster, ns, owner)
        a = min(pods.running(), key=lambda r: r.rank)
        fault = time.time()
        inject(a, "nan-loss", gpu=None)
        try:
            wait_for("the record", lambda: records(cluster, ns), timeout=30, interval=0.05)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{diagnostics(cluster, ns, pods)}") from None
        http_json(f"{a.url}/v1/faults", method="DELETE")  # one NaN; the steps after it are fine
        (record,) = done(cluster, ns, pods)
        assert record["alert"] == "TrainingLossNonFinite", record
        assert [(s["kind"], s["phase"]) for s in record["steps"]] == [
            ("Pause", "Succeeded"), ("PinCheckpoint", "Succeeded"), ("RestartInPlace", "Succeeded")
        ], record  # fmt: skip
        assert record["phase"] == "Succeeded", record
        pinned = int(re.search(r"pinned step (\d+)", record["steps"][1]["detail"]).group(1))  # type: ignore[union-attr]
        step = restarted_from(record)
        assert step == pinned, "the gang resumes from the pin: the newest checkpoint saved before the NaN"
        assert_resumed_in_place(cluster, ns, pods, uids, step)
        elapsed = resumed_after(pods, fault)
        assert owner_state(cluster, ns, owner) == before, f"the {owner.kind} restarted nothing"
        print(f"\n{owner.kind}: NaN to both ranks at step {step + 1}: {elapsed}")


def oom_restarts_in_place(cluster: Cluster, ns: str, workdir: Path, owner: Owner) -> None:
    """Rank 0's trainer SIGKILLed: both trainers restarted in place from the gang's checkpoint, the owner
    untouched, one record. Prints the time from the kill to both ranks' first step."""
    pods = start_gang(cluster, ns, workdir, owner=owner)
    with pods:
        assert_ranks_from(owner, pods)
        uids, before = pod_uids(cluster, ns), owner_state(cluster, ns, owner)
        victim = min(pods.running(), key=lambda r: r.rank)
        fault = time.time()
        os.kill(generations(victim)[0]["pid"], signal.SIGKILL)  # what the kernel's OOM killer does
        (record,) = done(cluster, ns, pods)
        assert record["alert"] == "TrainingInterrupted", record
        assert record["node"] == victim.node, record
        assert [(s["kind"], s["phase"]) for s in record["steps"]] == [
            ("RestartInPlace", "Succeeded"), ("RestartGang", "Skipped"), ("ConfirmPlacement", "Skipped")
        ], record  # fmt: skip
        step = restarted_from(record)
        assert_resumed_in_place(cluster, ns, pods, uids, step)
        elapsed = resumed_after(pods, fault)
        assert owner_state(cluster, ns, owner) == before, f"the {owner.kind} restarted nothing"
        print(f"\n{owner.kind}: OOM kill to both ranks at step {step + 1}: {elapsed}")
        assert len(records(cluster, ns)) == 1, "the other rank's failure was the same interruption"


def resumed_after(pods: PodProcesses, fault: float) -> str:
    """Seconds from `fault` (Unix time) to the later of both ranks' first step of generation 1, by the
    timestamps of their log lines (where the nodes keep CRI logs: not asserted, only shown)."""
    runs = pods.running()
    if any(r.cri_dir is None for r in runs):
        return "n/a (no CRI logs)"
    stamps = wait_for("both ranks' first step in their CRI logs",
                      lambda: (t := [first_step_at(r, 1) for r in runs]) and None not in t and t)  # fmt: skip
    return f"{max(stamps) - fault:.2f}s"


# ---- a batch Job ----------------------------------------------------------------------------------------


def test_a_nan_pauses_pins_and_restarts_both_trainers_in_place_from_the_pin(
    operator: Cluster, ns: str, clean_nodes: None, tmp_path: Path
) -> None:
    nan_restarts_in_place(operator, ns, tmp_path, JOB_OWNER)


def test_an_oom_killed_trainer_restarts_both_trainers_in_place_from_the_checkpoint(
    operator: Cluster, ns: str, clean_nodes: None, tmp_path: Path
) -> None:
    oom_restarts_in_place(operator, ns, tmp_path, JOB_OWNER)


# ---- a Kubeflow TrainJob, on the real Trainer v2.2.0 and its JobSet ---------------------------------------


@pytest.fixture
def trainjobs(cluster: Cluster, trainer_controller: Controller, ns: str) -> Iterator[str]:
    """The namespace, whose TrainJobs are deleted after the test and their pods waited out: the ns fixture
    deletes Jobs and pods, which a running JobSet would only recreate, holding the fake GPUs the next
    test's gang needs."""
    yield ns
    cluster.delete_owners(ns, *TRAINJOB_API, "jobset.sigs.k8s.io/jobset-name")


class TestTrainJob:
    """The gang as a TrainJob (e2e/launched.py: ddp_runtime, ddp_trainjob); one Trainer and JobSet
    controller for the class."""

    def test_a_nan_restarts_both_trainers_in_place_and_the_jobset_sees_nothing(
        self, operator: Cluster, trainjobs: str, clean_nodes: None, tmp_path: Path
    ) -> None:
        nan_restarts_in_place(operator, trainjobs, tmp_path, TRAINJOB_OWNER)

    def test_an_oom_killed_trainer_restarts_both_in_place_and_the_jobset_sees_nothing(
        self, operator: Cluster, trainjobs: str, clean_nodes: None, tmp_path: Path
    ) -> None:
        oom_restarts_in_place(operator, trainjobs, tmp_path, TRAINJOB_OWNER)
