"""A planned maintenance record carried out by the executor on tests/remediation/fakes.py's FakeCluster:
every rank saves, the node's included, so the gang resumes from the checkpoint taken after the drain
began (no work done before it is lost), and the eviction gate lets the drain through only from then."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from tests.clock import T0
from tests.remediation.fakes import CKPT_STEP, Rig, job_monitor, kinds_and_phases
from trainguard.catalog.kubernetes import RESUME_FROM
from trainguard.remediation import maintenance
from trainguard.remediation.model import ClusterState, Phase, Step, StepKind
from trainguard.remediation.plan import plan
from trainguard.remediation.records import mark, new_record

CORDONED = {"metadata": {"name": "gpu-a"}, "spec": {"unschedulable": True}}
PODS = [
    {"metadata": {"name": f"job-{i}", "namespace": "ml", "labels": {"app": "llama-pretrain"}},
     "spec": {"nodeName": node}, "status": {"phase": "Running"}}
    for i, node in enumerate(("gpu-a", "gpu-b"))
]  # fmt: skip


def maintenance_record(timeout_s: int = 30) -> dict[str, Any]:
    m = job_monitor()
    (signal,) = maintenance.signals([CORDONED], PODS, m, T0, {"gpu-a": T0})
    p = plan(signal, m, ClusterState(now=T0, gpu_nodes=3, job_nodes=frozenset({"gpu-a", "gpu-b"})))
    steps = tuple(
        Step(s.kind, {**s.params, "timeout_s": str(timeout_s)})
        if s.kind == StepKind.REQUEST_CHECKPOINT
        else s
        for s in p.steps
    )
    return new_record(replace(p, steps=steps), T0)


def test_every_rank_saves_and_the_gang_resumes_from_that_checkpoint() -> None:
    rig = Rig()
    rig.cluster.nodes["gpu-a"]["unschedulable"] = True  # the person's cordon (kubectl drain)
    done = rig.run(maintenance_record(), job_monitor())
    assert done["phase"] == Phase.SUCCEEDED, done
    assert [k for k, _ in kinds_and_phases(done)] == ["RequestCheckpoint", "RestartGang", "ConfirmPlacement"]
    effects = [e for e in rig.cluster.effects if e[0] != "checkpoint-saved"]
    # both ranks are asked, the node's included; no cordon, no taint: the person's cordon stands
    assert sorted(e[1] for e in effects if e[0] == "checkpoint-request") == ["job-0", "job-1"]
    assert not [e for e in effects if e[0] in ("cordon", "taint")]
    detail = {s["kind"]: s["detail"] for s in done["steps"]}
    assert detail["RequestCheckpoint"] == f"checkpoint step {CKPT_STEP + 100} saved on job-0, job-1"
    # the pointer is the checkpoint taken after the drain began, which every rank has: nothing before it
    # is lost (a node fault resumes from the older one, which the dead node's rank has)
    pointer = json.loads(str(rig.cluster.annotations_written[0][RESUME_FROM]))
    assert pointer["step"] == CKPT_STEP + 100, pointer
    assert "gpu-a" not in detail["ConfirmPlacement"].split("placed ", 1)[1].split(";")[0]


def test_the_gate_holds_the_drain_until_the_checkpoint_step_is_done() -> None:
    record = maintenance_record()
    m = job_monitor()
    during = mark(record, 0, Phase.IN_PROGRESS, "asking", T0 + 1)
    after = mark(during, 0, Phase.SUCCEEDED, "saved", T0 + 20)
    assert not maintenance.eviction_verdict(CORDONED, m, [during], T0 + 10, held_since=T0 + 2).allowed
    assert maintenance.eviction_verdict(CORDONED, m, [after], T0 + 21, held_since=T0 + 2).allowed
