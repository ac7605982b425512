"""The remediation tests' in-memory world: a cluster behind remediation.ops.ClusterOps (FakeCluster)
that behaves like the real one, the record store, a settable clock, and an executor over them (Rig), the
P0 loop wired on the Kubernetes edge's fake (loop_rig), and the signals and monitor they act on.

FakeCluster: cordon is idempotent and keeps its first annotations, a taint merges into the node's list,
deleted pods go Terminating and their Job controller recreates them (scheduled at the scheduler's next
pass), and sidecars answer control as the exporter does (a body checked whole before anything changes,
advisories replaced whole, a requested checkpoint saved by the trainer a little later and listed in
`checkpoints`, a pinned resume_from held until a trainer started after the pin saves past it, new pods'
sidecars knowing no checkpoint but the workload's resume-from pointer the webhook gave them, held as a
pin). An older sidecar (`old_sidecars=True`) ignores resume_from posts and shows neither times, pinned
nor checkpoints. With `launchers`, the pods (all, or those named) run `trainguard launch`: its sidecar
takes a restart word as the exporter does (exporter/restarts.py checks it) and its launcher runs the new
generation `launcher_reads` control reads later (None: never). With `periodic_every`, each trainer saves
a checkpoint of its own (the job's periodic one, nobody asked) at every n-th read of its control view;
`trainer_fields` adds what a pod's trainer reports (step_time_s, allreduce_time_ratio) to its view."""

from __future__ import annotations

import copy
import datetime as dt
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from tests.clock import T0, Clock
from tests.conftest import MONITOR
from tests.conftest import monitor as make_monitor
from tests.kube.fakes import FakeKube
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.events import fingerprint
from trainguard.catalog.kubernetes import (
    COMPLETION_INDEX,
    CORDON_REASON,
    CORDONED_AT,
    CORDONED_BY,
    FAULTY_TAINT,
    RESUME_FROM,
)
from trainguard.controller.admission import restart_of
from trainguard.exporter.checkpoints import checkpoint_ref, newer, resume_pointer
from trainguard.exporter.restarts import restart_word
from trainguard.kube.objects import taints_with
from trainguard.kube.workloads import ChildJob, Workload
from trainguard.remediation import records
from trainguard.remediation.executor import Executor
from trainguard.remediation.loop import RemediationLoop
from trainguard.remediation.model import Phase, Signal, Source
from trainguard.remediation.ops import Refused, Sidecar
from trainguard.remediation.sidecars import ControlError
from trainguard.remediation.store import Fresh
from trainguard.remediation.urgency import Urgency
from trainguard.render.sidecar import INJECTED

TOKEN = "sidecar-token"
KEY = b"k" * 48
"""The operator key (records are signed with it)."""
PORT = 9400
CKPT_STEP = 1000
CKPT_TS = T0 - 60
HISTORY = 16
SEEN = ("GPUCriticalXid", "GPUDoubleBitECCError", "GPULost")


class Crash(BaseException):
    """The operator process killed in the middle of a call (not an Exception: nothing may catch it)."""


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
        launchers: bool | set[str] = False,
        launcher_reads: int | None = 1,
        indexed: bool = True,
    ) -> None:
        self.clock = clock
        self.indexed = indexed
        """Whether the pods say their completion index (COMPLETION_INDEX), as an Indexed Job's do."""
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
        self.launcher_reads = launcher_reads
        for pod, state in self.sidecar.items():
            if launchers is True or (isinstance(launchers, set) and pod in launchers):
                state["launcher"] = {"pid": 1, "generation": 0, "state": "running", "alive": True}
        self.new_launchers = launchers is True
        """Whether recreated pods run `trainguard launch` too (their first trainer as the word they hold)."""
        self.owner_ref = ("Job", "llama-pretrain")
        """The gang's owner: the webhook reads its resume-from annotation into each new pod's sidecar."""
        self.owner: Workload = Workload("Job", "llama-pretrain")
        """What `workload` answers: the owner resolved (no problem, no limit of its own by default)."""
        self.workloads: dict[tuple[str, str], dict[str, str]] = {}
        self.annotations_written: list[dict[str, str | None]] = []
        self.admitted_pointer: Callable[[], str | None] = self.workload_pointer
        """The resume-from pointer the webhook gives a pod created now."""
        self.generation = 0
        self.save_after_reads = save_after_reads
        self.unreachable: set[str] = set()
        self.hardware: dict[str, list[dict[str, Any]]] = {
            pod: [{"alertname": a, "at": T0 - 5} for a in SEEN]
            for pod, s in self.pods.items()
            if s["node"] == "gpu-a"
        }
        """GET /v1/hardware per pod: what its sidecar detected itself (by default the sidecar on gpu-a saw
        the GPU faults p0_signal names there)."""
        self.down: set[str] = set()
        """Nodes whose Ready condition is not True."""
        self.pdb_blocks: set[str] = set()
        """Pods whose eviction a PodDisruptionBudget refuses."""
        self.jobs_deleted: list[str] = []
        self.periodic_every: int | None = None
        """Every how many control reads each trainer saves a periodic checkpoint (None: never)."""
        self.trainer_fields: dict[str, dict[str, Any]] = {}
        """Per pod, the trainer's own fields its control view shows (step_time_s, allreduce_time_ratio)."""
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
            "restart": None,
            "launcher": None,
            "word_reads": 0,
            "periodic_reads": 0,
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

    def workload_pointer(self) -> str | None:
        """The workload's resume-from annotation: what an older operator's webhook gave a new pod."""
        return self.workloads.get(self.owner_ref, {}).get(RESUME_FROM)

    def _recreate(self, index: int, job: str | None = None) -> None:
        """The Job controller's replacement; the webhook gives its sidecar the resume-from pointer
        (`admitted_pointer`: by default the workload's annotation; Rig and loop_rig read the monitor's
        status as the operator's webhook does)."""
        self.generation += 1
        name = f"job-{index}-r{self.generation}"
        self.pods[name] = {"node": "", "created": int(self.clock()), "terminating": False, "index": index}
        if job:
            self.pods[name]["job"] = job
        pointer = self.admitted_pointer()
        if pointer:
            self.pods[name]["given"] = pointer  # the webhook says it on the pod (trainguard.io/resume-from)
        held = resume_pointer(pointer) if pointer else None
        pin = {k: v for k, v in held.items() if k not in ("generation", "record")} if held else None
        state = self._sidecar_state(None, pin)
        if held and held.get("generation"):  # exporter/training.py: the pointer's generation is the word
            state["restart"] = {
                "generation": held["generation"],
                "record": held["record"],
                "resume_from": pin,
            }
        if self.new_launchers:  # launch/decide.py begin: the first trainer runs as the word held
            generation = (state["restart"] or {}).get("generation", 0)
            state["launcher"] = {"pid": 1, "generation": generation, "state": "running", "alive": True}
        self.sidecar[name] = state

    def replace_failed(self, name: str) -> None:
        """The Job controller's replacement of a Failed pod, which it makes after its back-off."""
        assert self.pods[name].get("phase") == "Failed", name
        self._recreate(int(self.pods[name]["index"]))

    def _pod_dict(self, name: str) -> dict[str, Any]:
        s = self.pods[name]
        meta: dict[str, Any] = {
            "name": name,
            "uid": s.get("uid", name),
            "creationTimestamp": _ts(s["created"]),
        }
        if self.indexed:
            meta["labels"] = {COMPLETION_INDEX: str(s["index"])}
        meta["annotations"] = {
            INJECTED: "llama-pretrain",
            **({RESUME_FROM: s["given"]} if s.get("given") else {}),
        }
        job = next((c for c in self.owner.children if c.name == s.get("job")), None)
        if job is not None:
            meta["ownerReferences"] = [{"kind": "Job", "name": job.name, "uid": job.uid, "controller": True}]
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

    def held_cordons(self) -> list[str]:
        # no _called(): the guardrails' reads do not shift the crash points the executor's tests count
        return sorted(
            k for k, n in self.nodes.items() if n["unschedulable"] and CORDONED_BY in n["annotations"]
        )

    def pools(self, label: str) -> list[tuple[str, str, bool]]:
        return sorted(
            (k, n["labels"].get(label, "") if label else "", not n.get("down", False))
            for k, n in self.nodes.items()
            if n["gpus"] > 0
        )

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

    # ---- through the owner ----

    def as_jobset(self, parallelism: int = 1, **owner: Any) -> None:
        """The gang as a JobSet's: each pod the only pod of child Job llama-pretrain-node-<index>
        (parallelism 1), or all of them of llama-pretrain-node-0; `owner` overrides the resolved
        Workload's fields (budget_left, refusal, ...)."""
        jobs: dict[str, ChildJob] = {}
        for state in self.pods.values():
            name = f"llama-pretrain-node-{state['index'] if parallelism == 1 else 0}"
            jobs[name] = ChildJob(name, f"{name}-uid", parallelism, 6, True, float(state["created"]))
            state["job"] = name
        self.owner_ref = ("JobSet", "llama-pretrain")
        self.owner = Workload("JobSet", "llama-pretrain", budget_left=2, attempt=0, jobset="llama-pretrain",
                              jobset_uid="js-uid", children=tuple(sorted(jobs.values(), key=lambda j: j.name)))  # fmt: skip
        self.owner = replace(self.owner, **owner)

    def workload(self, namespace: str, ref: Any, selector: Any) -> Workload:
        """The owner with the gang's pods as they are now (their child Jobs in ownerReferences)."""
        self._tick()
        self._called()
        return replace(self.owner, pods=tuple(self._pod_dict(p) for p in sorted(self.pods)))

    def _replace(self, name: str, uid: str, what: str) -> bool:
        pod = self.pods.get(name)
        if pod is None or (pod["terminating"] and what != "force-delete") or pod.get("uid", name) != uid:
            return False  # 404, or another pod of that name now: the precondition fails
        if what == "force-delete":
            del self.pods[name]  # grace 0: gone at once
            self.sidecar.pop(name, None)
        else:
            pod["terminating"] = True
        self._effect(what, name)
        job = next((c for c in self.owner.children if c.name == pod.get("job")), None)
        if job is None or job.parallelism > 1:  # a JobSet's parallelism-1 Job is recreated with its Job
            self._recreate(int(pod["index"]), pod.get("job"))
        return True

    def fail_pod(self, namespace: str, name: str, uid: str, message: str) -> bool:
        pod = self.pods.get(name)
        ok = (
            pod is not None
            and pod.get("uid", name) == uid
            and pod.get("phase") not in ("Failed", "Succeeded")
        )
        if ok:
            assert pod is not None
            pod["phase"] = "Failed"
            self._effect("fail", name)
        self._called()
        return ok

    def force_delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        out = self._replace(name, uid, "force-delete")
        self._called()
        return out

    def evict_pod(self, namespace: str, name: str, uid: str, grace_s: int) -> bool:
        if name in self.pdb_blocks:
            self._called()
            raise Refused(f"the eviction of pod {namespace}/{name} was refused (429): a PodDisruptionBudget")
        out = self._replace(name, uid, "evict")
        self._called()
        return out

    def delete_child_job(self, namespace: str, name: str, uid: str, owner_uid: str) -> bool:
        """Background deletion: the Job goes, the garbage collector deletes its pods, and the JobSet
        recreates the Job (a new uid) at once, whose pods come with it."""
        job = next((c for c in self.owner.children if c.name == name), None)
        if job is None or job.uid != uid:
            self._called()
            return False
        if owner_uid != self.owner.jobset_uid:
            raise Refused(f"Job {namespace}/{name} is not controlled by the JobSet: it is not deleted")
        self.jobs_deleted.append(name)
        self._effect("delete-job", name)
        renewed = replace(job, uid=f"{name}-uid-{len(self.jobs_deleted)}", created=self.clock())
        self.owner = replace(
            self.owner, children=tuple(renewed if c.name == name else c for c in self.owner.children)
        )
        for _, state in sorted(self.pods.items()):
            if state.get("job") == name and not state["terminating"]:
                state["terminating"] = True  # the garbage collector's delete
                self._recreate(int(state["index"]), name)
        self._called()
        return True

    def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        out = self._replace(name, uid, "delete")
        self._called()
        return out

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
        hidden = {"reads", "pinned_at", "newest", "started", "word_reads", "periodic_reads"}
        if self.old_sidecars:  # before the pin: no times, no pinned, no list
            hidden |= {"pinned", "checkpoints", "restart", "launcher"}
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
            word = restart_word(body["restart"]) if "restart" in body else None
        except ValueError as exc:
            raise ControlError(f"HTTP 400 {exc}") from None
        held = (state["restart"] or {}).get("generation", 0)
        if word is not None and word["generation"] < held:
            raise ControlError(f"HTTP 400 restart.generation {word['generation']} is older")
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
        if "restart" in body and word != state["restart"] and not self.old_sidecars:
            state["restart"], state["word_reads"] = word, 0
            self._effect("word", pod, str(word["generation"] if word else None))
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
        launcher, word = state["launcher"], state["restart"]
        if (
            launcher
            and word
            and launcher["generation"] < word["generation"]
            and self.launcher_reads is not None
        ):
            state["word_reads"] += 1
            if state["word_reads"] >= self.launcher_reads:  # the launcher ran it: a new trainer
                launcher["generation"], state["started"] = word["generation"], self.clock()
                self._effect("restarted", pod, str(word["generation"]))
        if state["checkpoint"] and self.save_after_reads is not None:
            state["reads"] += 1
            if state["reads"] >= self.save_after_reads:  # the trainer saved and reported it
                step = self.trainer_saves(state, state["checkpoint"])
                state["checkpoint"] = None
                self._effect("checkpoint-saved", pod, f"{step:g}")
        if self.periodic_every:
            state["periodic_reads"] += 1
            if state["periodic_reads"] % self.periodic_every == 0:  # the job's own checkpoint interval
                step = self.trainer_saves(state, "incremental")
                self._effect("periodic-checkpoint", pod, f"{step:g}")
        self._called()
        return {**self._view(state), **self.trainer_fields.get(pod, {})}

    def read_hardware(self, base_url: str, token: str) -> dict[str, Any]:
        pod, _ = self._reach(base_url, token)
        self._called()
        return {"faults": copy.deepcopy(self.hardware.get(pod, []))}

    def job_nodes(self, namespace: str, label_selector: Any) -> set[str]:
        return {s["node"] for s in self.pods.values() if s["node"] and not s.get("phase")}

    def unready_nodes(self) -> set[str]:
        return set(self.down)


class Store:
    """The monitor's status as the executor sees it through store.Saver: `saver()` gives one run its read
    and save, which keep the record (noted on the shared timeline) only while the stored copy stands
    where that run last read or wrote it (else records.Superseded, as the real store). `monitor` is the
    monitor as the API has it now; `interleave` holds someone else's changes (a spec edited, another
    executor's write), each landing just before the next save."""

    def __init__(self, timeline: list[tuple[str, ...]]) -> None:
        self.timeline = timeline
        self.saved: list[dict[str, Any]] = []
        self.records: dict[str, dict[str, Any]] = {}
        self.monitor: TrainingJobMonitor | None = None
        self.interleave: list[Callable[[Store], None]] = []
        self.watchers: list[tuple[Callable[[dict[str, Any]], bool], Callable[[Store], None]]] = []

    def when(self, saved: Callable[[dict[str, Any]], bool], change: Callable[[Store], None]) -> None:
        """Make `change` (someone else's) once, right after the first save of a record that `saved` holds."""
        self.watchers.append((saved, change))

    def put(self, record: dict[str, Any]) -> None:
        """A record written by someone (the planner, another executor, a user)."""
        self.records[record["id"]] = copy.deepcopy(record)

    def saver(self) -> Saver:
        return Saver(self)

    @property
    def last(self) -> dict[str, Any]:
        return copy.deepcopy(self.saved[-1])


class Saver:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.seen: dict[str, Any] | None = None

    def read(self, record_id: str) -> Fresh | None:
        if self.store.monitor is None:
            return None
        record = copy.deepcopy(self.store.records.get(record_id))
        self.seen = record
        return Fresh(record, self.store.monitor)

    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        while self.store.interleave:
            self.store.interleave.pop(0)(self.store)
        current = self.store.records.get(record["id"])
        if current is None or not records.same(current, self.seen):
            self.store.timeline.append(("superseded",))
            raise records.Superseded(f"record {record['id']} moved on")
        self.store.put(record)
        self.seen = copy.deepcopy(record)
        self.store.saved.append(copy.deepcopy(record))
        for watcher in [w for w in self.store.watchers if w[0](record)]:
            self.store.watchers.remove(watcher)
            watcher[1](self.store)
        active = [(s["kind"], s["phase"]) for s in record["steps"] if s["phase"] == Phase.IN_PROGRESS]
        last = next((s for s in reversed(record["steps"]) if s["phase"] != Phase.PLANNED), None)
        self.store.timeline.append(
            ("save", *(active[0] if active else (last["kind"], last["phase"]) if last else ()))
        )
        return copy.deepcopy(record)


def job_monitor(**changes: Any) -> TrainingJobMonitor:
    """The test monitor, its workload the Job llama-pretrain (the gang the executor restarts)."""
    return make_monitor(**{"spec.workloadRef": {"kind": "Job", "name": "llama-pretrain"}, **changes})


def p0_signal(alertname: str, node: str = "gpu-a") -> Signal:
    """A P0 of the job ml/llama-pretrain from a sidecar, on `node` (none: a job-wide one)."""
    labels = {"alertname": alertname, "severity": "P0", "namespace": "ml", "training_job": "llama-pretrain"}
    if node:
        labels["node"] = node
    return Signal(alertname, "P0", labels, fingerprint(labels), Source.SIDECAR, T0 - 5)


class Rig:
    """An executor on FakeCluster, saving to a Store; what it notifies is kept in `notified`. `leads`,
    `mode` and `stopping` are what the executor is told of leadership, the operator's mode and whether
    the operator is stopping (tests change them)."""

    def __init__(self, **fake: Any) -> None:
        self.clock = Clock()
        self.timeline: list[tuple[str, ...]] = []
        self.cluster = FakeCluster(self.clock, self.timeline, **fake)
        self.store = Store(self.timeline)
        self.notified: list[str] = []
        self.leads = True
        self.mode = "act"
        self.history: Any = None
        """What the executor is given as Prometheus's record of the jobs' alerts (FaultHistory)."""
        self.stopping: Callable[[], bool] = lambda: False
        self.last: Executor | None = None
        self.cluster.admitted_pointer = lambda: status_pointer(
            {"remediations": list(self.store.records.values())}, self.clock()
        )

    def executor(self, owner: str = "") -> Executor:
        saver = self.store.saver()
        self.last = Executor(
            self.cluster,
            saver,
            lambda m: TOKEN if (m.namespace, m.name) == ("ml", "llama-pretrain") else "wrong",
            read=saver.read,
            key=lambda: KEY,
            leader=lambda: self.leads,
            mode=lambda: self.mode,
            stopping=lambda: self.stopping(),  # noqa: PLW0108 - read at each call: a test swaps it mid-run
            owner=owner,
            clock=self.clock,
            sleep=self.clock.sleep,
            notify=lambda record, message: self.notified.append(message),
            history=self.history,
        )
        return self.last

    def run(
        self, record: dict[str, Any], monitor: TrainingJobMonitor, *, signed: bool = True
    ) -> dict[str, Any]:
        """The record as the planner wrote it (signed, unless not `signed`) carried out by a new executor."""
        self.store.monitor = monitor
        self.store.put(sign(record, monitor) if signed else record)
        return self.executor().run(record, monitor)


def status_pointer(status: Mapping[str, Any] | None, now: float) -> str | None:
    """The pointer the operator's webhook gives a pod created now, from the monitor's status."""
    restart = restart_of({"status": status or {}}, now)
    return restart.pointer if restart is not None else None


def sign(record: dict[str, Any], monitor: TrainingJobMonitor) -> dict[str, Any]:
    """The record with the operator's signature (under KEY) for `monitor`."""
    return records.sign(record, KEY, monitor.namespace, monitor.name, monitor.metadata.uid or "")


def step_done(kind: str) -> Callable[[dict[str, Any]], bool]:
    """Whether a saved record has its `kind` step Succeeded (for Store.when)."""
    return lambda record: any(s["kind"] == kind and s["phase"] == Phase.SUCCEEDED for s in record["steps"])


def kinds_and_phases(record: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["kind"], s["phase"]) for s in record["steps"]]


def loop_rig(
    leader: bool = True,
    mode: str = "act",
    *,
    kube: FakeKube | None = None,
    clock: Clock | None = None,
    urgency: Urgency | None = None,
) -> tuple[RemediationLoop, FakeKube, FakeCluster]:
    """The P0 loop as the operator wires it, on the Kubernetes edge's fake holding the test monitor
    (workload the Job llama-pretrain) and on FakeCluster, `leader` or a standby. Given `kube` (and
    `clock`), a new loop on the same API: the operator restarted."""
    clock = clock or Clock()
    timeline: list[tuple[str, ...]] = []
    cluster = FakeCluster(clock, timeline)
    body = copy.deepcopy(MONITOR)
    body["metadata"]["uid"] = "u-1"
    body["spec"]["workloadRef"] = {"kind": "Job", "name": "llama-pretrain"}
    body["spec"]["remediation"] = {"emergencyCheckpointTimeout": "30s"}
    kube = kube or FakeKube(body)
    cluster.admitted_pointer = lambda: status_pointer(
        (kube.get_monitor("ml", "llama-pretrain") or {}).get("status"), clock()
    )
    locks: dict[tuple[str, str], threading.RLock] = {}

    def executor(c: Any, save: Any, token_for: Any, **kw: Any) -> Executor:
        return Executor(c, save, lambda monitor: TOKEN, clock=clock, sleep=clock.sleep, **kw)

    responder = RemediationLoop(
        kube,
        kube,
        cluster,
        key=lambda: KEY,
        leader=lambda: leader,
        mode=lambda: mode,
        lock=lambda ns, name: locks.setdefault((ns, name), threading.RLock()),
        clock=clock,
        executor_factory=executor,
        urgency=urgency,
    )
    return responder, kube, cluster
