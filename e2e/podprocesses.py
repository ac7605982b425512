"""The containers the fake kubelet does not run, as local processes: for each Running pod of a job, the
injected trainguard exporter, started from the pod's own container spec (args, env, volumes), and
examples/train_tiny.py in place of the trainer image (or the command a test gives, such as
examples/train_ddp.py under `trainguard launch`), talking to it over the pod's SDK socket.

What a kubelet would do is done here by hand and is all there is to it: field references become their
values; the pod's emptyDir and its fastpath Secret volume become directories (the Secret's items
written as files); its projected ServiceAccount token becomes a file holding a token of the pod's
ServiceAccount from the TokenRequest API, bound to the pod, with the volume's audience and expiry (not
rotated: a test ends long before it expires); the exporter listens on the pod IP the fake kubelet
assigned (127.1.x.y). Two
things are added for tests: fault injection on the exporter, and a checkpoint directory per rank
shared across pod restarts, as a job's shared filesystem would be. A pod that is deleted has its
processes stopped, as the kubelet would.

A node death (`freeze`): every process of the pods on a node, the launchers' trainers included, is sent
SIGSTOP, so it neither answers nor exits and its TCP connections (the gloo gang's) stay open, as on a
machine that died. Each pod's exporter and trainer run in a session of their own (as the launcher runs
its trainer), so that stopping their process groups stops nothing else. A frozen pod that is deleted
has its processes killed at once (SIGKILL, which a stopped process takes): nothing would answer SIGTERM.

Their output goes where a container runtime's would too: each line, timestamped as it is read, into a
CRI log file under the directory the fake kubelet publishes on the node (POD_LOG_DIR), which it serves
as the pod's container logs through the apiserver; and, as it is, into trainer.log / exporter.log.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kubernetes import client

from e2e.controlplane.fakekubelet import POD_LOG_DIR, cri_line, pod_log_dir
from e2e.controlplane.local import die_with_parent
from trainguard.render.sidecar import (
    EXPORTER,
    IDENTITY_DIR,
    IDENTITY_VOLUME,
    RUN_DIR,
    TOKEN_DIR,
    TOKEN_VOLUME,
)

REPO = Path(__file__).resolve().parents[1]
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOBSET_INDEX = "jobset.sigs.k8s.io/job-index"


@dataclass
class PodRun:
    name: str
    uid: str
    node: str
    ip: str
    port: int
    rank: str
    dir: Path
    exporter: subprocess.Popen[bytes]
    trainer_env: dict[str, str]
    trainer: subprocess.Popen[bytes] | None = None
    trainer_container: str = "trainer"
    cri_dir: Path | None = None
    """This pod's CRI log folder (namespace_pod_uid) when the node publishes one."""
    started: float = field(default_factory=time.time)
    frozen: set[int] = field(default_factory=set)
    """The process groups `freeze` stopped (empty: the pod runs)."""

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.port}"

    def trainer_log(self) -> str:
        path = self.dir / "trainer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def exporter_log(self) -> str:
        path = self.dir / "exporter.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _env_value(entry: dict[str, Any], pod: dict[str, Any]) -> str:
    if "value" in entry:
        return str(entry["value"])
    path = entry["valueFrom"]["fieldRef"]["fieldPath"]
    for kind in ("labels", "annotations"):  # metadata.labels['key'], as the Job controller sets for the index
        if path.startswith(f"metadata.{kind}['") and path.endswith("']"):
            return str((pod["metadata"].get(kind) or {}).get(path[len(kind) + 11 : -2], ""))
    values = {"metadata.namespace": pod["metadata"]["namespace"], "metadata.name": pod["metadata"]["name"],
              "spec.nodeName": pod["spec"].get("nodeName", "")}  # fmt: skip
    if path not in values:
        raise ValueError(f"fieldRef {path} is not resolved by the e2e pod runner")
    return values[path]


def _local_path(value: str, run_dir: Path, token_dir: Path) -> str:
    """The pod's paths in this run's folders (RUN_DIR, a prefix of the others, last)."""
    identity_dir = token_dir.parent / "identity"
    return (
        value.replace(TOKEN_DIR, str(token_dir))
        .replace(IDENTITY_DIR, str(identity_dir))
        .replace(RUN_DIR, str(run_dir))
    )


def bound_token(core: client.CoreV1Api, pod: dict[str, Any], audience: str, expiration_s: int = 600) -> str:
    """A token of the pod's ServiceAccount bound to the pod, for `audience`: what the kubelet projects."""
    meta = pod["metadata"]
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(
            audiences=[audience],
            expiration_seconds=expiration_s,
            bound_object_ref=client.V1BoundObjectReference(
                kind="Pod", api_version="v1", name=meta["name"], uid=meta["uid"]
            ),
        )
    )
    account = pod["spec"].get("serviceAccountName") or "default"
    return str(core.create_namespaced_service_account_token(account, meta["namespace"], request).status.token)


def _pump(stream: IO[bytes], name: str, raw: IO[bytes], cri: IO[bytes] | None, lock: threading.Lock) -> None:
    """One stream of a process, line by line, into its plain log and its CRI log file."""
    for line in iter(stream.readline, b""):
        with lock:
            raw.write(line)
            raw.flush()
            if cri is not None:
                cri.write(cri_line(time.time_ns(), name, line))
                cri.flush()


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc (ppid is the 4th field of /proc/PID/stat, after the name)."""
    out: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        out.setdefault(ppid, []).append(int(entry.name))
    return out


STOPPED_STATES = ("T", "t", "Z", "X", "gone")
"""Process states (/proc/PID/stat) of a process that runs no more: stopped, traced, a zombie, dead."""


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat (T: stopped), or "gone"."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "gone"
    return stat[stat.rindex(")") + 2]


def descendants(roots: list[int]) -> set[int]:
    """`roots` and every process below them."""
    children, seen, todo = _children(), set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, []))
    return seen


def _spawn_logged(cmd: list[str], raw: Path, cri: Path | None, **kw: Any) -> subprocess.Popen[bytes]:
    """A process whose stdout and stderr are pumped into `raw` as they come and, timestamped, into `cri`;
    in a session of its own (`freeze` stops its process group)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, **kw)
    raw_f = raw.open("ab")
    cri_f = None
    if cri is not None:
        cri.parent.mkdir(parents=True, exist_ok=True)
        cri_f = cri.open("ab")
    lock = threading.Lock()
    pumps = [threading.Thread(target=_pump, args=(s, n, raw_f, cri_f, lock), daemon=True)
             for s, n in ((proc.stdout, "stdout"), (proc.stderr, "stderr"))]  # fmt: skip
    for t in pumps:
        t.start()

    def close() -> None:
        for t in pumps:
            t.join()
        for f in (raw_f, cri_f):
            if f is not None:
                f.close()

    threading.Thread(target=close, daemon=True).start()
    return proc


class PodProcesses:
    """Runs the exporter and trainer of every Running pod matching `selector` in `namespace`."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        selector: str,
        workdir: Path,
        *,
        step_delay: float = 0.02,
        fastpath: bool = True,
        steps: int = 100_000_000,
        command: Callable[[PodRun, Path], list[str]] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`command`: the trainer's command for a pod, given its run and the job's checkpoint folder (shared
        by the ranks, as a job's filesystem would be); default train_tiny.py in a folder per rank. `env`:
        variables the trainer gets besides its container's."""
        self.core = client.CoreV1Api(api)
        self.namespace, self.selector, self.workdir = namespace, selector, workdir
        self.step_delay, self.fastpath, self.steps = step_delay, fastpath, steps
        self.command, self.env = command, dict(env or {})
        self.runs: dict[str, PodRun] = {}
        self.finished: list[PodRun] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"pods-{namespace}", daemon=True)
        self.errors: list[str] = []

    def __enter__(self) -> PodProcesses:
        if not self.thread.is_alive():
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)
        with self.lock:
            for run in list(self.runs.values()):
                self._stop(run)
            self.runs.clear()

    # ---- the loop ----

    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                self.sync()
            except Exception as exc:  # a hiccup of the apiserver: try again on the next pass
                self.errors.append(repr(exc))
            self.stopping.wait(0.3)

    def sync(self) -> None:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items
        live = {
            p.metadata.uid: p
            for p in pods
            if p.metadata.deletion_timestamp is None and p.status.phase == "Running" and p.status.pod_ip
        }
        with self.lock:
            for uid in [u for u in self.runs if u not in live]:
                self._stop(self.runs.pop(uid))
            for uid, pod in live.items():
                if uid not in self.runs:
                    self.runs[uid] = self._start(self.core.api_client.sanitize_for_serialization(pod))
            for run in self.runs.values():
                if (
                    run.trainer is None
                    and not run.frozen
                    and run.exporter.poll() is None
                    and (run.dir / "run" / "sdk.sock").exists()
                ):
                    run.trainer = self._trainer(run)

    def _start(self, pod: dict[str, Any]) -> PodRun:
        meta, spec = pod["metadata"], pod["spec"]
        d = self.workdir / "pods" / meta["uid"][:8]
        run_dir, token_dir = d / "run", d / "token"
        run_dir.mkdir(parents=True, exist_ok=True)
        token_dir.mkdir(exist_ok=True)
        exporter = next(
            c for c in [*(spec.get("initContainers") or []), *spec["containers"]] if c["name"] == EXPORTER
        )
        self._secret_volume(pod, token_dir)
        self._identity_volume(pod, d / "identity")
        env = {
            e["name"]: _local_path(_env_value(e, pod), run_dir, token_dir) for e in exporter.get("env") or []
        }
        if not self.fastpath:
            env.pop("TRAINGUARD_FASTPATH_URL", None)
        ip = pod["status"]["podIP"]
        port = int(exporter["ports"][0]["containerPort"])
        args = [_local_path(a, run_dir, token_dir) for a in exporter["args"]]
        args = [f"{ip}:{port}" if a.startswith("0.0.0.0:") else a for a in args]
        annotations = meta.get("annotations") or {}
        trainer = spec["containers"][0]  # the first container trains; its image is replaced by train_tiny.py
        trainer_env = {
            e["name"]: _local_path(_env_value(e, pod), run_dir, token_dir) for e in trainer.get("env") or []
        }
        # the e2e gangs are one Indexed Job of N pods (a Job, a TrainJob's JobSet) or N child Jobs of one
        # pod each (a JobSet): one of the two indexes is 0, and the rank is the other; a PyTorchJob's pod
        # has neither, its RANK set by the training-operator in the container's env
        indexed = JOBSET_INDEX in annotations or COMPLETION_INDEX in annotations
        rank = str(int(annotations.get(JOBSET_INDEX) or 0) + int(annotations.get(COMPLETION_INDEX) or 0))
        rank = rank if indexed else trainer_env.get("RANK", "0")
        cri_dir = self._cri_dir(pod)
        proc = _spawn_logged(
            [sys.executable, "-m", "trainguard.cli", *args, "--enable-fault-injection"],
            d / "exporter.log", cri_dir / EXPORTER / "0.log" if cri_dir else None, cwd=REPO,
            preexec_fn=die_with_parent,  # the sync thread forks; it lives as long as the runner
            env={k: v for k, v in os.environ.items() if not k.startswith("TRAINGUARD_")} | env,
        )  # fmt: skip
        return PodRun(
            meta["name"], meta["uid"], spec.get("nodeName", ""), ip, port, rank, d, proc, trainer_env,
            trainer_container=trainer["name"], cri_dir=cri_dir,
        )  # fmt: skip

    def _cri_dir(self, pod: dict[str, Any]) -> Path | None:
        """Where the node's kubelet reads this pod's container logs, if it serves any."""
        try:
            node = self.core.read_node(pod["spec"].get("nodeName", ""))
        except client.exceptions.ApiException:
            return None
        root = (node.metadata.annotations or {}).get(POD_LOG_DIR)
        meta = pod["metadata"]
        return pod_log_dir(Path(root), meta["namespace"], meta["name"], meta["uid"]) if root else None

    def _secret_volume(self, pod: dict[str, Any], into: Path) -> None:
        volume = next((v for v in pod["spec"].get("volumes") or [] if v["name"] == TOKEN_VOLUME), None)
        if volume is None:
            return
        ref = volume["secret"]
        try:
            secret = self.core.read_namespaced_secret(ref["secretName"], pod["metadata"]["namespace"])
        except client.exceptions.ApiException:
            if ref.get("optional"):
                return
            raise
        for item in ref.get("items") or [{"key": k, "path": k} for k in secret.data or {}]:
            if item["key"] in (secret.data or {}):
                (into / item["path"]).write_bytes(base64.b64decode(secret.data[item["key"]]))

    def _identity_volume(self, pod: dict[str, Any], into: Path) -> None:
        volume = next((v for v in pod["spec"].get("volumes") or [] if v["name"] == IDENTITY_VOLUME), None)
        if volume is None:
            return
        into.mkdir(exist_ok=True)
        for source in volume["projected"]["sources"]:
            projected = source.get("serviceAccountToken")
            if projected is not None:
                token = bound_token(
                    self.core, pod, projected["audience"], int(projected.get("expirationSeconds") or 3600)
                )
                (into / projected["path"]).write_text(token)

    def _trainer(self, run: PodRun) -> subprocess.Popen[bytes]:
        ckpt = self.workdir / "checkpoints" / f"rank-{run.rank}"
        ckpt.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINGUARD_")} | run.trainer_env
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.env)
        cmd = [sys.executable, "examples/train_tiny.py", "--steps", str(self.steps), "--step-delay",
               str(self.step_delay), "--checkpoint-dir", str(ckpt)]  # fmt: skip
        if self.command is not None:
            cmd = self.command(run, self.workdir / "checkpoints")
        return _spawn_logged(
            cmd,
            run.dir / "trainer.log", run.cri_dir / run.trainer_container / "0.log" if run.cri_dir else None,
            cwd=REPO, env=env, preexec_fn=die_with_parent,  # as above
        )  # fmt: skip

    def _stop(self, run: PodRun) -> None:
        procs = [p for p in (run.trainer, run.exporter) if p is not None]
        if run.frozen:  # a dead node's processes: nothing would answer SIGTERM
            for pgid in run.frozen:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.finished.append(run)

    def freeze(self, node: str, timeout: float = 10) -> list[PodRun]:
        """A node death: SIGSTOP to the process groups of every process of the pods on `node` (exporter,
        launcher, its trainer and warm trainer), again until no new one appears (a launcher may have been
        forking) and every one of them is stopped (a signal is taken when the process next runs).
        Returns those pods' runs; they are killed when their pods are deleted."""
        me = os.getpgrp()
        deadline = time.monotonic() + timeout
        with self.lock:
            runs = [r for r in self.runs.values() if r.node == node]
            while True:
                groups: dict[int, PodRun] = {}
                pids = set()
                for run in runs:
                    for pid in descendants([p.pid for p in (run.exporter, run.trainer) if p is not None]):
                        with contextlib.suppress(ProcessLookupError):
                            groups.setdefault(os.getpgid(pid), run)
                            pids.add(pid)
                if me in groups:
                    raise RuntimeError(f"a process of a pod on {node} is in the runner's own process group")
                new = {g: r for g, r in groups.items() if g not in r.frozen}
                for pgid, run in new.items():
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pgid, signal.SIGSTOP)
                        run.frozen.add(pgid)
                running = sorted(p for p in pids if process_state(p) not in STOPPED_STATES)
                if not new and not running:
                    return runs
                if time.monotonic() > deadline:
                    raise RuntimeError(f"processes {running} of the pods on {node} did not stop")
                time.sleep(0.01)

    # ---- what tests ask ----

    def running(self) -> list[PodRun]:
        with self.lock:
            return [r for r in self.runs.values() if r.trainer is not None and r.trainer.poll() is None]

    def on_node(self, node: str) -> PodRun | None:
        return next((r for r in self.running() if r.node == node), None)

    def cleanup(self) -> None:
        shutil.rmtree(self.workdir / "pods", ignore_errors=True)
