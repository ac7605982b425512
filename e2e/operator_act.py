"""The demo's second act (scripts/demo.py): the operator answering a node fault, on the local control plane
and through the e2e pipeline harness (e2e/pipeline.py), everything real but the containers' images. A
2-pod Indexed Job trains (each pod's injected exporter and examples/train_tiny.py run as local processes,
e2e/podprocesses.py), a fatal XID is injected on one GPU, and what follows is told as it happens: the
page at the receivers, the remediation record's steps (the checkpoint, the cordon, the restart), the gang
resumed from the checkpoint on healthy nodes, and `trainguard status` before and after. The scenario is
e2e/test_pipeline.py's first test, shown rather than asserted.

Whether the act runs is `choose`'s decision: the control plane's binaries cached (build.sh cached), or
asked for with --with-operator, which builds them first."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.cluster import REPO, Cluster
from e2e.controlplane.cache import cache_dir
from e2e.controlplane.local import local_control_plane, prometheus_operator_crds
from e2e.pipeline import FINAL, JOB, Monitoring, Sink, exporter_step, inject, operator_stack, start
from e2e.podprocesses import PodProcesses
from e2e.receiver import records
from trainguard.catalog.kubernetes import FAULTY_TAINT
from trainguard.status.model import THROUGHPUT

Say = Callable[[str], None]

BUILD_SH = REPO / "e2e" / "controlplane" / "build.sh"
BUILD_TIME = "about 8 minutes on 2 cores from cold, Go 1.26 and the Go module proxy needed"
"""What `build.sh all` costs on a machine without the cache (README: the e2e suite's first run)."""
NAMESPACE = "ml"
POD_NETWORK = 200
"""The demo's pods get IPs 127.200.x.y: clear of those of `make e2e`'s processes (127.1.x.y, 127.2.x.y,
...), so the demo can run beside the suite."""
FAULT, FAULT_GPU = "xid-79", 1
FAULT_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Choice:
    """What the demo does about its operator act."""

    build: bool
    run: bool
    note: str
    failed: bool = False
    """The act was asked for and cannot run: the demo exits non-zero."""


def choose(*, asked: bool | None, cached: bool, go: bool) -> Choice:
    """`asked`: --with-operator (True), --no-operator (False), neither (None). The act runs on its own only
    when the control plane is cached: `make demo` on a fresh machine stays the minute it always was."""
    if asked is False:
        return Choice(False, False, "the operator act skipped (--no-operator)")
    if cached:
        return Choice(False, True, "the local control plane is cached: act 2 runs the operator")
    if asked and go:
        return Choice(True, True, f"building the local control plane first ({BUILD_TIME}; cached after)")
    if asked:
        return Choice(False, False, "--with-operator builds the local control plane, which needs Go 1.26 "
                      "(https://go.dev/dl) on PATH; go is not there", failed=True)  # fmt: skip
    return Choice(False, False, "act 2, the operator answering a node fault on a local Kubernetes control "
                  "plane, runs once its binaries are cached: `make controlplane` builds them (" + BUILD_TIME
                  + "), or `make demo DEMO_ARGS=--with-operator` builds them and runs it")  # fmt: skip


def binaries_cached() -> bool:
    """Every binary `build.sh all` builds is in the cache (it looks; it builds nothing)."""
    done = subprocess.run([str(BUILD_SH), "cached"], capture_output=True, check=False)
    return done.returncode == 0


def build(say: Say) -> float:
    """`build.sh all` (its progress on stderr); the seconds it took."""
    t0 = time.monotonic()
    subprocess.run([str(BUILD_SH), "all"], check=True)
    took = time.monotonic() - t0
    say(f"local control plane built in {took / 60:.1f} minutes, cached in {cache_dir()}")
    return took


@dataclass
class Outcome:
    """What the act saw: the first time each stage held (seconds after the fault), what never came, the
    remediation record, and the status before and after."""

    seen: dict[str, float] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)
    before: str = ""
    after: str = ""


def operator_act(say: Say, workdir: Path, *, pod_network: int = POD_NETWORK) -> Outcome:
    """The local control plane with trainguard installed, `node_fault` on it, and everything torn down (on
    Ctrl-C too: every process is stopped as the `with` blocks unwind)."""
    t0 = time.monotonic()
    say("act 2: the operator, on a local Kubernetes control plane (etcd, kube-apiserver, controller-manager, "
        "scheduler, 3 fake nodes of 8 GPUs)")  # fmt: skip
    with local_control_plane(nodes=3, pod_network=pod_network) as plane:
        cluster = Cluster(plane.kubeconfig, workdir, audit_log=plane.audit_log)
        try:
            cluster.install(prometheus_operator_crds())
            say(f"control plane up and trainguard's CRDs, RBAC and Secret-write policy installed "
                f"({time.monotonic() - t0:.0f}s); kubeconfig {plane.kubeconfig}")  # fmt: skip
            return node_fault(cluster, NAMESPACE, workdir, say)
        finally:
            cluster.stop_all_operators()
            cluster.stop_prometheus_operator()


def node_fault(cluster: Cluster, ns: str, workdir: Path, say: Say) -> Outcome:
    """On a cluster with trainguard installed: the operator and its monitoring, the job, the fault, and
    what follows, told through `say`. Leaves no process behind; the nodes stay as the fault left them
    (cordoned, tainted)."""
    out = Outcome()
    cluster.namespace(ns)
    say("starting the real prometheus-operator, Prometheus and Alertmanager run from the configuration it "
        "generates, and trainguard's operator under its ServiceAccount")  # fmt: skip
    with operator_stack(cluster) as stack:
        _, mon, sink = stack
        say(f"operator up; Prometheus {mon.prometheus}, Alertmanager {mon.alertmanager}; the receivers "
            f"phone, im and email on http://127.0.0.1:{sink.port}")  # fmt: skip
        say(f"applying a TrainingJobMonitor and an AlertPolicy for {ns}/{JOB}, then a 2-pod Indexed Job "
            "of 8 GPUs a pod: the operator renders its rules, routes and PodMonitor and injects the exporter "
            "sidecar; each pod's exporter and train_tiny.py run as local processes")  # fmt: skip
        with start(stack, ns, workdir) as pods:
            ranks = sorted(pods.running(), key=lambda r: r.rank)
            say("training: " + ", ".join(f"rank {r.rank} on {r.node} at step {exporter_step(r):.0f}"
                                         for r in ranks)
                + " (a checkpoint every 20 steps, a full one every 100)")  # fmt: skip
            out.before = status(cluster, ns, mon, say)
            watch(cluster, ns, sink, pods, victim=ranks[0], say=say, out=out)
            if not out.missing:
                wait_scraped(mon, ns, {r.name for r in ranks})
                out.after = status(cluster, ns, mon, say)
    return out


def watch(cluster: Cluster, ns: str, sink: Sink, pods: PodProcesses, *, victim: Any, say: Say,
          out: Outcome) -> None:  # fmt: skip
    """Inject the fault on `victim`'s GPU and tell each thing as it comes, until the gang has resumed."""
    old = {r.name for r in pods.running()}
    said_steps: set[int] = set()
    said_resumed: set[str] = set()
    notified = 0
    say(f"injecting '{FAULT}' (the GPU fell off the bus) on {victim.node} GPU {FAULT_GPU}, under rank "
        f"{victim.rank}'s pod {victim.name}")  # fmt: skip
    inject(victim, FAULT, FAULT_GPU)
    t0 = time.monotonic()

    def at(stage: str) -> str:
        out.seen.setdefault(stage, time.monotonic() - t0)
        return f"(+{out.seen[stage]:.1f}s)"

    def done() -> bool:
        return {"paged", "cordoned", "record done", "resumed"} <= out.seen.keys()

    while not done() and time.monotonic() - t0 < FAULT_TIMEOUT_S:
        for n in sink.got[notified:]:
            notified += 1
            for a in n.alerts:
                labels = a["labels"]
                stage = "paged" if n.receiver == "phone" and a["status"] == "firing" else "notified"
                grade = labels.get("priority") or labels.get("severity", "")  # an older rule has no priority
                severity = labels.get("severity", "")
                shown = grade if severity in ("", grade) else f"{grade}, severity {severity}"
                say(f"  -> receiver '{n.receiver}' got {a['status']} {labels.get('alertname')} [{shown}] on "
                    f"{labels.get('node', '-')} gpu {labels.get('gpu', '-')} {at(stage)}")  # fmt: skip
        recs = records(cluster, ns)
        if recs:
            record = out.record = recs[0]
            if "record" not in out.seen:
                say(f"  the operator's remediation record for {record['alert']} on {record['node']} "
                    f"({record['class']}): {' -> '.join(s['kind'] for s in record['steps'])} {at('record')}")  # fmt: skip
            for i, step in enumerate(record["steps"]):
                if i not in said_steps and step["phase"] in FINAL:
                    said_steps.add(i)
                    say(f"  step {step['kind']}: {step['phase']}, {step['detail']} {at(step['kind'])}")
            if record["phase"] in FINAL and "record done" not in out.seen:
                say(f"  remediation {record['phase']} {at('record done')}")
        if "cordoned" not in out.seen:
            node = cluster.core.read_node(victim.node)
            faulty = [
                f"{t.key}={t.value}:{t.effect}" for t in node.spec.taints or [] if t.key == FAULTY_TAINT
            ]
            if node.spec.unschedulable and faulty:
                say(f"  {victim.node} read back: cordoned and tainted {faulty[0]}, no new pod lands there "
                    f"{at('cordoned')}")  # fmt: skip
        for r in pods.running():
            if r.name in old or r.name in said_resumed:
                continue
            line = next((ln for ln in r.trainer_log().splitlines()
                         if ln.startswith("resuming after the checkpoint of step")), None)  # fmt: skip
            if line:
                said_resumed.add(r.name)
                say(f"  rank {r.rank}'s new pod {r.name} on {r.node}: {line} {at(f'rank {r.rank} resumed')}")
        if len(said_resumed) >= len(old):
            at("resumed")
        time.sleep(0.2)
    out.missing = sorted({"paged", "cordoned", "record done", "resumed"} - out.seen.keys())
    if out.missing:
        say(f"never within {FAULT_TIMEOUT_S:.0f}s: {', '.join(out.missing)}")
    else:
        say(f"paged {out.seen['paged']:.1f}s, cordoned {out.seen['cordoned']:.1f}s and the gang resumed "
            f"{out.seen['resumed']:.1f}s after the fault")  # fmt: skip


def wait_scraped(mon: Monitoring, ns: str, old: set[str], timeout: float = 30) -> None:
    """Until Prometheus scrapes the new pods' exporters and has their throughput again (what the status
    after shows), or the timeout: the status then shows what there is."""
    up = f'up{{namespace="{ns}", container="trainguard-exporter"}} == 1'
    throughput = f'{THROUGHPUT}{{namespace="{ns}", training_job="{JOB}"}}'

    def seen() -> bool:
        new = [s for s in mon.query(up) if s["metric"].get("pod") not in old]
        return len(new) >= len(old) and any(
            not math.isnan(float(s["value"][1])) for s in mon.query(throughput)
        )

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if seen():
                return
        except OSError:
            pass
        time.sleep(0.5)


def status(cluster: Cluster, ns: str, mon: Monitoring, say: Say) -> str:
    """`trainguard status` as a user runs it, against this cluster, Prometheus and Alertmanager; said
    line by line and returned."""
    args = ["status", "-n", ns, "--kubeconfig", str(cluster.kubeconfig), "--prometheus", mon.prometheus,
            "--alertmanager", mon.alertmanager]  # fmt: skip
    say(f"$ trainguard {' '.join(args)}")
    done = subprocess.run([sys.executable, "-m", "trainguard.cli", *args], capture_output=True, text=True,
                          timeout=60, check=False, cwd=REPO)  # fmt: skip
    text = done.stdout + done.stderr
    for line in text.rstrip("\n").splitlines():
        say(f"    {line}")
    return text
