"""The P0 loop's periodic passes on the leader, each a small object with `run() -> int` (how many things
it did), reading the watch caches: resume the records a killed operator left unfinished, plan the
signals it answered 200 for and never decided, detect the faults no exporter reports, escalate unacknowledged P1s, and announce the nodes trainguard holds
cordoned. controller/run.py runs them on a thread of their own (controller/periodic.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainguard.api import PolicyProblem, TrainingJobMonitor, monitor_of, policies_for
from trainguard.api.common import LabelSelector
from trainguard.catalog.severity import GRADE
from trainguard.clients import alertmanager
from trainguard.kube.errors import NotSynced, Stale
from trainguard.kube.objects import Hearing
from trainguard.remediation import detect, escalation, maintenance, notices, pending, records
from trainguard.remediation.dispatch import Dispatcher
from trainguard.remediation.intake import Intake
from trainguard.remediation.model import Signal
from trainguard.remediation.plan import record_id as plan_id
from trainguard.remediation.store import records_of
from trainguard.render.policy import effective_policy

log = logging.getLogger("trainguard.remediation")

Obj = dict[str, Any]


class MonitorReads(Protocol):
    def monitors(self) -> list[Obj]: ...


class FleetReads(MonitorReads, Protocol):
    """What the detection pass reads (kube.ClusterCache)."""

    def pods(self, namespace: str, selector: LabelSelector) -> list[Obj]: ...

    def job(self, namespace: str, name: str) -> Obj | None: ...

    def nodes(self) -> list[Obj]: ...

    def node_leases(self) -> list[Obj]:
        """Raises kube.errors.Stale when the Leases may be old (see kube.ClusterCache.node_leases)."""
        ...

    def node_hearing(self) -> Hearing:
        """How the node and Lease caches hear the API (see kube.ClusterCache.node_hearing)."""
        ...


class PolicyReads(MonitorReads, Protocol):
    def policy(self, namespace: str, name: str) -> Obj | None: ...


class CordonHistory(Protocol):
    """ClusterOps.cordon_history: (node, when) of the cordons trainguard's annotations still show."""

    def cordon_history(self) -> list[tuple[str, float]]: ...


def valid_monitors(reads: MonitorReads) -> list[tuple[Obj, TrainingJobMonitor]]:
    return [(body, m) for body in reads.monitors() if (m := monitor_of(body)) is not None]


@dataclass
class ResumePass:
    """Start every unfinished record (a killed operator's, or an old leader's): each step is idempotent.
    The cache's copy only says which records to look at: the executor reads each again from the API,
    claims it, and leaves it alone when it finished or another executor holds it. The finished records
    are remembered as finished (Dispatcher.saw_finished): one put back unfinished later is a replay."""

    reads: MonitorReads
    dispatcher: Dispatcher
    leader: Callable[[], bool]

    def run(self) -> int:
        if not self.leader():
            return 0
        started = 0
        for body, monitor in valid_monitors(self.reads):
            for record in records_of(body):
                if records.is_finished(record):
                    self.dispatcher.saw_finished(record, monitor)
                    continue
                if self.dispatcher.running(record["id"]):
                    continue
                if self.dispatcher.dispatch(record, monitor, body):  # read again before it runs
                    log.info(
                        "resuming remediation %s of %s/%s", record["id"], monitor.namespace, monitor.name
                    )
                    started += 1
        return started


PENDING_GRACE_S = 10.0
"""How old a pending signal is before the pass plans it: the planner that answered 200 decides it within
a second; one still pending after this was left by a killed operator, a lost leadership or an error."""
PENDING_RETRY_S = 60.0
"""How long the pass waits before it hands the same pending signal to the planner again."""


@dataclass
class PendingPass:
    """Hand the planner the pending signals (remediation/pending.py) no planner decided, oldest first
    across the monitors: an operator killed between the 200 and the plan still acts on the fault. Each
    goes through the planning queue, so the cordon cap is still decided one signal at a time; the
    planner reads the monitor again and removes the entry as it decides it."""

    reads: MonitorReads
    intake: Intake
    leader: Callable[[], bool]
    clock: Callable[[], float] = time.time
    grace_s: float = PENDING_GRACE_S
    retry_s: float = PENDING_RETRY_S
    _handed: dict[str, float] = field(default_factory=dict)

    def run(self) -> int:
        if not self.leader():
            return 0
        now = self.clock()
        entries = [e for body, _ in valid_monitors(self.reads) for e in pending.pending_of(body)]
        self._handed = {k: t for k, t in self._handed.items() if now - t < self.retry_s}
        due = [s for s in pending.due(entries, now, self.grace_s) if plan_id(s) not in self._handed]
        for s in due:
            self._handed[plan_id(s)] = now
            log.info("planning %s for %s/%s, pending since an earlier replica or try answered 200",
                     s.alertname, s.namespace, s.training_job)  # fmt: skip
        self.intake.replay(due)
        return len(due)


@dataclass
class NodeWatch:
    """The operator's own sightings of every node's state across passes (detect.sight), on its own
    monotonic clock: what makes node down a matter of how long the operator has seen a Lease unchanged or
    Ready not True, never of a kubelet's clock. A look while the node and Lease caches are not hearing
    the API forgets every sighting, and a look after a break in what they heard (an error, a relist, a
    dropped watch, a Lease cache quiet for detect.HEARING_S, passes too far apart) starts them again: a
    state the operator could not have heard change does not count as unchanged, so an apiserver outage
    flags no node, and the grace starts anew once the caches hear again."""

    clock: Callable[[], float] = time.monotonic
    sightings: dict[str, detect.NodeSighting] = field(default_factory=dict)
    _hearing: Hearing | None = None
    _at: float | None = None

    def look(
        self, nodes: list[Obj], leases: list[Obj], hearing: Hearing | None, wall: float
    ) -> tuple[dict[str, detect.NodeSighting], float]:
        """The sightings after this look, and the monotonic time of the look. `hearing` None: the caches
        could not be read (Stale, NotSynced)."""
        now = self.clock()
        if hearing is None or not detect.hearing(hearing):
            self.forget()
            return {}, now
        gap = now - self._at if self._at is not None else float("inf")
        previous = self.sightings if detect.continuous(self._hearing, hearing, gap) else {}
        self.sightings = detect.sight(previous, nodes, leases, since=now, seen=wall)
        self._hearing, self._at = hearing, now
        return self.sightings, now

    def forget(self) -> None:
        self.sightings, self._hearing, self._at = {}, None, None


@dataclass
class WatchPass:
    """The faults no exporter reports because it died with them: pods OOMKilled, failed or evicted, the
    job's Job failed, and its nodes down (their Lease unchanged, or Ready not True, for long enough as
    the operator has watched them: `nodes`); and its nodes going into planned maintenance (a person's
    cordon or drain, a trainguard.io/maintenance-at annotation: remediation/maintenance.py). Detected each pass from the objects' own state (the same
    fault gives the same signal every pass), posted to Alertmanager so they are routed and inhibited like
    every other alert, and planned like them."""

    reads: FleetReads
    intake: Intake
    leader: Callable[[], bool]
    alertmanager_url: str | None = None
    clock: Callable[[], float] = time.time
    settings: detect.NodeDownSettings = field(default_factory=detect.NodeDownSettings)
    nodes: NodeWatch = field(default_factory=NodeWatch)
    severity_style: str = GRADE
    """The platform's severity style (catalog/severity.py) the faults are posted in."""
    cordons: dict[str, float] = field(default_factory=dict)
    """When this replica first saw each node cordoned by a person (maintenance.sighted): dates its
    maintenance signal the same on every pass."""
    _bad: set[tuple[str, str]] = field(default_factory=set)

    def run(self) -> int:
        if not self.leader():
            self.nodes.forget()  # a replica that leads again has not been watching meanwhile
            return 0
        now = self.clock()
        sightings, since = self._look(now)
        found: list[Signal] = []
        nodes: dict[str, Obj] | None = None
        every = {_name(n): n for n in self._maintenance(now)}
        for body, monitor in valid_monitors(self.reads):
            pods = self.reads.pods(monitor.namespace, monitor.spec.selector)
            ref = monitor.spec.workload_ref
            jobs = []
            if ref is not None and ref.kind == "Job":
                job = self.reads.job(monitor.namespace, ref.name)
                jobs = [job] if job is not None else []
            found += detect.interruptions(pods, jobs, monitor, now, records_of(body))
            # each judge is given the nodes the job's pods are on, not all of them: it looks at no other,
            # and 2,000 monitors over 1,000 nodes each second were half the operator's CPU
            hosts = {str((p.get("spec") or {}).get("nodeName") or "") for p in pods}
            if pods and sightings:
                if nodes is None:
                    nodes = {_name(n): n for n in self.reads.nodes()}
                found += detect.node_faults(
                    _on(nodes, hosts), pods, monitor, sightings, since=since, now=now, settings=self.settings
                )
            if pods and every:
                found += maintenance.signals(_on(every, hosts), pods, monitor, now, self.cordons)
        if found and self.alertmanager_url:
            try:
                alertmanager.post_alerts(
                    self.alertmanager_url, found, clock=self.clock, severity_style=self.severity_style
                )
            except alertmanager.AlertmanagerError as exc:
                log.warning("cannot post %d detected fault(s) to Alertmanager: %s", len(found), exc)
        self.intake.submit(found)
        return len(found)

    def _maintenance(self, now: float) -> list[Obj]:
        """The nodes, with this pass's cordon sightings kept; each unreadable maintenance annotation is
        logged once per value, naming the annotation and the format."""
        try:
            every = self.reads.nodes()
        except (Stale, NotSynced):
            return []
        self.cordons = maintenance.sighted(self.cordons, every, now)
        for problem in maintenance.problems(every):
            if (problem.node, problem.value) not in self._bad:
                self._bad.add((problem.node, problem.value))
                log.warning("%s", problem.message)
        return every

    def _look(self, now: float) -> tuple[dict[str, detect.NodeSighting], float]:
        """This pass's sightings of the nodes, taken every pass (jobs or not) so that they are continuous."""
        try:
            hearing: Hearing | None = self.reads.node_hearing()
            nodes, leases = self.reads.nodes(), self.reads.node_leases()
        except (Stale, NotSynced) as exc:  # a lost watch, or one that cannot list (RBAC on kube-node-lease)
            log.warning("%s: no node is judged down this pass, and the grace starts again", exc)
            hearing, nodes, leases = None, [], []
        return self.nodes.look(nodes, leases, hearing, now)


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _on(nodes: dict[str, Obj], hosts: set[str]) -> list[Obj]:
    """The nodes named in `hosts`, in name order."""
    return [nodes[h] for h in sorted(hosts) if h in nodes]


@dataclass
class EscalationPass:
    """The operator's escalation: a P1 that Alertmanager still shows active, neither silenced
    (acknowledged) nor inhibited, after the policy's delay is re-posted as a P0 with
    escalated_from="P1"; copies whose P1 ended or was acknowledged are resolved. Returns how many copies
    were posted. A monitor whose policies are missing or invalid is left alone: its status says why."""

    reads: PolicyReads
    leader: Callable[[], bool]
    alertmanager_url: str | None
    clock: Callable[[], float] = time.time
    severity_style: str = GRADE
    """The platform's severity style (catalog/severity.py) the copies are posted in."""

    def run(self) -> int:
        if not self.alertmanager_url or not self.leader():
            return 0
        now = self.clock()
        posted = 0
        for _, monitor in valid_monitors(self.reads):
            try:
                policies = policies_for(monitor, self.reads.policy)
            except PolicyProblem:
                continue
            settings = escalation.settings(effective_policy(monitor, policies).escalation)
            ns, job = monitor.namespace, monitor.name
            _, alerts = alertmanager.raw_alerts(self.alertmanager_url, {"namespace": ns, "training_job": job})
            due = (
                escalation.due(alerts, settings, now, namespace=ns, training_job=job)
                if settings.enabled
                else []
            )
            out = [escalation.escalated(a, settings, now, severity_style=self.severity_style) for a in due]
            out += escalation.ended(alerts, settings, now, namespace=ns, training_job=job)
            if out:
                alertmanager.post_alerts(
                    self.alertmanager_url, out, clock=self.clock, severity_style=self.severity_style
                )
                posted += len(due)
                for a in due:
                    log.info("escalated %s of %s/%s to P0: unacknowledged for %ss", a["labels"].get("alertname"),
                             ns, job, int(settings.after_s))  # fmt: skip
        return posted


@dataclass
class CordonNoticePass:
    """Post (refresh) TrainguardNodeCordoned for every node this operator's records cordoned and its
    annotations still show cordoned: the fault's own alert may never have paged
    (remediation/notices.py). Returns how many were posted."""

    reads: MonitorReads
    cluster: CordonHistory
    leader: Callable[[], bool]
    alertmanager_url: str | None
    clock: Callable[[], float] = time.time
    severity_style: str = GRADE
    """The platform's severity style (catalog/severity.py) the notices are posted in."""

    def run(self) -> int:
        if not self.alertmanager_url or not self.leader():
            return 0
        cordoned = dict(self.cluster.cordon_history())
        if not cordoned:
            return 0
        monitors = [
            (str(b["metadata"]["namespace"]), str(b["metadata"]["name"]), records_of(b))
            for b in self.reads.monitors()
        ]
        posted = notices.cordon_notices(monitors, cordoned, self.clock())
        return alertmanager.post_alerts(
            self.alertmanager_url, posted, clock=self.clock, severity_style=self.severity_style
        )
