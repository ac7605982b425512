"""The executor carries a record out against a fake cluster that behaves like the real one: cordon is
idempotent and keeps its first annotations, a taint merges into the node's list, deleted pods go
Terminating and their Job controller recreates them (scheduled at the scheduler's next pass), and
sidecars answer control as the exporter does (a body checked whole before anything changes, advisories
replaced whole, a requested checkpoint saved by the trainer a little later and listed in `checkpoints`,
a pinned resume_from held until a trainer started after the pin saves past it, new pods' sidecars knowing
no checkpoint but the workload's resume-from pointer the webhook gave them, held as a pin). An older
sidecar (`old_sidecars=True`) ignores resume_from posts and shows neither times, pinned nor checkpoints."""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import re
from collections.abc import Mapping
from typing import Any

import pytest

from tests.conftest import monitor as make_monitor
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.events import fingerprint
from trainguard.catalog.kubernetes import CORDON_REASON, CORDONED_AT, CORDONED_BY, FAULTY_TAINT, RESUME_FROM
from trainguard.exporter.checkpoints import checkpoint_ref, newer, resume_pointer
from trainguard.kube.objects import new_pods_placement, taints_with
from trainguard.remediation.executor import Executor, choose_checkpoint
from trainguard.remediation.model import ClusterState, Phase, Plan, Signal, Source, Step, StepKind
from trainguard.remediation.ops import Sidecar
from trainguard.remediation.plan import plan
from trainguard.remediation.records import new_record
from trainguard.remediation.sidecars import ControlError

T0 = 1_700_000_000.0
TOKEN = "sidecar-token"
PORT = 9400
CKPT_STEP = 1000
CKPT_TS = T0 - 60
HISTORY = 16


class Crash(BaseException):
    """The operator process killed in the middle of a call (not an Exception: nothing may catch it)."""


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _ts(seconds: float) -> str:
    return dt.datetime.fromtimestamp(int(seconds), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeCluster:
    """ClusterOps over an in-memory cluster. `effects` lists every change that happened, once per change;
    `timeline` (shared with the test's save) orders changes against saves. `crash_after` kills the
    caller right after the n-th call took effect."""

    def __init__(
        self,
        clock: Clock,
        timeline: list[tuple[str, ...]],
        *,
        nodes: tuple[str, ...] = ("gpu-a", "gpu-b", "gpu-c"),
        pods: dict[str, str] | None = None,
        save_after_reads: int | None = 2,
        old_sidecars: bool = False,
    ) -> None:
        self.clock = clock
        self.timeline = timeline
        self.nodes: dict[str, dict[str, Any]] = {
            n: {"unschedulable": False, "annotations": {}, "taints": [], "labels": {}, "gpus": 8}
            for n in nodes
        }
        self.old_sidecars = old_sidecars
        self.pods: dict[str, dict[str, Any]] = {}
        for i, (pod, node) in enumerate((pods or {"job-0": "gpu-a", "job-1": "gpu-b"}).items()):
            self.pods[pod] = {"node": node, "created": int(T0 - 3600), "terminating": False, "index": i}
        first = {"step": CKPT_STEP, "kind": "full", "path": f"/ckpt/{CKPT_STEP}", "ts": CKPT_TS}
        self.sidecar: dict[str, dict[str, Any]] = {pod: self._sidecar_state(dict(first)) for pod in self.pods}
        self.workload = ("Job", "llama-pretrain")
        """The gang's owner: the webhook reads its resume-from annotation into each new pod's sidecar."""
        self.workloads: dict[tuple[str, str], dict[str, str]] = {}
        self.annotations_written: list[dict[str, str | None]] = []
        self.generation = 0
        self.save_after_reads = save_after_reads
        self.unreachable: set[str] = set()
        self.calls = 0
        self.crash_after: int | None = None
        self.effects: list[tuple[str, ...]] = []

    def _sidecar_state(
        self, newest: dict[str, Any] | None, pin: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A sidecar as the exporter keeps it: `newest` saved (and listed), or a pod created with the
        pointer `pin` (held from the start, pinned_at None) and nothing saved yet."""
        return {
            "pause": False,
            "checkpoint": None,
            "advisories": [],
            "resume_from": pin or newest,
            "pinned": pin is not None,
            "checkpoints": [newest] if newest else [],
            "pinned_at": None,
            "newest": newest,
            "started": self.clock(),  # the trainer's start (the pod's, here)
            "reads": 0,
        }

    def _effect(self, *what: str) -> None:
        self.effects.append(what)
        self.timeline.append(what)

    def _called(self) -> None:
        self.calls += 1
        if self.crash_after is not None and self.calls == self.crash_after:
            raise Crash(f"killed after call {self.calls}")

    # ---- the cluster's own controllers ----

    def _tick(self) -> None:
        """The kubelet finishes terminating pods; the scheduler places pods pending since the last pass
        on a schedulable, untainted node with 8 free GPUs."""
        for name in [p for p, s in self.pods.items() if s["terminating"]]:
            del self.pods[name]
            self.sidecar.pop(name, None)
        for pod in sorted(self.pods.values(), key=lambda s: int(s["index"])):
            if pod["node"]:
                continue
            if not pod.get("seen"):
                pod["seen"] = True
                continue
            busy = {
                s["node"] for s in self.pods.values() if not s.get("phase")
            }  # a finished pod holds no GPUs
            for name, node in sorted(self.nodes.items()):
                if node["unschedulable"] or any(t["effect"] == "NoSchedule" for t in node["taints"]):
                    continue
                if name not in busy:
                    pod["node"] = name
                    break

    def _recreate(self, index: int) -> None:
        """The Job controller's replacement; the webhook gives its sidecar the workload's resume-from."""
        self.generation += 1
        name = f"job-{index}-r{self.generation}"
        self.pods[name] = {"node": "", "created": int(self.clock()), "terminating": False, "index": index}
        pointer = self.workloads.get(self.workload, {}).get(RESUME_FROM)
        self.sidecar[name] = self._sidecar_state(None, resume_pointer(pointer) if pointer else None)

    def _pod_dict(self, name: str) -> dict[str, Any]:
        s = self.pods[name]
        meta: dict[str, Any] = {"name": name, "creationTimestamp": _ts(s["created"])}
        if s["terminating"]:
            meta["deletionTimestamp"] = _ts(self.clock())
        return {
            "metadata": meta,
            "spec": {"nodeName": s["node"]} if s["node"] else {},
            "status": {
                "phase": s.get("phase") or ("Running" if s["node"] else "Pending"),
                "podIP": f"10.0.0.{s['index']}",
            },
        }

    # ---- ClusterOps ----

    def cordon(self, node: str, reason: str, record_id: str) -> str:
        n = self.nodes[node]
        if n["unschedulable"] and CORDONED_BY in n["annotations"]:
            out = f"already cordoned by {n['annotations'][CORDONED_BY]}"
        elif n["unschedulable"]:
            out = "already cordoned, not by trainguard: left as is"
        else:
            n["unschedulable"] = True
            n["annotations"].update(
                {CORDONED_AT: str(int(self.clock())), CORDONED_BY: record_id, CORDON_REASON: reason}
            )
            self._effect("cordon", node)
            out = "cordoned"
        self._called()
        return out

    def taint(self, node: str, reason: str) -> str:
        n = self.nodes[node]
        merged = taints_with(n["taints"], FAULTY_TAINT, reason, "NoSchedule")
        if merged is None:
            out = "already tainted"
        else:
            n["taints"] = merged
            self._effect("taint", node)
            out = "tainted"
        self._called()
        return out

    def cordon_history(self) -> list[tuple[str, float]]:
        self._called()
        return [
            (k, float(n["annotations"][CORDONED_AT]))
            for k, n in self.nodes.items()
            if CORDONED_AT in n["annotations"]
        ]

    def gpu_node_count(self) -> int:
        self._called()
        return sum(1 for n in self.nodes.values() if n["gpus"] > 0)

    def spares(self) -> list[str]:
        self._called()
        return sorted(
            k
            for k, n in self.nodes.items()
            if n["labels"].get("trainguard.io/spare") == "true" and not n["unschedulable"]
        )

    def gang_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        self._tick()
        self._called()
        return [self._pod_dict(p) for p in sorted(self.pods)]

    def delete_pods(self, namespace: str, names: list[str]) -> list[str]:
        deleted = []
        for name in names:
            pod = self.pods.get(name)
            if pod is None or pod["terminating"]:
                continue  # 404, or already being deleted: the apiserver accepts it and nothing changes
            pod["terminating"] = True
            self._effect("delete", name)
            self._recreate(int(pod["index"]))  # the Job controller replaces a terminating pod
            deleted.append(name)
        self._called()
        return deleted

    def placement(self, namespace: str, label_selector: str, created_after: float) -> dict[str, str] | None:
        pods = self.gang_pods(namespace, label_selector)
        return new_pods_placement(pods, created_after)

    def annotate_workload(
        self, namespace: str, api_version: str, kind: str, name: str, annotations: Mapping[str, str | None]
    ) -> None:
        """A merge patch: a None (JSON null) removes the key, a missing key stays as it is."""
        current = self.workloads.setdefault((kind, name), {})
        if any(current.get(k) != v for k, v in annotations.items()):
            self.annotations_written.append(dict(annotations))
            for key, value in annotations.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value
            self._effect(
                "unannotate" if all(v is None for v in annotations.values()) else "annotate", kind, name
            )
        self._called()

    def sidecars(self, namespace: str, label_selector: str, port: int) -> list[Sidecar]:
        self._tick()
        self._called()
        return sorted(
            Sidecar(p, s["node"], f"http://{p}:{port}")
            for p, s in self.pods.items()
            if s["node"] and not s["terminating"] and not s.get("phase")
        )

    def _reach(self, base_url: str, token: str) -> tuple[str, dict[str, Any]]:
        pod = re.sub(r"^http://|:\d+$", "", base_url)
        if pod in self.unreachable or pod not in self.sidecar:
            raise ControlError(f"GET {base_url}/v1/control: connection refused")
        if token != TOKEN:
            raise ControlError(f"POST {base_url}/v1/control: HTTP 401")
        return pod, self.sidecar[pod]

    def _view(self, state: dict[str, Any]) -> dict[str, Any]:
        hidden = {"reads", "pinned_at", "newest", "started"}
        if self.old_sidecars:  # before the pin: no times, no pinned, no list
            hidden |= {"pinned", "checkpoints"}
        view = copy.deepcopy({k: v for k, v in state.items() if k not in hidden})
        if self.old_sidecars and view["resume_from"]:
            view["resume_from"].pop("ts", None)
        return view

    def control(self, base_url: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
        pod, state = self._reach(base_url, token)
        if body.get("checkpoint") not in (None, "full", "incremental"):
            raise ControlError("HTTP 400 checkpoint")  # checked whole: nothing changed
        try:
            pin = checkpoint_ref(body["resume_from"]) if "resume_from" in body else None
        except ValueError as exc:
            raise ControlError(f"HTTP 400 {exc}") from None
        if "pause" in body and bool(body["pause"]) != state["pause"]:
            state["pause"] = bool(body["pause"])
            self._effect("pause", pod)
        if "checkpoint" in body and body["checkpoint"] != state["checkpoint"]:
            state["checkpoint"], state["reads"] = body["checkpoint"], 0
            self._effect("checkpoint-request", pod)
        if "advisories" in body and list(body["advisories"])[-32:] != state["advisories"]:
            state["advisories"] = [dict(a) for a in body["advisories"]][-32:]
            self._effect("advise", pod)
        if "resume_from" in body and not self.old_sidecars:  # an older exporter ignores the key
            self._pin(pod, state, pin)
        self._called()
        return self._view(state)

    def _pin(self, pod: str, state: dict[str, Any], pin: dict[str, Any] | None) -> None:
        before = (state["pinned"], state["resume_from"])
        if pin is None:
            state["pinned"], state["pinned_at"], state["resume_from"] = False, None, state["newest"]
        else:
            if not (state["pinned"] and state["pinned_at"] is not None and state["resume_from"] == pin):
                state["pinned_at"] = self.clock()  # the same pin again keeps its time
            state["pinned"], state["resume_from"] = True, pin
        if (state["pinned"], state["resume_from"]) != before:
            self._effect("pin" if pin else "unpin", pod)

    def trainer_saves(self, state: dict[str, Any], kind: str) -> float:
        """The trainer saved a checkpoint past its newest and reported it; returns its step."""
        known = [c["step"] for c in state["checkpoints"]] + [(state["resume_from"] or {}).get("step", 0)]
        step = max(known) + 100
        ref = {"step": float(step), "kind": kind, "path": f"/ckpt/{step:g}", "ts": self.clock()}
        state["checkpoints"] = sorted([*state["checkpoints"], ref], key=lambda c: (c["step"], c["ts"]))
        state["checkpoints"] = state["checkpoints"][-HISTORY:]
        state["newest"] = newer(state["newest"], ref)
        pinned_step = (state["resume_from"] or {}).get("step", -1)
        started_after = state["pinned_at"] is None or state["started"] > state["pinned_at"]
        if state["pinned"] and not (step > pinned_step and started_after):
            return float(step)  # the trainers running when the pin was set do not move it
        state["pinned"], state["pinned_at"], state["resume_from"] = False, None, state["newest"]
        return float(step)

    def read_control(self, base_url: str, token: str) -> dict[str, Any]:
        pod, state = self._reach(base_url, token)
        if state["checkpoint"] and self.save_after_reads is not None:
            state["reads"] += 1
            if state["reads"] >= self.save_after_reads:  # the trainer saved and reported it
                step = self.trainer_saves(state, state["checkpoint"])
                state["checkpoint"] = None
                self._effect("checkpoint-saved", pod, f"{step:g}")
        self._called()
        return self._view(state)


class Store:
    """The monitor's status: save() keeps the record and notes it on the shared timeline."""

    def __init__(self, timeline: list[tuple[str, ...]]) -> None:
        self.timeline = timeline
        self.saved: list[dict[str, Any]] = []

    def save(self, record: dict[str, Any]) -> dict[str, Any]:
        self.saved.append(copy.deepcopy(record))
        active = [(s["kind"], s["phase"]) for s in record["steps"] if s["phase"] == Phase.IN_PROGRESS]
        last = next((s for s in reversed(record["steps"]) if s["phase"] != Phase.PLANNED), None)
        self.timeline.append(
            ("save", *(active[0] if active else (last["kind"], last["phase"]) if last else ()))
        )
        return copy.deepcopy(record)

    @property
    def last(self) -> dict[str, Any]:
        return copy.deepcopy(self.saved[-1])


def _monitor(**changes: Any) -> TrainingJobMonitor:
    return make_monitor(**{"spec.workloadRef": {"kind": "Job", "name": "llama-pretrain"}, **changes})


def _signal(alertname: str, node: str = "gpu-a") -> Signal:
    labels = {"alertname": alertname, "severity": "P0", "namespace": "ml", "training_job": "llama-pretrain"}
    if node:
        labels["node"] = node
    return Signal(alertname, "P0", labels, fingerprint(labels), Source.SIDECAR, T0 - 5)


def node_fault_record(monitor: TrainingJobMonitor, timeout_s: int = 30) -> dict[str, Any]:
    """The planner's own node-fault plan (a seam: its params are what the executor reads)."""
    p = plan(_signal("GPUCriticalXid"), monitor, ClusterState(now=T0, gpu_nodes=3))
    steps = tuple(
        Step(s.kind, {**s.params, "timeout_s": str(timeout_s)})
        if s.kind == StepKind.REQUEST_CHECKPOINT
        else s
        for s in p.steps
    )
    return new_record(Plan(**{**p.__dict__, "steps": steps}), T0)


def record_of(*steps: Step, dry_run: bool = False, node: str = "") -> dict[str, Any]:
    return new_record(Plan("rec-1", "fp", "X", "nodeFault", steps, node=node, dry_run=dry_run), T0)


class Rig:
    def __init__(self, **fake: Any) -> None:
        self.clock = Clock()
        self.timeline: list[tuple[str, ...]] = []
        self.cluster = FakeCluster(self.clock, self.timeline, **fake)
        self.store = Store(self.timeline)
        self.notified: list[str] = []

    def executor(self) -> Executor:
        return Executor(
            self.cluster,
            self.store.save,
            lambda ns, name: TOKEN if (ns, name) == ("ml", "llama-pretrain") else "wrong",
            clock=self.clock,
            sleep=self.clock.sleep,
            notify=lambda record, message: self.notified.append(message),
        )


def kinds_and_phases(record: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["kind"], s["phase"]) for s in record["steps"]]


# ---- the node fault, in order -----------------------------------------------------------------------


def test_node_fault_runs_checkpoint_cordon_taint_restart_confirm_in_order() -> None:
    rig = Rig()
    m = _monitor()
    done = rig.executor().run(node_fault_record(m), m)

    assert done["phase"] == Phase.SUCCEEDED
    assert [k for k, _ in kinds_and_phases(done)] == [
        "RequestCheckpoint", "Cordon", "Taint", "RestartGang", "ConfirmPlacement",
    ]  # fmt: skip
    assert all(p == Phase.SUCCEEDED for _, p in kinds_and_phases(done))
    effects = [e[0] for e in rig.cluster.effects]
    assert effects == [
        "checkpoint-request", "checkpoint-saved",  # the healthy rank on gpu-b only
        "cordon", "taint", "annotate", "delete", "delete", "unannotate",
    ]  # fmt: skip
    assert rig.cluster.effects[0] == ("checkpoint-request", "job-1"), (
        "the rank on the faulty node is not asked"
    )
    detail = {s["kind"]: s["detail"] for s in done["steps"]}
    assert detail["RequestCheckpoint"] == f"checkpoint step {CKPT_STEP + 100} saved on job-1"
    node = rig.cluster.nodes["gpu-a"]
    assert node["unschedulable"] and node["annotations"][CORDONED_BY] == done["id"]
    assert node["annotations"][CORDON_REASON] == "GPUCriticalXid"
    assert node["taints"] == [{"key": FAULTY_TAINT, "value": "GPUCriticalXid", "effect": "NoSchedule"}]
    # the pointer is the newest checkpoint, the emergency one, with its kind and time
    pointer = json.loads(str(rig.cluster.annotations_written[0][RESUME_FROM]))
    assert pointer == {"step": 1100, "kind": "full", "path": "/ckpt/1100", "ts": pointer["ts"]}
    assert pointer["ts"] > T0
    assert detail["RestartGang"].startswith("deleted 2 pod(s): job-0, job-1; resume-from step 1100 on Job/")
    # the new sidecars were created holding it; the replacements landed on the healthy nodes
    assert [s["resume_from"] for s in rig.cluster.sidecar.values()] == [checkpoint_ref(pointer)] * 2
    assert all(s["pinned"] for s in rig.cluster.sidecar.values())
    assert detail["ConfirmPlacement"] == (
        "placed job-0-r1->gpu-b, job-1-r2->gpu-c; resume-from cleared on Job/llama-pretrain"
    )


def test_records_are_saved_before_each_action() -> None:
    rig = Rig()
    m = _monitor()
    rig.executor().run(node_fault_record(m), m)

    saves = [t[1:] for t in rig.timeline if t[0] == "save"]
    assert saves == [
        ("RequestCheckpoint", "InProgress"),
        ("RequestCheckpoint", "InProgress"),  # "asking ... past step 1000", before asking
        ("RequestCheckpoint", "Succeeded"),
        ("Cordon", "InProgress"),
        ("Cordon", "Succeeded"),
        ("Taint", "InProgress"),
        ("Taint", "Succeeded"),
        ("RestartGang", "InProgress"),
        ("RestartGang", "InProgress"),  # "deleting 2 pod(s) created up to ...", before deleting
        ("RestartGang", "Succeeded"),
        ("ConfirmPlacement", "InProgress"),
        ("ConfirmPlacement", "Succeeded"),
    ]
    owner = {"checkpoint-request": "RequestCheckpoint", "cordon": "Cordon", "taint": "Taint"}
    owner |= {"annotate": "RestartGang", "delete": "RestartGang"}
    for i, event in enumerate(rig.timeline):
        if event[0] in owner:
            last_save = next(t for t in reversed(rig.timeline[:i]) if t[0] == "save")
            assert last_save[1:] == (owner[event[0]], "InProgress"), f"{event} acted before its record"
    assert rig.store.saved[8]["steps"][3]["detail"].startswith("deleting 2 pod(s) created up to ")


# ---- a crash anywhere, then a new operator ------------------------------------------------------------


def _clean_run() -> tuple[list[tuple[str, ...]], int]:
    rig = Rig()
    m = _monitor()
    rig.executor().run(node_fault_record(m), m)
    return rig.cluster.effects, rig.cluster.calls


CLEAN_EFFECTS, CLEAN_CALLS = _clean_run()


@pytest.mark.parametrize("crash_after", range(1, CLEAN_CALLS + 1))
def test_an_operator_killed_after_any_call_resumes_and_every_effect_happens_once(crash_after: int) -> None:
    rig = Rig()
    m = _monitor()
    rig.cluster.crash_after = crash_after
    with pytest.raises(Crash):
        rig.executor().run(node_fault_record(m), m)
    rig.cluster.crash_after = None
    assert rig.store.saved, "the record is saved before the first call"

    done = rig.executor().run(rig.store.last, m)  # a new operator, from the record in the status

    assert done["phase"] == Phase.SUCCEEDED, done
    assert rig.cluster.effects == CLEAN_EFFECTS


def test_a_resumed_restart_does_not_delete_the_replacements() -> None:
    rig = Rig()
    m = _monitor()
    record = node_fault_record(m)
    calls_before_delete = next(
        n for n in range(1, CLEAN_CALLS + 1) if _effects_after(n)[-1:] == [("delete", "job-1")]
    )
    rig.cluster.crash_after = calls_before_delete
    with pytest.raises(Crash):
        rig.executor().run(record, m)
    rig.cluster.crash_after = None
    interrupted = rig.store.last
    assert interrupted["steps"][3]["phase"] == Phase.IN_PROGRESS
    done = rig.executor().run(interrupted, m)
    assert [e for e in rig.cluster.effects if e[0] == "delete"] == [("delete", "job-0"), ("delete", "job-1")]
    assert done["steps"][3]["detail"].startswith("deleted 2 pod(s) created up to ")
    assert "(0 of them after the operator restarted)" in done["steps"][3]["detail"]
    assert done["steps"][3]["progress"]["count"] == 2


def _reworded(record: dict[str, Any]) -> dict[str, Any]:
    """The record with every step's detail and the record's message in other words: what a new version of
    the operator would find in the status after its messages changed."""
    out = copy.deepcopy(record)
    for step in out["steps"]:
        step["detail"] = f"(reworded) {step['kind']} was at {step['phase']}" if step["detail"] else ""
    out["message"] = "(reworded)" if out.get("message") else ""
    return out


@pytest.mark.parametrize("crash_after", range(1, CLEAN_CALLS + 1))
def test_a_resume_reads_the_progress_fields_not_the_messages(crash_after: int) -> None:
    """Killed after any call, then resumed by an operator whose every message reads differently: every
    effect still happens once (the replacements are not deleted, the checkpoint mark is the same, the
    new gang's size is the old one's), because the redo reads the steps' progress fields."""
    rig = Rig()
    m = _monitor()
    rig.cluster.crash_after = crash_after
    with pytest.raises(Crash):
        rig.executor().run(node_fault_record(m), m)
    rig.cluster.crash_after = None

    done = rig.executor().run(_reworded(rig.store.last), m)

    assert done["phase"] == Phase.SUCCEEDED, done
    assert rig.cluster.effects == CLEAN_EFFECTS
    restart = next(s for s in done["steps"] if s["kind"] == "RestartGang")
    assert restart["progress"]["count"] == 2 and restart["progress"]["createdUpTo"] > 0
    ask = next(s for s in done["steps"] if s["kind"] == "RequestCheckpoint")
    assert ask["progress"] == {"asked": 1, "pastStep": 1000}, ask  # the one rank off the faulty node


def _effects_after(calls: int) -> list[tuple[str, ...]]:
    rig = Rig()
    m = _monitor()
    rig.cluster.crash_after = calls
    with contextlib.suppress(Crash):
        rig.executor().run(node_fault_record(m), m)
    return rig.cluster.effects


# ---- dry run, failures, timeouts -----------------------------------------------------------------------


def test_dry_run_says_what_it_would_do_and_calls_nothing() -> None:
    rig = Rig()
    m = _monitor()
    p = plan(
        _signal("GPUCriticalXid"), _monitor(**{"spec.remediation": {"dryRun": True}}), ClusterState(T0, 3)
    )
    record = new_record(p, T0)

    done = rig.executor().run(record, m)

    assert rig.cluster.calls == 0 and rig.cluster.effects == []
    assert done["phase"] == Phase.DRY_RUN
    assert all(s["phase"] == Phase.DRY_RUN for s in done["steps"])
    details = [s["detail"] for s in done["steps"]]
    assert details[0].startswith("would ask the sidecars not on gpu-a for a full checkpoint")
    assert details[1] == "would cordon node gpu-a (GPUCriticalXid)"
    assert details[2] == f"would taint node gpu-a {FAULTY_TAINT}=GPUCriticalXid:NoSchedule"
    assert details[3].startswith("would delete the pods of app=llama-pretrain")
    pin = record_of(Step(StepKind.PIN_CHECKPOINT, {"before_ts": repr(T0)}), dry_run=True)
    assert rig.executor().run(pin, m)["steps"][0]["detail"] == (
        "would pin the newest checkpoint saved before 2023-11-14T22:13:20.000Z"
    )
    assert rig.executor().run(done, m) == done, "recorded once"
    assert rig.cluster.calls == 0 and len(rig.store.saved) == 2


def test_a_failing_step_is_recorded_failed_and_nothing_after_it_runs() -> None:
    rig = Rig()
    m = _monitor()
    record = node_fault_record(m)
    boom = rig.cluster.taint

    def refused(node: str, reason: str) -> str:
        raise RuntimeError('nodes "gpu-a" is forbidden')

    rig.cluster.taint = refused  # type: ignore[method-assign]
    done = rig.executor().run(record, m)
    rig.cluster.taint = boom  # type: ignore[method-assign]

    assert kinds_and_phases(done) == [
        ("RequestCheckpoint", "Succeeded"),
        ("Cordon", "Succeeded"),
        ("Taint", "Failed"),
        ("RestartGang", "Planned"),
        ("ConfirmPlacement", "Planned"),
    ]
    assert done["phase"] == Phase.FAILED
    assert done["steps"][2]["detail"] == 'RuntimeError: nodes "gpu-a" is forbidden'
    assert not [e for e in rig.cluster.effects if e[0] == "delete"]
    assert rig.executor().run(done, m) == done, "a failed record is not carried on"


def test_a_checkpoint_that_does_not_come_is_recorded_and_the_cordon_goes_on() -> None:
    rig = Rig(save_after_reads=None)  # the trainer never saves
    m = _monitor()
    done = rig.executor().run(node_fault_record(m, timeout_s=30), m)

    step = done["steps"][0]
    assert step["phase"] == Phase.SUCCEEDED
    assert step["detail"] == f"timed out after 30s waiting for job-1 to save past step {CKPT_STEP}"
    assert rig.clock() - T0 >= 30
    assert done["phase"] == Phase.SUCCEEDED
    assert rig.cluster.nodes["gpu-a"]["unschedulable"]
    # the pointer is the newest checkpoint before the fault
    assert rig.cluster.annotations_written[0] == {
        RESUME_FROM: json.dumps(
            {"kind": "full", "path": "/ckpt/1000", "step": 1000, "ts": CKPT_TS}, sort_keys=True
        )
    }


def test_an_unreachable_healthy_sidecar_does_not_block_the_cordon() -> None:
    rig = Rig()
    rig.cluster.unreachable = {"job-1"}
    m = _monitor()
    done = rig.executor().run(node_fault_record(m), m)
    assert done["steps"][0]["detail"].startswith("no sidecar answered the checkpoint request; failed: job-1")
    assert done["phase"] == Phase.SUCCEEDED and rig.cluster.nodes["gpu-a"]["unschedulable"]


def test_placement_that_never_comes_fails_the_confirmation() -> None:
    rig = Rig(nodes=("gpu-a", "gpu-b"))  # no room for the second pod once gpu-a is cordoned
    m = _monitor()
    done = rig.executor().run(node_fault_record(m), m)
    assert kinds_and_phases(done)[-1] == ("ConfirmPlacement", "Failed")
    assert done["steps"][-1]["detail"].startswith(
        "the new pods were not all placed away from gpu-a within 120s"
    )


def test_a_spare_that_takes_a_pod_is_recorded() -> None:
    rig = Rig(nodes=("gpu-a", "gpu-b", "spare-0"))
    rig.cluster.nodes["spare-0"]["labels"]["trainguard.io/spare"] = "true"
    m = _monitor()
    done = rig.executor().run(node_fault_record(m), m)
    assert done["steps"][-1]["detail"] == (
        "placed job-0-r1->gpu-b, job-1-r2->spare-0; spare used: spare-0; resume-from cleared on Job/llama-pretrain"
    )
    assert done["steps"][3]["detail"].endswith("; spares available: spare-0")


def test_a_node_cordoned_by_a_person_is_left_as_it_is() -> None:
    rig = Rig()
    rig.cluster.nodes["gpu-a"]["unschedulable"] = True
    m = _monitor()
    done = rig.executor().run(record_of(Step(StepKind.CORDON, {"node": "gpu-a", "reason": "XID"})), m)
    assert done["steps"][0]["detail"] == "already cordoned, not by trainguard: left as is"
    assert rig.cluster.nodes["gpu-a"]["annotations"] == {}


def test_taint_merges_with_existing_taints_once() -> None:
    rig = Rig()
    other = {"key": "example.com/maintenance", "value": "x", "effect": "NoExecute"}
    rig.cluster.nodes["gpu-a"]["taints"] = [other]
    m = _monitor()
    taint = Step(StepKind.TAINT, {"node": "gpu-a", "reason": "GPULost"})
    rig.executor().run(record_of(taint, taint), m)
    assert rig.cluster.nodes["gpu-a"]["taints"] == [
        other,
        {"key": FAULTY_TAINT, "value": "GPULost", "effect": "NoSchedule"},
    ]


def test_an_interrupted_gang_restarts_its_live_pods_and_leaves_the_finished_one() -> None:
    """An OOMKilled rank: its pod Failed (the Job already made a replacement), the others run. The
    Failed pod is not deleted (nothing would replace it) and placement waits for the 2 live ones."""
    rig = Rig(pods={"job-0": "gpu-a", "job-1": "gpu-b", "job-1-r0": "gpu-c"})
    rig.cluster.pods["job-1"]["phase"] = "Failed"
    rig.cluster.pods["job-1-r0"]["index"] = 1
    m = _monitor()
    restart = (Step(StepKind.RESTART_GANG, {"avoid": ""}), Step(StepKind.CONFIRM_PLACEMENT, {"avoid": ""}))
    done = rig.executor().run(record_of(*restart), m)

    assert done["phase"] == Phase.SUCCEEDED, done
    assert [e for e in rig.cluster.effects if e[0] == "delete"] == [
        ("delete", "job-0"),
        ("delete", "job-1-r0"),
    ]
    assert done["steps"][0]["detail"].startswith("deleted 2 pod(s): job-0, job-1-r0")
    assert done["steps"][1]["detail"].startswith("placed job-0-r1->gpu-a, job-1-r2->gpu-b; ")


# ---- the non-finite loss and advice ----------------------------------------------------------------------


def test_non_finite_loss_pauses_every_sidecar_and_pins_the_checkpoint_before_it() -> None:
    rig = Rig()
    m = _monitor()
    done = rig.executor().run(
        record_of(Step(StepKind.PAUSE), Step(StepKind.PIN_CHECKPOINT, {"before_ts": repr(T0 - 6)})), m
    )
    assert done["phase"] == Phase.SUCCEEDED
    assert all(s["pause"] for s in rig.cluster.sidecar.values())
    assert done["steps"][0]["detail"] == "paused: job-0, job-1"
    assert done["steps"][1]["detail"] == "pinned step 1000 (/ckpt/1000)", "checked against its time"
    pin = {"step": 1000.0, "kind": "full", "path": "/ckpt/1000", "ts": CKPT_TS}
    assert all(s["pinned"] and s["resume_from"] == pin for s in rig.cluster.sidecar.values())
    assert not any(n["unschedulable"] for n in rig.cluster.nodes.values()), "a NaN cordons nothing"


def test_an_older_sidecar_without_times_is_pinned_unchecked_and_its_checkpoint_awaited() -> None:
    """An exporter from before the pin: resume_from without ts, no `checkpoints`, the pin ignored. The
    pin is taken from resume_from and says it could not be checked; the checkpoint request judges
    progress from resume_from."""
    rig = Rig(old_sidecars=True)
    m = _monitor()
    nan = rig.executor().run(record_of(Step(StepKind.PIN_CHECKPOINT, {"before_ts": repr(T0 - 6)})), m)
    assert nan["steps"][0]["detail"] == (
        "pinned step 1000 (/ckpt/1000) (saved before the fault: not checked, the sidecar reports no "
        "checkpoint time)"
    )
    done = rig.executor().run(node_fault_record(m), m)
    assert done["steps"][0]["detail"] == f"checkpoint step {CKPT_STEP + 100} saved on job-1"


def test_pin_takes_the_listed_checkpoint_when_the_trainer_saved_after_the_nan() -> None:
    """The trainer saved once more between the NaN and the pause: resume_from is that corrupted
    checkpoint; the good one before the NaN is among the sidecar's `checkpoints`."""
    rig = Rig()
    for state in rig.cluster.sidecar.values():
        rig.cluster.trainer_saves(state, "incremental")  # step 1100 at T0, after the NaN at T0 - 6
        assert state["resume_from"]["step"] == CKPT_STEP + 100
    done = rig.executor().run(
        record_of(Step(StepKind.PIN_CHECKPOINT, {"before_ts": repr(T0 - 6)})), _monitor()
    )

    assert done["phase"] == Phase.SUCCEEDED, done["steps"][0]["detail"]
    assert done["steps"][0]["detail"] == "pinned step 1000 (/ckpt/1000)"
    for state in rig.cluster.sidecar.values():
        assert state["pinned"] and state["resume_from"]["path"] == "/ckpt/1000"


def test_a_pinned_sidecar_answers_the_checkpoint_request_and_the_pointer_keeps_the_pin() -> None:
    """A node fault after a NaN pin: the pinned resume_from never moves, so progress is the newest
    listed checkpoint; the gang restarts from the pin, not from the checkpoint of the corrupted state."""
    rig = Rig()
    m = _monitor()
    pin = {"step": CKPT_STEP, "kind": "full", "path": f"/ckpt/{CKPT_STEP}", "ts": CKPT_TS}
    for pod, state in rig.cluster.sidecar.items():
        rig.cluster.control(f"http://{pod}:{PORT}", TOKEN, {"resume_from": pin})  # after a NaN
        rig.cluster.trainer_saves(state, "full")  # step 1100: the trainer went on, the pin holds
        assert state["pinned"] and state["resume_from"]["step"] == CKPT_STEP

    done = rig.executor().run(node_fault_record(m, timeout_s=30), m)

    assert done["steps"][0]["detail"] == "checkpoint step 1200 saved on job-1"
    assert rig.clock() - T0 < 30, "the wait did not run out its timeout"
    pointer = json.loads(str(rig.cluster.annotations_written[0][RESUME_FROM]))
    assert pointer == {"step": 1000, "kind": "full", "path": "/ckpt/1000", "ts": CKPT_TS}


def test_the_pointer_is_cleared_once_the_gang_is_placed_and_a_later_pod_starts_unpinned() -> None:
    rig = Rig()
    m = _monitor()
    done = rig.executor().run(node_fault_record(m), m)
    assert done["phase"] == Phase.SUCCEEDED
    assert [e for e in rig.cluster.effects if e[0].endswith("annotate")] == [
        ("annotate", "Job", "llama-pretrain"),
        ("unannotate", "Job", "llama-pretrain"),
    ]
    assert rig.cluster.annotations_written[-1] == {RESUME_FROM: None}
    assert RESUME_FROM not in rig.cluster.workloads[("Job", "llama-pretrain")]
    assert all(s["pinned"] for s in rig.cluster.sidecar.values()), "the new gang holds the pointer"

    rig.cluster.delete_pods("ml", ["job-0-r1"])  # later, for another reason
    rig.cluster.sidecars("ml", "app=llama-pretrain", PORT)
    assert rig.cluster.sidecar["job-0-r3"]["pinned"] is False
    assert rig.cluster.sidecar["job-0-r3"]["resume_from"] is None


def test_a_pointer_that_cannot_be_cleared_is_said_and_the_placement_stands() -> None:
    rig = Rig()
    m = _monitor()
    annotate = rig.cluster.annotate_workload

    def refused(namespace: str, api_version: str, kind: str, name: str, annotations: Any) -> None:
        if all(v is None for v in annotations.values()):
            raise RuntimeError('jobs.batch "llama-pretrain" is forbidden')
        annotate(namespace, api_version, kind, name, annotations)

    rig.cluster.annotate_workload = refused  # type: ignore[method-assign]
    done = rig.executor().run(node_fault_record(m), m)

    assert done["phase"] == Phase.SUCCEEDED
    assert done["steps"][-1]["detail"].endswith(
        '; resume-from not cleared on Job/llama-pretrain: jobs.batch "llama-pretrain" is forbidden'
    )


def test_pause_fails_when_no_sidecar_takes_it() -> None:
    rig = Rig()
    rig.cluster.unreachable = {"job-0", "job-1"}
    done = rig.executor().run(record_of(Step(StepKind.PAUSE), Step(StepKind.PIN_CHECKPOINT)), _monitor())
    assert kinds_and_phases(done) == [("Pause", "Failed"), ("PinCheckpoint", "Planned")]
    assert done["steps"][0]["detail"].startswith("no sidecar took paused; failed: job-0: GET")


def test_pin_fails_when_no_checkpoint_is_known() -> None:
    rig = Rig()
    for state in rig.cluster.sidecar.values():
        state["resume_from"], state["checkpoints"] = None, []
    done = rig.executor().run(record_of(Step(StepKind.PIN_CHECKPOINT, {"before_ts": repr(T0)})), _monitor())
    assert done["phase"] == Phase.FAILED
    assert done["steps"][0]["detail"] == "no checkpoint saved before the fault is known to the sidecars"


def test_pin_fails_when_every_checkpoint_followed_the_fault() -> None:
    rig = Rig()
    done = rig.executor().run(
        record_of(Step(StepKind.PIN_CHECKPOINT, {"before_ts": repr(CKPT_TS - 1)})), _monitor()
    )
    assert done["phase"] == Phase.FAILED
    assert not any(s["pinned"] for s in rig.cluster.sidecar.values())


def test_advice_is_appended_once_to_each_sidecar() -> None:
    rig = Rig()
    earlier = {"advice": "reduce_lr", "record": "older"}
    for state in rig.cluster.sidecar.values():
        state["advisories"] = [earlier]
    advise = Step(StepKind.ADVISE, {"advice": "clip_gradients"})
    rig.executor().run(record_of(advise, advise), _monitor())  # the second is a redo of the first
    for state in rig.cluster.sidecar.values():
        assert state["advisories"] == [earlier, {"advice": "clip_gradients", "record": "rec-1"}]
    assert [e[0] for e in rig.cluster.effects] == ["advise", "advise"]


def test_notify_goes_to_the_notifier_and_is_recorded() -> None:
    rig = Rig()
    done = rig.executor().run(record_of(Step(StepKind.NOTIFY, {"reason": "cordon cap reached"})), _monitor())
    assert rig.notified == ["cordon cap reached"]
    assert done["steps"][0]["detail"] == "notified: cordon cap reached"
    assert rig.cluster.calls == 0


def test_a_wrong_token_reaches_no_sidecar() -> None:
    rig = Rig()
    m = make_monitor(**{"metadata.name": "other-job"})
    done = rig.executor().run(record_of(Step(StepKind.PAUSE)), m)
    assert done["phase"] == Phase.FAILED and "HTTP 401" in done["steps"][0]["detail"]
    assert rig.cluster.effects == []


# ---- pure parts ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("candidates", "before_ts", "before_step", "expected_step"),
    [
        ([{"step": 900}, {"step": 1000}], None, None, 1000),
        ([{"step": 900, "ts": T0 - 60}, {"step": 1000, "ts": T0 + 1}], T0, None, 900),  # saved after the NaN
        ([{"step": 900}, {"step": 1000}], None, 1000, 900),  # at the NaN step is not good
        ([{"step": 1000, "ts": T0}], T0, None, None),
        ([{"path": "/x"}], None, None, None),
        # a pin without a time is the listed checkpoint of the same step and path: saved after the NaN
        ([{"step": 1000, "path": "/c"}, {"step": 1000, "path": "/c", "ts": T0 + 1}], T0, None, None),
        ([{"step": 900, "path": "/b", "ts": T0 - 9}, {"step": 1000, "path": "/c"}], T0, None, 1000),
    ],
)
def test_choose_checkpoint_keeps_the_newest_before_the_fault(
    candidates: list[dict[str, Any]],
    before_ts: float | None,
    before_step: float | None,
    expected_step: int | None,
) -> None:
    chosen, _ = choose_checkpoint(candidates, before_ts, before_step)
    assert (chosen or {}).get("step") == expected_step
