"""Restart in place, end to end on the local control plane: a 2-rank torch.distributed gang (DDP over gloo
on CPU, examples/train_ddp.py), every pod's trainer run by `trainguard launch` (e2e/launched.py), its
exporter injected and run from the pod's spec (e2e/podprocesses.py). A NaN loss (the exporter's fault
injection, as e2e/test_pipeline.py does it) and an OOM kill of one trainer (SIGKILL, as the kernel's OOM
killer ends a process) each reach the operator by the sidecar's fast path; the record's RestartInPlace
restarts both trainers as generation 1 from the checkpoint every rank has, no pod is deleted (the same
pod UIDs run on), and each rank's first step after it is the checkpoint's step + 1."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster import Cluster
from e2e.launched import generations, logs, resumed, start_gang
from e2e.pipeline import exporter_step, finished, inject
from e2e.podprocesses import PodProcesses
from e2e.receiver import records
from tests.processes import http_json, wait_for

pytestmark = pytest.mark.e2e


def pod_uids(cluster: Cluster, ns: str) -> set[str]:
    return {p.metadata.uid for p in cluster.core.list_namespaced_pod(ns).items}


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


def test_a_nan_pauses_pins_and_restarts_both_trainers_in_place_from_the_pin(
    operator: Cluster, ns: str, clean_nodes: None, tmp_path: Path
) -> None:
    pods = start_gang(operator, ns, tmp_path)
    with pods:
        uids = pod_uids(operator, ns)
        a = min(pods.running(), key=lambda r: r.rank)
        inject(a, "nan-loss", gpu=None)
        try:
            wait_for("the record", lambda: records(operator, ns), timeout=30, interval=0.05)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{diagnostics(operator, ns, pods)}") from None
        http_json(f"{a.url}/v1/faults", method="DELETE")  # one NaN; the steps after it are fine
        (record,) = done(operator, ns, pods)
        assert record["alert"] == "TrainingLossNonFinite", record
        assert [(s["kind"], s["phase"]) for s in record["steps"]] == [
            ("Pause", "Succeeded"), ("PinCheckpoint", "Succeeded"), ("RestartInPlace", "Succeeded")
        ], record  # fmt: skip
        assert record["phase"] == "Succeeded", record
        pinned = int(re.search(r"pinned step (\d+)", record["steps"][1]["detail"]).group(1))  # type: ignore[union-attr]
        step = restarted_from(record)
        assert step == pinned, "the gang resumes from the pin: the newest checkpoint saved before the NaN"
        assert_resumed_in_place(operator, ns, pods, uids, step)


def test_an_oom_killed_trainer_restarts_both_trainers_in_place_from_the_checkpoint(
    operator: Cluster, ns: str, clean_nodes: None, tmp_path: Path
) -> None:
    pods = start_gang(operator, ns, tmp_path)
    with pods:
        uids = pod_uids(operator, ns)
        victim = min(pods.running(), key=lambda r: r.rank)
        os.kill(generations(victim)[0]["pid"], signal.SIGKILL)  # what the kernel's OOM killer does
        t0 = time.monotonic()
        (record,) = done(operator, ns, pods)
        assert record["alert"] == "TrainingInterrupted", record
        assert record["node"] == victim.node, record
        assert [(s["kind"], s["phase"]) for s in record["steps"]] == [
            ("RestartInPlace", "Succeeded"), ("RestartGang", "Skipped"), ("ConfirmPlacement", "Skipped")
        ], record  # fmt: skip
        step = restarted_from(record)
        assert_resumed_in_place(operator, ns, pods, uids, step)
        print(f"\nOOM kill to both ranks at step {step + 1}: {time.monotonic() - t0:.1f}s")
        assert len(records(operator, ns)) == 1, "the other rank's failure was the same interruption"
