"""The drill's side effects in order, with fakes for the apiserver, the sidecars and Alertmanager (the
e2e test, e2e/test_drill.py, runs the same code against the real ones) and a fake clock."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.conftest import MONITOR
from trainguard.drill.run import Clock, Drill, Options, make_plan
from trainguard.drill.scenarios import SCENARIOS, PodView, Stage


@dataclass
class World:
    """One fake installation: what each fake sees, and the order things happened in."""

    t: float = 0.0
    events: list[tuple[float, str]] = field(default_factory=list)
    faults: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    dry_run: bool | None = False
    records: list[dict[str, Any]] = field(default_factory=list)
    am_alerts: list[dict[str, Any]] = field(default_factory=list)
    delivered: float = 10.0
    cordoned: set[str] = field(default_factory=set)
    steps: dict[str, float] = field(default_factory=dict)

    def note(self, what: str) -> None:
        self.events.append((self.t, what))

    def kinds(self) -> list[str]:
        return [e for _, e in self.events]


class FakeCluster:
    def __init__(self, w: World, pods: list[PodView]) -> None:
        self.w, self._pods = w, pods

    def monitor(self) -> dict[str, Any]:
        body = copy.deepcopy(MONITOR)
        body["spec"]["remediation"] = {} if self.w.dry_run is None else {"dryRun": self.w.dry_run}
        body["status"] = {"remediations": copy.deepcopy(self.w.records)}
        return body

    def patch_dry_run(self, value: bool | None) -> None:
        self.w.dry_run = value
        self.w.note(f"dryRun={value}")

    def pods(self, selector: str) -> list[PodView]:
        assert selector == "app=llama-pretrain"
        return list(self._pods)

    def cordoned(self) -> set[str]:
        return set(self.w.cordoned)


class FakeSidecars:
    def __init__(self, w: World, injectable: set[str]) -> None:
        self.w, self.injectable = w, injectable

    def injection_on(self, pod: PodView) -> bool:
        return pod.name in self.injectable

    def inject(self, pod: PodView, body: dict[str, Any]) -> None:
        self.w.faults.setdefault(pod.name, {})[body["fault"]] = [body.get("gpu", -1)]
        self.w.note(f"inject {body['fault']} {pod.name}")

    def clear(self, pod: PodView) -> None:
        self.w.faults.pop(pod.name, None)
        self.w.note(f"clear {pod.name}")

    def active(self, pod: PodView) -> dict[str, Any]:
        return dict(self.w.faults.get(pod.name, {}))

    def step(self, pod: PodView) -> float | None:
        return self.w.steps.get(pod.name)


class FakeAlertmanager:
    def __init__(self, w: World) -> None:
        self.w = w
        self.posted: list[list[dict[str, Any]]] = []
        self.silences: list[dict[str, str]] = []

    def alerts(self, namespace: str, job: str) -> list[dict[str, Any]]:
        assert (namespace, job) == ("ml", "llama-pretrain")
        return list(self.w.am_alerts)

    def post(self, alerts: list[dict[str, Any]]) -> None:
        self.posted.append(alerts)
        self.w.note(f"post {len(alerts)}")

    def delivered(self) -> float:
        return self.w.delivered

    def silence(self, labels: dict[str, str], ends: float, comment: str) -> str:
        self.silences.append(labels)
        self.w.note(f"silence {labels['alertname']}")
        return f"s{len(self.silences)}"


def pods() -> list[PodView]:
    return [PodView("llama-0", "node-a", "10.0.0.1", 9400), PodView("llama-1", "node-b", "10.0.0.2", 9400)]


def alert(name: str, fp: str) -> dict[str, Any]:
    return {
        "labels": {"alertname": name, "namespace": "ml", "training_job": "llama-pretrain"},
        "fingerprint": fp,
    }


def drill(
    w: World, name: str, step: Any, injectable: set[str] | None = None, **opts: Any
) -> tuple[Drill, FakeAlertmanager]:
    """A drill whose clock advances on every sleep, calling `step(world)` each time (the installation
    reacting)."""

    def sleep(s: float) -> None:
        w.t += s
        step(w)

    cluster = FakeCluster(w, pods())
    am = FakeAlertmanager(w)
    o = Options(SCENARIOS[name], "ml", "llama-pretrain", timeout_s=opts.pop("timeout_s", 60.0),
                settle_s=opts.pop("settle_s", 30.0), poll_s=0.5, drill_id="d1", **opts)  # fmt: skip
    sidecars = FakeSidecars(w, {"llama-0", "llama-1"} if injectable is None else injectable)
    d = Drill(o, cluster, sidecars, am, Clock(lambda: w.t, lambda: 1_700_000_000 + w.t, sleep))
    return d, am


def nan_installation(resolve_after_clear_s: float) -> Any:
    """Prometheus fires 2 s after the fault, the operator records 1 s later, a page goes out at 4 s; the
    alert resolves `resolve_after_clear_s` after the fault is cleared."""
    state: dict[str, float] = {}

    def step(w: World) -> None:
        if w.faults.get("llama-0") and "start" not in state:
            state["start"] = next(t for t, e in w.events if e.startswith("inject"))
        if "start" in state and not w.faults.get("llama-0") and "cleared" not in state:
            state["cleared"] = w.t
        start = state.get("start")
        if start is None:
            return
        firing = "cleared" not in state or w.t < state["cleared"] + resolve_after_clear_s
        w.am_alerts = [alert("TrainingLossNonFinite", "f1")] if w.t >= start + 2 and firing else []
        if w.t >= start + 3 and not w.records:
            w.records.append({"id": "r1", "alert": "TrainingLossNonFinite", "dryRun": w.dry_run, "phase": "DryRun",
                              "steps": [{"kind": "PauseTraining"}]})  # fmt: skip
        if w.t >= start + 4:
            w.delivered = 12.0

    return step


def test_nan_is_timed_and_dry_run_is_restored_only_after_the_alert_resolved() -> None:
    w = World(am_alerts=[alert("GPUMemoryHigh", "old")])
    d, _ = drill(w, "nan", nan_installation(resolve_after_clear_s=5.0))
    plan = make_plan(d.o, d.cluster, d.sidecars)
    assert plan.action == "PauseAndPinCheckpoint" and not plan.targets.synthetic
    o = d.run(plan)
    times = {s.stage: s.seconds for s in o.stages}
    assert times[Stage.ALERT] == 2.0 and times[Stage.ACTION] == 3.0 and times[Stage.NOTIFICATION] == 4.0
    assert times[Stage.RESUMED] is None and o.passed, o.problems
    assert w.records[0]["dryRun"] is True, "the operator saw dry run on while the fault was on"
    assert w.kinds()[:2] == ["dryRun=True", "inject nan-loss llama-0"]
    (cleared,) = [t for t, e in w.events if e == "clear llama-0"]
    (restored,) = [t for t, e in w.events if e == "dryRun=False"]
    assert restored >= cleared + 5.0, "dry run stays on until the drill's alert resolved"
    assert w.dry_run is False and not w.faults and o.cleanup.cleared == ["llama-0"]
    assert not o.cleanup.guard_silences


def test_an_alert_still_firing_after_the_settle_is_silenced_before_dry_run_is_restored() -> None:
    w = World()
    d, am = drill(w, "nan", nan_installation(resolve_after_clear_s=1000.0), settle_s=3.0)
    o = d.run(make_plan(d.o, d.cluster, d.sidecars))
    assert o.passed and o.cleanup.guard_silences == ["s1"]
    assert am.silences[0]["alertname"] == "TrainingLossNonFinite"
    assert w.kinds().index("silence TrainingLossNonFinite") < w.kinds().index("dryRun=False")


def test_a_synthetic_node_down_is_posted_then_expired_and_nothing_is_cordoned() -> None:
    def step(w: World) -> None:
        if w.t >= 1:
            w.am_alerts = [alert("GPUNodeDown", "n1")] if len(am.posted) == 1 else []
        if w.t >= 1.5 and not w.records:
            w.records.append(
                {"id": "r1", "alert": "GPUNodeDown", "dryRun": True, "phase": "DryRun", "steps": []}
            )
        if w.t >= 6:
            w.delivered = 11

    w = World()
    d, am = drill(w, "node-down", step)
    o = d.run(make_plan(d.o, d.cluster, d.sidecars))
    assert o.mode == "synthetic alerts" and o.passed, o.problems
    assert [s.seconds for s in o.stages] == [1.0, 6.0, 1.5, None]
    assert "detection is not measured" in o.stages[0].note, "a posted alert says what its time means"
    (firing, expired) = am.posted
    assert firing[0]["labels"]["node"] == "node-a" and firing[0]["labels"]["trainguard_drill"] == "d1"
    assert expired[0]["endsAt"] < firing[0]["endsAt"]
    assert w.kinds()[-1] == "dryRun=False" and o.cordoned == []


def test_a_node_cordoned_in_dry_run_fails_the_drill() -> None:
    def step(w: World) -> None:
        w.am_alerts = [alert("GPUNodeDown", "n1")]
        w.cordoned = {"node-a"}

    w = World()
    d, _ = drill(w, "node-down", step, timeout_s=2.0)
    o = d.run(make_plan(d.o, d.cluster, d.sidecars))
    assert o.cordoned == ["node-a"] and not o.passed


def test_ctrl_c_while_waiting_still_clears_the_faults_and_restores_dry_run() -> None:
    def step(w: World) -> None:
        if w.t >= 1:
            raise KeyboardInterrupt

    w = World(dry_run=None)
    d, _ = drill(w, "nan", step)
    o = d.run(make_plan(d.o, d.cluster, d.sidecars))
    assert o.interrupted and not o.passed
    assert not w.faults and w.dry_run is None and w.kinds()[-1] == "dryRun=None"


def test_a_failing_injection_still_clears_what_it_may_have_set() -> None:
    w = World()
    d, _ = drill(w, "nan", lambda w: None)
    plan = make_plan(d.o, d.cluster, d.sidecars)

    def broken(pod: PodView, body: dict[str, Any]) -> None:
        w.faults["llama-0"] = {"nan-loss": [-1]}
        raise RuntimeError("HTTP 503")

    d.sidecars.inject = broken  # type: ignore[method-assign]
    o = d.run(plan)
    assert "RuntimeError: HTTP 503" in o.error and not o.passed
    assert not w.faults and w.dry_run is False


def test_with_allow_actions_dry_run_is_left_alone() -> None:
    w = World()
    d, _ = drill(w, "oom", lambda w: None, timeout_s=1.0, allow_actions=True)
    o = d.run(make_plan(d.o, d.cluster, d.sidecars))
    assert not any(e.startswith("dryRun") for e in w.kinds()) and not o.dry_run
    assert o.cleanup.dry_run == "unchanged"


def test_a_stall_is_released_after_its_alert_and_resumed_training_is_timed() -> None:
    def step(w: World) -> None:
        stalled = all(w.faults.get(p) for p in ("llama-0", "llama-1"))
        if stalled and w.t >= 3:
            w.am_alerts = [alert("TrainingJobStalled", "s1")]
            w.delivered = 11
        if not stalled and w.am_alerts:
            w.steps = {"llama-0": w.steps.get("llama-0", 100) + 5, "llama-1": 100}
            w.am_alerts = []

    w = World(steps={"llama-0": 100, "llama-1": 100})
    d, _ = drill(w, "stall", step)
    o = d.run(make_plan(d.o, d.cluster, d.sidecars))
    got = {s.stage: s for s in o.stages}
    assert got[Stage.ALERT].seconds == 3.0 and not got[Stage.ACTION].applies
    assert got[Stage.RESUMED].seconds is not None and got[Stage.RESUMED].seconds > 3.0
    assert o.passed, o.problems


def test_a_ctrl_c_while_settling_still_silences_what_fires_before_dry_run_is_restored() -> None:
    w = World()
    d, _ = drill(w, "nan", nan_installation(resolve_after_clear_s=1000.0), settle_s=30.0)
    plan = make_plan(d.o, d.cluster, d.sidecars)
    inner = d.clock.sleep

    def sleep(s: float) -> None:
        inner(s)
        if any(e == "clear llama-0" for e in w.kinds()):
            raise KeyboardInterrupt

    d.clock = Clock(d.clock.monotonic, d.clock.wall, sleep)
    o = d.run(plan)
    assert o.cleanup.guard_silences == ["s1"] and w.dry_run is False
    assert w.kinds().index("silence TrainingLossNonFinite") < w.kinds().index("dryRun=False")


def test_when_a_still_firing_alert_cannot_be_silenced_dry_run_stays_on_and_the_fix_is_printed() -> None:
    w = World()
    d, am = drill(w, "nan", nan_installation(resolve_after_clear_s=1000.0), settle_s=2.0)

    def refuse(labels: dict[str, str], ends: float, comment: str) -> str:
        raise OSError("connection refused")

    am.silence = refuse  # type: ignore[method-assign]
    o = d.run(make_plan(d.o, d.cluster, d.sidecars))
    assert w.dry_run is True and o.cleanup.dry_run == "left true" and not o.passed
    (problem,) = o.cleanup.problems
    assert "kubectl -n ml patch trainingjobmonitor llama-pretrain --type merge" in problem
    assert """-p '{"spec":{"remediation":{"dryRun":false}}}'""" in problem


@pytest.mark.parametrize("name", ["node-down", "partition"])
def test_acting_on_a_synthetic_alert_is_refused_before_anything_is_posted(name: str) -> None:
    """The operator acts on a GPUNodeDown only for a node its cache shows not Ready: a synthetic one would be
    refused, and the drill would time out saying nothing useful. It says why, and what to drill instead."""
    d, am = drill(World(), name, lambda w: None, allow_actions=True)
    with pytest.raises(ValueError, match=r"--allow-actions cannot drill .*multi-node --allow-actions"):
        make_plan(d.o, d.cluster, d.sidecars)
    assert am.posted == []


def test_slow_gpu_times_the_operators_record_whichever_of_the_gpus_alerts_it_was_made_for() -> None:
    """hw-slowdown raises GPUClocksThrottled and, where the job has enough busy GPUs, GPUClockBelowPeers;
    the planner records the slow node once, for whichever came first: here the symptom, at 4 s."""

    def step(w: World) -> None:
        slowed = "hw-slowdown" in w.faults.get("llama-0", {})
        if slowed and w.t >= 2:
            w.am_alerts = [alert("GPUClockBelowPeers", "b1")]
        if slowed and w.t >= 3:
            w.am_alerts = [alert("GPUClockBelowPeers", "b1"), alert("GPUClocksThrottled", "t1")]
        if slowed and w.t >= 4 and not w.records:
            w.records.append({"id": "r1", "alert": "GPUClockBelowPeers", "dryRun": w.dry_run, "phase": "DryRun",
                              "steps": [{"kind": "ConfirmFault"}, {"kind": "AwaitCheckpoint"}, {"kind": "Cordon"}]})  # fmt: skip
        if slowed and w.t >= 5:
            w.delivered = 11
        if not slowed:
            w.am_alerts = []

    w = World()
    d, _ = drill(w, "slow-gpu", step)
    plan = make_plan(d.o, d.cluster, d.sidecars)
    assert plan.action == "ReplaceAtCheckpoint" and not plan.targets.synthetic
    lines = "\n".join(plan.lines(d.o))
    assert "inject hw-slowdown (GPU 0) through sidecar llama-0 (node-a); expect GPUClocksThrottled" in lines
    assert "GPUClockBelowPeers too" in lines
    o = d.run(plan)
    got = {s.stage: s for s in o.stages}
    assert got[Stage.ALERT].seconds == 3.0, "the required alert, not the first one"
    assert got[Stage.ACTION].seconds == 4.0 and got[Stage.NOTIFICATION].seconds == 5.0
    assert (
        got[Stage.ACTION].note == "GPUClockBelowPeers: ConfirmFault+AwaitCheckpoint+Cordon dry run (DryRun)"
    )
    assert not got[Stage.RESUMED].applies and o.passed, o.problems
    assert w.kinds()[:2] == ["dryRun=True", "inject hw-slowdown llama-0"]
    assert w.faults == {} and w.dry_run is False and w.kinds()[-1] == "dryRun=False", "cleared, restored"


def test_a_record_of_another_alert_of_the_job_is_not_the_slow_gpus_action() -> None:
    def step(w: World) -> None:
        if "hw-slowdown" in w.faults.get("llama-0", {}):
            w.am_alerts = [alert("GPUClocksThrottled", "t1")]
            if not w.records:
                w.records.append({"id": "r1", "alert": "TrainingLossNonFinite", "dryRun": True, "steps": []})
        else:
            w.am_alerts = []

    d, _ = drill(World(), "slow-gpu", step, timeout_s=5.0)
    o = d.run(make_plan(d.o, d.cluster, d.sidecars))
    got = {s.stage: s for s in o.stages}
    assert got[Stage.ALERT].seconds is not None and got[Stage.ACTION].seconds is None and not o.passed
