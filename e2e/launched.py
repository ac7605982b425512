"""A 2-rank torch.distributed gang whose every pod runs its trainer under `trainguard launch`, on the
local control plane: examples/train_ddp.py (DDP over gloo on CPU) as the trainer, what runs it (a batch
Job, a JobSet, a Kubeflow TrainJob on a TrainingRuntime that allows restarts, or a PyTorchJob), the pod
runner's command for it, and what the trainers' logs say about each generation. Shared by
e2e/test_restart_in_place.py, e2e/test_node_fault_rejoin.py and bench/restart_in_place.py.

The Job gives each rank what a real one would: RANK from the completion index (a fieldRef the pod runner
resolves), WORLD_SIZE, and MASTER_ADDR/MASTER_PORT (loopback here: every pod is a process of this
machine; a cluster would name rank 0's headless-service address). A TrainJob's ranks get what Trainer's
torch runtime sets: PET_NODE_RANK (the same fieldRef), PET_NNODES, and PET_MASTER_ADDR/PET_MASTER_PORT,
which name rank 0's pod by its headless-service hostname at port 29500. Neither can serve here: no
cluster DNS resolves the hostname on this machine, and a TCPStore listens on every address, so a fixed
port would collide with the other e2e processes' gangs. Trainer overwrites any PET_* the runtime sets
and refuses them in the TrainJob, so the runtime's template sets MASTER_ADDR (loopback) and MASTER_PORT
(a free port), which the trainer reads before the PET_* ones, as it would torchrun's. A PyTorchJob's
ranks get what the training-operator sets: RANK, WORLD_SIZE, MASTER_PORT (the Master's `pytorchjob-port`,
a free port) and MASTER_ADDR, the Master's service name, appended after the container's env so that it
overrides it: the pod runner gives each trainer MASTER_ADDR=127.0.0.1 instead (PodProcesses' `env`). The
launcher adds the generation, and the trainer rendezvouses at MASTER_PORT + generation.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.cluster import Cluster
from e2e.controlplane.fakekubelet import parse_rfc3339_ns
from e2e.monitors import ready
from e2e.pipeline import JOB, Sink, exporter_step, job, objects
from e2e.podprocesses import COMPLETION_INDEX, JOBSET_INDEX, PodProcesses, PodRun
from tests.processes import lasting_port, wait_for

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


LAUNCHED = ["trainguard", "launch", "--preload", PRELOAD, "--", "python", "examples/train_ddp.py"]
"""The trainer container's command in the pod spec (the pod runner runs `launch_command` for it)."""
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
IGNORE_DISRUPTION = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}


def ddp_job(ns: str, port: int) -> dict[str, Any]:
    """The pipeline's 2-pod Indexed Job, its trainer container wrapped in `trainguard launch`."""
    body = job(ns, WORLD)
    container = body["spec"]["template"]["spec"]["containers"][0]
    container["command"] = list(LAUNCHED)
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


def ddp_runtime(ns: str, port: int) -> dict[str, Any]:
    """A torch TrainingRuntime as the README asks the owner of a TrainJob to set it up for trainguard: its
    JobSet with `failurePolicy.maxRestarts`, its pods `restartPolicy: Never` with a podFailurePolicy that
    Ignores DisruptionTarget; the rendezvous on loopback at `port` (the module's docstring says why)."""
    env = [{"name": "MASTER_ADDR", "value": "127.0.0.1"}, {"name": "MASTER_PORT", "value": str(port)},
           {"name": "GLOO_SOCKET_IFNAME", "value": "lo"}]  # fmt: skip
    pod = {
        "restartPolicy": "Never",
        "containers": [{"name": "node", "image": "registry.invalid/llama:1", "env": env}],
    }
    node = {
        "name": "node",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"podFailurePolicy": {"rules": [IGNORE_DISRUPTION]}, "template": {"spec": pod}},
        },
    }
    return {
        "apiVersion": TRAINER_API, "kind": "TrainingRuntime", "metadata": {"name": "ddp", "namespace": ns},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {
            "failurePolicy": {"maxRestarts": 3}, "replicatedJobs": [node]}}},
    }  # fmt: skip


def ddp_trainjob(ns: str) -> dict[str, Any]:
    """A TrainJob of WORLD nodes, one process each, on `ddp_runtime`: its trainer wrapped in `trainguard
    launch`, 8 (fake) GPUs per node, so each rank has a node of its own."""
    return {
        "apiVersion": TRAINER_API, "kind": "TrainJob", "metadata": {"name": JOB, "namespace": ns},
        "spec": {
            "runtimeRef": {"name": "ddp", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
            "trainer": {"numNodes": WORLD, "numProcPerNode": 1, "command": list(LAUNCHED),
                        "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}},
        },
    }  # fmt: skip


PYTORCH_API = "kubeflow.org/v1"


def ddp_pytorchjob(ns: str, port: int) -> dict[str, Any]:
    """The gang as a PyTorchJob of a Master and a Worker (restartPolicy OnFailure, the training-operator's
    default; runPolicy.backoffLimit 3: trainguard restarts nothing of a PyTorchJob whose backoffLimit has
    no restart left), each pod's `pytorch` container wrapped in `trainguard launch`, 8 (fake) GPUs per pod.
    The training-operator sets RANK (Master 0, Worker 1), WORLD_SIZE, MASTER_PORT (the Master's
    `pytorchjob-port`, here `port`) and MASTER_ADDR (the Master's service name, appended after the
    container's own env, so it wins): see PYTORCHJOB_OWNER for the address."""

    def replica() -> dict[str, Any]:
        container = {"name": "pytorch", "image": "registry.invalid/llama:1", "command": list(LAUNCHED),
                     "env": [{"name": "GLOO_SOCKET_IFNAME", "value": "lo"}],
                     "ports": [{"name": "pytorchjob-port", "containerPort": port}],
                     "resources": {"limits": {"nvidia.com/gpu": "8"}}}  # fmt: skip
        return {"replicas": 1, "restartPolicy": "OnFailure", "template": {
            "spec": {"terminationGracePeriodSeconds": 5, "containers": [container]}}}  # fmt: skip

    return {
        "apiVersion": PYTORCH_API, "kind": "PyTorchJob", "metadata": {"name": JOB, "namespace": ns},
        "spec": {"runPolicy": {"backoffLimit": 3}, "pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}},
    }  # fmt: skip


@dataclass(frozen=True)
class Owner:
    """What runs the gang: the objects that make its pods (given the namespace and a free port for the
    rendezvous), the monitor's workloadRef, the label that selects the pods, and what the pod runner gives
    every trainer besides its container's env (PodProcesses' `env`)."""

    kind: str
    objects: Callable[[str, int], list[dict[str, Any]]]
    selector: dict[str, str]
    trainer_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def label_selector(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.selector.items())


JOB_OWNER = Owner("Job", lambda ns, port: [ddp_job(ns, port)], {"app": JOB})
JOBSET_OWNER = Owner("JobSet", lambda ns, port: [ddp_jobset(ns, port)], {"app": JOB})
TRAINJOB_OWNER = Owner(
    "TrainJob",
    lambda ns, port: [ddp_runtime(ns, port), ddp_trainjob(ns)],
    {"jobset.sigs.k8s.io/jobset-name": JOB},
)
PYTORCHJOB_OWNER = Owner(
    "PyTorchJob",
    lambda ns, port: [ddp_pytorchjob(ns, port)],
    {"training.kubeflow.org/job-name": JOB},
    # the training-operator's MASTER_ADDR (<job>-master-0, the Master's headless service) is resolved by
    # no DNS here, every pod being a process of this machine: the trainers rendezvous on loopback instead
    trainer_env={"MASTER_ADDR": "127.0.0.1"},
)


RENDEZVOUS_SPAN = 16
"""The ports a gang's stores may take: MASTER_PORT + generation, generations 0 to 15."""


def rendezvous_port(span: int = RENDEZVOUS_SPAN) -> int:
    """A MASTER_PORT whose `span` ports from it are free now and below the kernel's ephemeral range
    (ip_local_port_range), so that nothing on this machine takes one of them later by itself: a later
    generation's store listens on MASTER_PORT + generation, minutes after the gang started, while other
    processes bind port 0 (free_port) and connect out. Worse, a rank that keeps trying to connect to a
    store not yet up, at a port of that range, can be given that very port as its source port and
    connect to itself (TCP self-connect on loopback): the store's rank 0 then fails to listen
    (EADDRINUSE), as seen with a replacement rank 0 that started cold."""
    return lasting_port(span)


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
    owner: Owner = JOB_OWNER,
    fastpath: bool = True,
) -> PodProcesses:
    """The monitor (on `owner`) Ready, the owner's two pods running exporters and launched trainers, every
    rank past its first full checkpoint: the PodProcesses, entered (the caller exits it)."""
    monitor, policy = objects(ns, Sink(), {"emergencyCheckpointTimeout": "20s", **(remediation or {})})
    monitor["spec"]["selector"] = {"matchLabels": dict(owner.selector)}
    monitor["spec"]["workloadRef"] = {"kind": owner.kind, "name": JOB}
    cluster.apply([monitor, policy])  # first: the webhook gives the pods their sidecars at creation
    wait_for("monitor Ready", lambda: ready(cluster, ns), timeout=60)
    cluster.apply(owner.objects(ns, rendezvous_port()))
    pods = PodProcesses(
        cluster.api,
        ns,
        owner.label_selector,
        workdir,
        command=launch_command,
        fastpath=fastpath,
        env=owner.trainer_env,
    ).__enter__()
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


def new_ranks_resumed(
    pods: PodProcesses, old: set[str], world: int, timeout: float, context: Callable[[], str]
) -> dict[str, dict[str, Any]]:
    """Pod -> its trainer's first generation, once `world` pods other than `old` (uids) have each taken
    their first step; a timeout says `context()` (the record, the trainers' logs)."""

    def both() -> dict[str, dict[str, Any]]:
        runs = [r for r in pods.running() if r.uid not in old]
        return resumed(runs, 0) if len(runs) == world else {}

    try:
        return wait_for("every new rank at its first step", both, timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{context()}") from None


def first_step_at(run: PodRun, generation: int) -> float | None:
    """When (Unix seconds) the pod's trainer of `generation` logged its first step: the time the pod runner
    read the line, which its CRI log keeps as a container runtime would; None before it has (or when the
    node keeps no CRI logs)."""
    path = run.cri_dir / run.trainer_container / "0.log" if run.cri_dir else None
    if path is None or not path.exists():
        return None
    for line in path.read_text(errors="replace").splitlines():
        stamp, _, rest = line.partition(" ")
        if re.fullmatch(rf"std\w+ [FP] generation {generation} rank \d+ first step \d+", rest):
            return parse_rfc3339_ns(stamp) / 1e9
    return None


__all__ = [
    "JOB",
    "JOBSET_OWNER",
    "JOB_OWNER",
    "PYTORCHJOB_OWNER",
    "PYTORCH_API",
    "TRAINJOB_OWNER",
    "WORLD",
    "Owner",
    "cold_launch_command",
    "ddp_jobset",
    "ddp_pytorchjob",
    "first_step_at",
    "generations",
    "launch_command",
    "rendezvous_port",
    "resumed",
    "start_gang",
    "trainer_command",
]
