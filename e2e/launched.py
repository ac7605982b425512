"""A 2-rank torch.distributed gang whose every pod runs its trainer under `trainguard launch`, on the
local control plane: examples/train_ddp.py (DDP over gloo on CPU) as the trainer, the Job that runs it,
the pod runner's command for it, and what the trainers' logs say about each generation. Shared by
e2e/test_restart_in_place.py and bench/restart_in_place.py.

The Job gives each rank what a real one would: RANK from the completion index (a fieldRef the pod runner
resolves), WORLD_SIZE, and MASTER_ADDR/MASTER_PORT (loopback here: every pod is a process of this
machine; a cluster would name rank 0's headless-service address). The launcher adds the generation, and
the trainer rendezvouses at MASTER_PORT + generation.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from e2e.cluster import Cluster
from e2e.monitors import ready
from e2e.pipeline import JOB, SELECTOR, Sink, exporter_step, job, objects
from e2e.podprocesses import COMPLETION_INDEX, JOBSET_INDEX, PodProcesses, PodRun
from tests.processes import free_port, wait_for

WORLD = 2
JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
STEP_DELAY_S = 0.02
TERM_GRACE = "2s"
WORD_TIMEOUT = "60s"
PRELOAD = "torch,torch.distributed,torch.nn.parallel,torch._dynamo"
"""What the warm trainer imports ahead of a restart: what examples/train_ddp.py spends its start on,
torch._dynamo (and sympy with it: about 900 modules) included, which DDP's constructor imports."""
WARM_STEP = 120
"""Each rank's step before a fault is injected: past the first full checkpoint (fullEverySteps 100)."""


def ddp_job(ns: str, port: int) -> dict[str, Any]:
    """The pipeline's 2-pod Indexed Job, its trainer container wrapped in `trainguard launch`."""
    body = job(ns, WORLD)
    container = body["spec"]["template"]["spec"]["containers"][0]
    container["command"] = [
        "trainguard",
        "launch",
        "--preload",
        PRELOAD,
        "--",
        "python",
        "examples/train_ddp.py",
    ]
    container["env"] = [
        {
            "name": "RANK",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}},
        },
        {"name": "WORLD_SIZE", "value": str(WORLD)},
        {"name": "MASTER_ADDR", "value": "127.0.0.1"},
        {"name": "MASTER_PORT", "value": str(port)},
        {"name": "GLOO_SOCKET_IFNAME", "value": "lo"},
    ]
    return body


def ddp_jobset(ns: str, port: int, max_restarts: int = 2) -> dict[str, Any]:
    """The same gang as a JobSet of two child Jobs of one pod each (README: what the owner must allow:
    restartPolicy Never, a podFailurePolicy that Ignores DisruptionTarget, failurePolicy.maxRestarts),
    RANK from the child Job's index (jobset.sigs.k8s.io/job-index)."""
    body = ddp_job(ns, port)
    template = body["spec"]["template"]
    env = template["spec"]["containers"][0]["env"]
    env[0] = {
        "name": "RANK",
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{JOBSET_INDEX}']"}},
    }
    template["spec"]["terminationGracePeriodSeconds"] = 5
    child = {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": template, "podFailurePolicy": {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}}  # fmt: skip
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": "JobSet",
        "metadata": {"name": JOB, "namespace": ns},
        "spec": {
            "replicatedJobs": [{"name": "node", "replicas": WORLD, "template": {"spec": child}}],
            "failurePolicy": {"maxRestarts": max_restarts},
        },
    }


def trainer_command(checkpoints: Path) -> list[str]:
    """The trainer itself, with this interpreter (`python examples/train_ddp.py` in the pod spec)."""
    return [sys.executable, "examples/train_ddp.py", "--step-delay", str(STEP_DELAY_S), "--checkpoint-dir",
            str(checkpoints)]  # fmt: skip


def launch_command(run: PodRun, checkpoints: Path, *, preload: bool = True) -> list[str]:
    """What the pod runner runs for the trainer container: `trainguard launch --preload torch -- <trainer>`
    (without `preload`, every generation starts cold)."""
    warm = ["--preload", PRELOAD] if preload else []
    return [sys.executable, "-m", "trainguard.cli", "launch", "--term-grace", TERM_GRACE,
            "--word-timeout", WORD_TIMEOUT, *warm, "--", *trainer_command(checkpoints)]  # fmt: skip


def cold_launch_command(run: PodRun, checkpoints: Path) -> list[str]:
    return launch_command(run, checkpoints, preload=False)


def start_gang(
    cluster: Cluster,
    ns: str,
    workdir: Path,
    remediation: dict[str, Any] | None = None,
    *,
    kind: str = "Job",
) -> PodProcesses:
    """The monitor Ready, the Job's (or JobSet's) two pods running exporters and launched trainers, every
    rank past its first full checkpoint: the PodProcesses, entered (the caller exits it)."""
    monitor, policy = objects(ns, Sink(), {"emergencyCheckpointTimeout": "20s", **(remediation or {})})
    monitor["spec"]["workloadRef"] = {"kind": kind, "name": JOB}
    cluster.apply([monitor, policy])  # first: the webhook gives the pods their sidecars at creation
    wait_for("monitor Ready", lambda: ready(cluster, ns), timeout=60)
    port = free_port()
    if kind == "JobSet":
        cluster.custom.create_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", ns, "jobsets", ddp_jobset(ns, port)
        )
    else:
        cluster.apply([ddp_job(ns, port)])
    pods = PodProcesses(cluster.api, ns, SELECTOR, workdir, command=launch_command).__enter__()
    try:
        wait_for(f"{WORLD} ranks past step {WARM_STEP}", lambda: len(r := pods.running()) == WORLD
                 and all(exporter_step(x) >= WARM_STEP for x in r), timeout=180)  # fmt: skip
    except AssertionError as exc:
        pods.__exit__(None, None, None)
        raise AssertionError(f"{exc}\n{logs(pods)}") from None
    return pods


def logs(pods: PodProcesses) -> str:
    """Each pod's exporter and trainer (launcher) log, and the pod runner's errors: what a failure shows."""
    runs = [*pods.finished, *pods.runs.values()]
    parts = [f"pod runner errors: {pods.errors[-3:]}"]
    parts += [f"--- {r.name} on {r.node}\nexporter: {r.exporter_log()[-1500:]}\ntrainer: {r.trainer_log()[-3000:]}"
              for r in runs]  # fmt: skip
    return "\n".join(parts)


def generations(run: PodRun) -> dict[int, dict[str, Any]]:
    """What the trainer log of a pod says of each generation: its pid, the checkpoint step it resumed
    after (None: it started afresh) and its first step."""
    out: dict[int, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in run.trainer_log().splitlines():
        if m := re.match(r"rank \d+/\d+ generation (\d+) pid (\d+):", line):
            current = out.setdefault(
                int(m.group(1)), {"pid": int(m.group(2)), "resumed": None, "first": None}
            )
        elif current is not None and (m := re.match(r"resuming after the checkpoint of step ([\d.]+)", line)):
            current["resumed"] = int(float(m.group(1)))
        elif m := re.match(r"generation (\d+) rank \d+ first step (\d+)", line):
            out.setdefault(int(m.group(1)), {"pid": 0, "resumed": None, "first": None})["first"] = int(
                m.group(2)
            )
    return out


def resumed(runs: list[PodRun], generation: int) -> dict[str, dict[str, Any]]:
    """Pod -> its trainer of `generation`, once every rank's has taken its first step (else empty)."""
    seen = {r.name: generations(r).get(generation) for r in runs}
    if any(g is None or g["first"] is None for g in seen.values()):
        return {}
    return {name: g for name, g in seen.items() if g is not None}


__all__ = [
    "JOB",
    "WORLD",
    "cold_launch_command",
    "ddp_jobset",
    "generations",
    "launch_command",
    "resumed",
    "start_gang",
    "trainer_command",
]
