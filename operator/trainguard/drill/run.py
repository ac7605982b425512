"""A drill's side effects, through injected ports and clocks: put remediation in dry run, inject the
faults (or post the synthetic alerts), watch for each stage, and clean up whatever happens.

Cleanup order matters. A live plan ignores dry-run records (remediation/plan.py: turning dry run off
acts on a fault still firing), so dry run is restored only after the drill's faults are cleared and
its synthetic alerts expired, and once the alerts they raised have resolved in Alertmanager (up to
`settle_s`). An alert still active after that is silenced by its exact labels for GUARD_SILENCE_S
(its re-post would otherwise reach the operator with dry run off and act on a fault that is not
there); those guard silences are the one thing a drill leaves behind, and the report names them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from trainguard.api import InvalidInput, TrainingJobMonitor, parse_spec
from trainguard.drill.results import Cleanup, Outcome, StageResult
from trainguard.drill.scenarios import (
    PodView,
    Scenario,
    Stage,
    Targets,
    applicable,
    choose_targets,
    expected_action,
    synthetic_alerts,
)
from trainguard.remediation.plan import response_class
from trainguard.times import rfc3339

GUARD_SILENCE_S = 600.0
SYNTHETIC_MARGIN_S = 300.0
"""Synthetic alerts end by themselves this long after the drill's wait and settle would have ended,
should the drill be killed before it expires them."""


class Cluster(Protocol):
    def monitor(self) -> dict[str, Any]: ...
    def patch_dry_run(self, value: bool | None) -> None:
        """Merge-patch spec.remediation.dryRun (None removes it)."""

    def pods(self, selector: str) -> list[PodView]: ...
    def cordoned(self) -> set[str]:
        """Names of the nodes that are unschedulable now."""


class Sidecars(Protocol):
    def injection_on(self, pod: PodView) -> bool: ...
    def inject(self, pod: PodView, body: dict[str, Any]) -> None: ...
    def clear(self, pod: PodView) -> None: ...
    def active(self, pod: PodView) -> dict[str, Any]: ...
    def step(self, pod: PodView) -> float | None: ...


class Alertmanager(Protocol):
    def alerts(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """Alertmanager's unresolved alerts (API v2 objects) of the job, muted ones included."""

    def post(self, alerts: list[dict[str, Any]]) -> None: ...
    def delivered(self) -> float:
        """Notifications delivered so far to receivers other than the operator's (a counter)."""

    def silence(self, labels: dict[str, str], ends: float, comment: str) -> str: ...


@dataclass(frozen=True)
class Clock:
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep


@dataclass(frozen=True)
class Options:
    scenario: Scenario
    namespace: str
    name: str
    target_s: float = 30.0
    resume_target_s: float = 300.0
    timeout_s: float = 180.0
    settle_s: float = 90.0
    allow_actions: bool = False
    poll_s: float = 0.5
    drill_id: str = "drill"


@dataclass(frozen=True)
class Plan:
    """What a drill will do, decided before it touches anything (all that --dry-run prints)."""

    monitor: TrainingJobMonitor
    dry_run_before: bool | None
    """spec.remediation.dryRun as stored (None: unset)."""
    targets: Targets
    action: str | None
    stages: dict[Stage, str]

    def lines(self, o: Options) -> list[str]:
        s, t = o.scenario, self.targets
        out = [f"scenario {s.name}: {s.summary}"]
        if t.synthetic:
            out.append(f"synthetic alerts posted to Alertmanager ({t.why}): {', '.join(s.alerts)}")
        else:
            faults = ", ".join(f.kind + ("" if f.gpu is None else f" (GPU {f.gpu})") for f in s.faults)
            also = f" (it may raise {', '.join(s.may_raise)} too)" if s.may_raise else ""
            out.append(f"inject {faults} through {t.why}; expect {', '.join(s.alerts)}{also}")
        if o.allow_actions:
            out.append(
                "remediation acts for real (--allow-actions): nodes may be cordoned and the job restarted"
            )
        elif self.dry_run_before is True:
            out.append("remediation already in dry run (spec.remediation.dryRun: true): left as it is")
        else:
            before = "unset" if self.dry_run_before is None else str(self.dry_run_before).lower()
            out.append(f"set spec.remediation.dryRun: true for the drill, then restore it ({before})")
        out.append(f"expected action: {self.action or 'none'}")
        out.extend(f"measure {stage}: {what}" for stage, what in self.stages.items())
        out.append(f"target {o.target_s:g}s (resumed {o.resume_target_s:g}s); wait up to {o.timeout_s:g}s")
        return out


def make_plan(o: Options, cluster: Cluster, sidecars: Sidecars) -> Plan:
    """Read the monitor and its pods (nothing is changed) and decide where the scenario goes."""
    body = cluster.monitor()
    try:
        monitor = parse_spec(body, "the apiserver")
    except InvalidInput as exc:
        raise ValueError(f"the monitor {o.namespace}/{o.name} is invalid: {exc}") from None
    if not isinstance(monitor, TrainingJobMonitor):
        raise ValueError(f"{o.namespace}/{o.name} is not a TrainingJobMonitor")
    raw = ((body.get("spec") or {}).get("remediation") or {}).get("dryRun")
    pods = [
        replace(p, injectable=bool(p.port) and not o.scenario.synthetic_why and sidecars.injection_on(p))
        for p in cluster.pods(monitor.spec.selector.to_selector_string())
    ]
    targets = choose_targets(o.scenario, pods)
    if o.allow_actions and targets.synthetic:
        raise ValueError(
            f"--allow-actions cannot drill {o.scenario.name}: its alerts are synthetic ({targets.why}), and the "
            f"operator acts on a claim only once the cluster confirms it (a GPUNodeDown for a node its cache "
            f"shows not Ready), so nothing would be done. Drill it in dry run (without --allow-actions), or drill "
            f"a real remediation with a fault the sidecars see: --scenario multi-node --allow-actions"
        )
    action = expected_action(o.scenario.alerts, monitor.spec.remediation)
    return Plan(monitor, raw if isinstance(raw, bool) else None, targets, action,
                applicable(o.scenario, action, o.allow_actions))  # fmt: skip


def _records(body: dict[str, Any]) -> list[dict[str, Any]]:
    return list((body.get("status") or {}).get("remediations") or [])


@dataclass
class Drill:
    o: Options
    cluster: Cluster
    sidecars: Sidecars
    am: Alertmanager
    clock: Clock = field(default_factory=Clock)
    log: Callable[[str], None] = lambda _: None

    t0: float = 0.0
    injected: list[PodView] = field(default_factory=list)
    posted: list[dict[str, Any]] = field(default_factory=list)
    seen: dict[Stage, float] = field(default_factory=dict)
    notes: dict[Stage, str] = field(default_factory=dict)
    cleanup: Cleanup = field(default_factory=Cleanup)

    def _say(self, message: str) -> None:
        at = f"+{self.clock.monotonic() - self.t0:.1f}s " if self.t0 else ""
        self.log(f"drill {at}{message}")

    def run(self, plan: Plan) -> Outcome:
        o, s = self.o, self.o.scenario
        job = o.name
        before_alerts = {str(a.get("fingerprint")) for a in self.am.alerts(o.namespace, job)}
        before_records = {str(r.get("id")) for r in _records(self.cluster.monitor())}
        before_cordoned = self.cluster.cordoned()
        before_pods = {p.name for p in plan.targets.pods} | {
            p.name for p in self.cluster.pods(plan.monitor.spec.selector.to_selector_string())
        }
        sets_dry = not o.allow_actions and plan.dry_run_before is not True
        cleanup = self.cleanup
        outcome = Outcome(
            s.name, f"{o.namespace}/{o.name}", "synthetic alerts" if plan.targets.synthetic else "sidecar injection",
            plan.targets.why, not o.allow_actions or plan.dry_run_before is True, o.target_s, [], cleanup,
        )  # fmt: skip
        try:
            if sets_dry:
                self.cluster.patch_dry_run(True)
                self._say("set spec.remediation.dryRun: true for the drill")
            delivered0 = self.am.delivered()
            self.t0 = self.clock.monotonic()
            self._start(plan)
            self._watch(plan, before_alerts, before_records, before_pods, delivered0)
        except KeyboardInterrupt:
            outcome.interrupted = True
            self._say("interrupted: cleaning up")
        except Exception as exc:
            outcome.error = f"{type(exc).__name__}: {exc}"
            self._say(f"failed ({outcome.error}): cleaning up")
        finally:
            self._cleanup(plan, cleanup, before_alerts, sets_dry)
        outcome.cordoned = sorted(self.cluster.cordoned() - before_cordoned)
        outcome.stages = self._results(plan)
        return outcome

    def _start(self, plan: Plan) -> None:
        o, s = self.o, self.o.scenario
        if plan.targets.synthetic:
            now = self.clock.wall()
            ends = now + o.timeout_s + o.settle_s + SYNTHETIC_MARGIN_S
            alerts = synthetic_alerts(s, plan.targets, namespace=o.namespace, job=o.name, drill_id=o.drill_id,
                                      starts=rfc3339(now), ends=rfc3339(ends))  # fmt: skip
            self.am.post(alerts)
            self.posted = alerts
            self._say(f"posted {len(alerts)} synthetic alert(s) to Alertmanager: {', '.join(s.alerts)}")
            return
        for pod in plan.targets.pods:
            self.injected.append(pod)  # before the call: a fault half-injected is cleared too
            for f in s.faults:
                self.sidecars.inject(pod, f.body())
            self._say(f"injected {', '.join(f.kind for f in s.faults)} into {pod.name} on {pod.node}")

    def _mark(self, stage: Stage, note: str = "") -> None:
        if stage not in self.seen:
            self.seen[stage] = self.clock.monotonic() - self.t0
            self.notes[stage] = note
            self._say(f"{stage}: {note}" if note else str(stage))

    def _watch(
        self, plan: Plan, before_alerts: set[str], before_records: set[str], before_pods: set[str],
        delivered0: float,
    ) -> None:  # fmt: skip
        o, s = self.o, self.o.scenario
        wanted = set(plan.stages)
        first_alert: float | None = None
        names: set[str] = set()
        released: dict[str, float | None] | None = None
        new_steps: dict[str, float] = {}
        deadline = self.t0 + o.timeout_s
        while wanted - set(self.seen) and self.clock.monotonic() < deadline:
            fresh = [
                a
                for a in self.am.alerts(o.namespace, o.name)
                if str(a.get("fingerprint")) not in before_alerts
            ]
            names |= {str((a.get("labels") or {}).get("alertname")) for a in fresh} & set(s.alerts)
            if names and first_alert is None:
                first_alert = self.clock.monotonic()
            if names >= set(s.alerts):
                posted = " (posted by the drill: detection is not measured)" if plan.targets.synthetic else ""
                self._mark(Stage.ALERT, ", ".join(s.alerts) + " active in Alertmanager" + posted)
            if first_alert is not None and Stage.NOTIFICATION not in self.seen:
                delivered = self.am.delivered()
                if delivered > delivered0:
                    self._mark(Stage.NOTIFICATION, f"{delivered - delivered0:g} delivered")
            if Stage.ACTION in wanted and Stage.ACTION not in self.seen:
                for r in _records(self.cluster.monitor()):
                    if str(r.get("id")) not in before_records and r.get("alert") in s.acted_on:
                        steps = "+".join(str(x.get("kind")) for x in r.get("steps") or [])
                        dry = " dry run" if r.get("dryRun") else ""
                        self._mark(Stage.ACTION, f"{r.get('alert')}: {steps}{dry} ({r.get('phase')})")
                        break
            if Stage.RESUMED in wanted and Stage.RESUMED not in self.seen:
                if s.stops_training:
                    done = {Stage.ALERT, Stage.ACTION} & wanted <= set(self.seen)
                    if released is None and (done or self.clock.monotonic() > self.t0 + o.timeout_s / 2):
                        self._clear_faults()
                        released = {p.name: self.sidecars.step(p) for p in plan.targets.pods}
                        self._say("cleared the fault: waiting for training to resume")
                    elif released is not None:
                        for p in plan.targets.pods:
                            step, was = self.sidecars.step(p), released.get(p.name)
                            if step is not None and (was is None or step > was):
                                self._mark(Stage.RESUMED, f"{p.name} at step {step:g}")
                                break
                else:  # the operator restarts the job: a new pod's step advances
                    for p in self.cluster.pods(plan.monitor.spec.selector.to_selector_string()):
                        if p.name in before_pods or not p.port:
                            continue
                        step = self.sidecars.step(p)
                        if step is not None and p.name in new_steps and step > new_steps[p.name]:
                            self._mark(Stage.RESUMED, f"new pod {p.name} at step {step:g}")
                            break
                        if step is not None:
                            new_steps.setdefault(p.name, step)
            self.clock.sleep(o.poll_s)
        for stage in sorted(wanted - set(self.seen)):
            self._say(f"{stage}: not observed within {o.timeout_s:g}s")

    def _results(self, plan: Plan) -> list[StageResult]:
        out = []
        for stage in Stage:
            target = self.o.resume_target_s if stage == Stage.RESUMED else self.o.target_s
            applies = stage in plan.stages
            note = self.notes.get(stage, "") if applies else "not expected in this drill"
            if applies and stage not in self.seen:
                note = f"not observed within {self.o.timeout_s:g}s"
            out.append(StageResult(stage, applies, self.seen.get(stage), target, note))
        return out

    # ---- cleanup ----

    def _clear_faults(self) -> None:
        cleanup = self.cleanup
        for pod in list(self.injected):
            try:
                self.sidecars.clear(pod)
                left = self.sidecars.active(pod)
                if left:
                    cleanup.problems.append(f"faults still active on {pod.name}: {left}")
                else:
                    cleanup.cleared.append(pod.name)
                    self.injected.remove(pod)
            except (Exception, KeyboardInterrupt) as exc:
                cleanup.problems.append(f"could not clear the faults on {pod.name}: {exc}")

    def _cleanup(self, plan: Plan, cleanup: Cleanup, before_alerts: set[str], sets_dry: bool) -> None:
        o = self.o
        self._clear_faults()
        if self.posted:
            try:
                now = rfc3339(self.clock.wall())
                self.am.post([a | {"endsAt": now} for a in self.posted])
                cleanup.expired = len(self.posted)
            except (Exception, KeyboardInterrupt) as exc:
                cleanup.problems.append(f"could not expire the synthetic alerts: {exc}")
        if cleanup.cleared or cleanup.expired:
            self._say(
                f"cleared {len(cleanup.cleared)} sidecar(s), expired {cleanup.expired} synthetic alert(s)"
            )
        if not sets_dry:
            return
        before = "unset" if plan.dry_run_before is None else str(plan.dry_run_before).lower()
        try:
            residue = self._settle(before_alerts)
            for a in residue:
                labels = {str(k): str(v) for k, v in (a.get("labels") or {}).items()}
                comment = (f"trainguard drill {o.drill_id}: {labels.get('alertname')} was still active when dry run "
                           "was restored; muted so that its re-post does not act on a fault that is not there")  # fmt: skip
                cleanup.guard_silences.append(
                    self.am.silence(labels, self.clock.wall() + GUARD_SILENCE_S, comment)
                )
            if residue:
                self._say(
                    f"{len(residue)} drill alert(s) still active: guard silence(s) for {GUARD_SILENCE_S:g}s"
                )
        except (Exception, KeyboardInterrupt) as exc:
            # restoring now could act on a drill alert still firing: leave dry run on and say so
            cleanup.dry_run = "left true"
            cleanup.problems.append(
                f"spec.remediation.dryRun left true: the drill's alerts could not be settled or silenced ({exc}); "
                f"once they have resolved: kubectl -n {o.namespace} patch trainingjobmonitor {o.name} --type merge "
                f'-p \'{{"spec":{{"remediation":{{"dryRun":{"null" if plan.dry_run_before is None else before}}}}}}}\''
            )
            self._say(cleanup.problems[-1])
            return
        try:
            self.cluster.patch_dry_run(plan.dry_run_before)
            stored = ((self.cluster.monitor().get("spec") or {}).get("remediation") or {}).get("dryRun")
            # unset reads back as the schema's default (false) where the CRD defaults it
            if stored != plan.dry_run_before and not (plan.dry_run_before is None and stored is False):
                cleanup.problems.append(
                    f"spec.remediation.dryRun is {stored}, not {before} as before the drill"
                )
            cleanup.dry_run = f"restored ({before})"
            self._say(f"restored spec.remediation.dryRun ({before})")
        except (Exception, KeyboardInterrupt) as exc:
            cleanup.problems.append(
                f"could not restore spec.remediation.dryRun ({before}): {exc}; restore it by hand"
            )

    def _settle(self, before_alerts: set[str]) -> list[dict[str, Any]]:
        """Wait up to settle_s (or a Ctrl-C) for the alerts the drill raised that the operator may act on
        to resolve; return those still active."""
        o = self.o
        deadline = self.clock.monotonic() + o.settle_s
        while True:
            residue = [
                a for a in self.am.alerts(o.namespace, o.name)
                if str(a.get("fingerprint")) not in before_alerts
                and response_class(str((a.get("labels") or {}).get("alertname"))) is not None
            ]  # fmt: skip
            if not residue or self.clock.monotonic() >= deadline:
                return residue
            try:
                self.clock.sleep(min(1.0, max(o.poll_s, 0.01)))
            except KeyboardInterrupt:  # impatience ends the wait; what still fires is silenced all the same
                self._say("settle cut short: silencing what still fires")
                return residue
