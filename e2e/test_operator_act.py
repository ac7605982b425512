"""The demo's operator act (e2e/operator_act.py, act 2 of scripts/demo.py) on the suite's control plane: it
tells the page, the checkpoint, the cordon and the gang resumed as they happen, shows `trainguard status`
before and after, and stops every process it started."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from e2e.cluster import Cluster
from e2e.operator_act import node_fault
from e2e.podprocesses import descendants

pytestmark = pytest.mark.e2e


def test_the_operator_act_tells_the_page_the_cordon_and_the_resumed_gang_and_leaves_nothing_running(
    cluster: Cluster, ns: str, clean_nodes: None, tmp_path: Path
) -> None:
    before = descendants([os.getpid()])
    lines: list[str] = []
    outcome = node_fault(cluster, ns, tmp_path, lines.append)
    told = "\n".join(lines)
    assert not outcome.missing, told

    assert re.search(r"receiver 'phone' got firing GPULost \[P0\] on gpu-node-\d gpu 1", told), told
    steps = [s["kind"] for s in outcome.record["steps"]]
    assert steps == [
        "ConfirmFault",
        "Cordon",
        "Taint",
        "RequestCheckpoint",
        "RestartGang",
        "ConfirmPlacement",
    ]
    for kind in steps:
        assert re.search(rf"^  step {kind}: Succeeded, ", told, re.M), (kind, told)
    assert re.search(r"step RequestCheckpoint: Succeeded, checkpoint step \d+ saved on ", told), told
    node = outcome.record["node"]
    assert re.search(rf"^  {node} read back: cordoned and tainted trainguard\.io/faulty=", told, re.M), told
    resumed = re.findall(r"rank (\d)'s new pod \S+ on (\S+): resuming after the checkpoint of step", told)
    assert sorted(rank for rank, _ in resumed) == ["0", "1"], told
    assert node not in {where for _, where in resumed}, told

    # the status a user would run, before (healthy, nothing done) and after (the page, the remediation)
    assert told.count("$ trainguard status -n ") == 2, told
    assert re.search(rf"{ns}/llama-pretrain +Healthy +none", outcome.before), outcome.before
    assert "last remediation: none" in outcome.before, outcome.before
    assert re.search(rf"{ns}/llama-pretrain +Critical +P0:", outcome.after), outcome.after
    assert f"last remediation: GPULost on {node}: Succeeded" in outcome.after, outcome.after

    # what stays is the session's: its control plane, and the operator replica it put back, if any
    session = {p.pid for p in cluster.operators}
    if cluster.monitoring_operator is not None:
        session.add(cluster.monitoring_operator[0].pid)
    assert not descendants([os.getpid()]) - before - session
