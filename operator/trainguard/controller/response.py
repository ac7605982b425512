"""The P0 loop in the running operator: signals from the receiver go through one planning thread on
the leader (so the cluster-wide cordon cap is decided one signal at a time), each plan is written to
the monitor's status before anything is done, and an executor thread carries it out. At startup and
on every periodic pass, the leader resumes the records a killed operator left unfinished."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from trainguard.api import AlertPolicy, InvalidInput, TrainingJobMonitor, parse_object
from trainguard.controller.kube import Kube
from trainguard.remediation import alertmanager, detect, escalation, notices, paging, records, tokens
from trainguard.remediation.cluster import ClusterOps
from trainguard.remediation.executor import Executor
from trainguard.remediation.model import ClusterState, Signal
from trainguard.remediation.plan import plan, quiet
from trainguard.render.policy import effective_policy

log = logging.getLogger("trainguard.response")

Record = dict[str, Any]
WITHHELD = "TrainguardRemediationWithheld"
"""The notice a storm guard or budget posts instead of an action, so that a person acts."""


class Responder:
    def __init__(
        self,
        kube: Kube,
        cluster: ClusterOps,
        *,
        key: Callable[[], bytes | None],
        leader: Callable[[], bool],
        lock: Callable[[str, str], Any],
        clock: Callable[[], float] = time.time,
        workers: int = 4,
        executor_factory: Callable[..., Executor] = Executor,
        alertmanager_url: str | None = None,
        on_step: Callable[[str, str], None] = lambda kind, phase: None,
    ) -> None:
        self.kube = kube
        self.cluster = cluster
        self.key = key
        self.leader = leader
        self.lock = lock
        self.clock = clock
        self._queue: queue.Queue[Signal] = queue.Queue(maxsize=10_000)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="trainguard-remediation")
        self._running: set[str] = set()
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._executor_factory = executor_factory
        self.alertmanager_url = alertmanager_url
        """Alertmanager's API (the operator's own P0s and its notices go there); None: not posted."""
        self.on_step = on_step
        """Told (kind, phase) of each step that a saved record moved into a new phase (metrics)."""

    # ---- intake: called on the receiver's request threads; quick ----

    def submit(self, signals: list[Signal]) -> None:
        for s in signals:
            if s.firing:
                self._queue.put_nowait(s)
                if self.alertmanager_url and paging.page_alert(s, self.clock()) is not None:
                    # off the receiver's thread: a slow Alertmanager must not hold the sidecar's post
                    self._pool.submit(self.page, s)

    def page(self, signal: Signal) -> None:
        """Post a sidecar's P0 into Alertmanager at once, so people are paged within seconds of the
        fault rather than after a scrape and an evaluation (remediation/paging.py)."""
        alert = paging.page_alert(signal, self.clock())
        if alert is None or not self.alertmanager_url:
            return
        try:
            alertmanager.post_alerts(self.alertmanager_url, [alert], clock=self.clock)
        except alertmanager.AlertmanagerError as exc:
            log.warning("cannot page %s of %s/%s through Alertmanager (the rule's alert still will): %s",
                        signal.alertname, signal.namespace, signal.training_job, exc)  # fmt: skip

    # ---- planning: one thread ----

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name="trainguard-planner", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                signal = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                self.handle(signal)
            except Exception:
                log.exception(
                    "planning %s for %s/%s failed", signal.alertname, signal.namespace, signal.training_job
                )

    def handle(self, signal: Signal) -> Record | None:
        """Plan one signal and, when it acts, write its record and hand it to an executor thread."""
        if not self.leader():
            log.info("not the leader: %s for %s/%s left to the leader", signal.alertname, signal.namespace,
                     signal.training_job)  # fmt: skip
            return None
        ns, name = signal.namespace, signal.training_job
        with self.lock(ns, name):
            body = self.kube.get_monitor(ns, name)
            monitor = _monitor(body)
            if body is None or monitor is None:
                log.warning("%s for %s/%s: no valid TrainingJobMonitor of that name; nothing to do",
                            signal.alertname, ns, name)  # fmt: skip
                return None
            state = ClusterState(
                now=self.clock(),
                gpu_nodes=self.cluster.gpu_node_count(),
                cordons=tuple(self.cluster.cordon_history()),
                records=tuple(_records(body)),
                spares=tuple(self.cluster.spares()),
            )
            decided = plan(signal, monitor, state)
            if quiet(decided):
                log.info("%s for %s/%s: %s", signal.alertname, ns, name, decided.skipped)
                return None
            record = records.new_record(decided, self.clock())
            record = self._save(body, record)  # written before anything is done
        self._announce(body, "RemediationPlanned", _summary(record))
        self._dispatch(record, monitor, body)
        return record

    # ---- execution ----

    def _dispatch(self, record: Record, monitor: TrainingJobMonitor, body: dict[str, Any]) -> None:
        with self._guard:
            if record["id"] in self._running:
                return
            self._running.add(record["id"])

        ns, name = monitor.namespace, monitor.name

        def save(r: Record) -> Record:
            with self.lock(ns, name):
                fresh = self.kube.get_monitor(ns, name)
                if fresh is None:
                    raise RuntimeError(f"monitor {ns}/{name} is gone; remediation {r['id']} stops")
                return self._save(fresh, r)

        def notify(r: Record, message: str) -> None:
            self.notify({**r, "namespace": ns, "trainingJob": name}, message)

        executor = self._executor_factory(self.cluster, save, self._token, notify=notify)

        def work() -> None:
            try:
                done = executor.run(record, monitor)
                self._announce(body, f"Remediation{done.get('phase', '')}", _summary(done))
            except Exception:
                log.exception("remediation %s stopped; it resumes at the next pass", record["id"])
            finally:
                with self._guard:
                    self._running.discard(record["id"])

        self._pool.submit(work)

    def idle(self, timeout: float = 10.0) -> bool:
        """Wait until no record is being carried out (tests, and a graceful stop)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._guard:
                if not self._running:
                    return True
            time.sleep(0.01)
        return False

    def resume(self) -> int:
        """Start every unfinished record (a killed operator's): each step is idempotent. The leader's
        periodic pass calls this; returns how many were started."""
        if not self.leader():
            return 0
        started = 0
        for body in self.kube.list_monitors():
            monitor = _monitor(body)
            if monitor is None:
                continue
            for record in _records(body):
                if not records.is_finished(record) and record["id"] not in self._running:
                    log.info(
                        "resuming remediation %s of %s/%s", record["id"], monitor.namespace, monitor.name
                    )
                    self._dispatch(record, monitor, body)
                    started += 1
        return started

    def watch(self) -> int:
        """The faults no exporter reports because it died with them: pods OOMKilled, failed or evicted,
        the job's Job failed, and its nodes NotReady or with an expired Lease. Detected each pass on the
        leader from the objects' own state (the same fault gives the same signal every pass), posted to
        Alertmanager so they are routed and inhibited like every other alert, and planned like them."""
        if not self.leader():
            return 0
        now = self.clock()
        nodes = leases = None
        found: list[Signal] = []
        for body in self.kube.list_monitors():
            monitor = _monitor(body)
            if monitor is None:
                continue
            pods = self.kube.list_pods(monitor.namespace, monitor.spec.selector.to_selector_string())
            ref = monitor.spec.workload_ref
            jobs = []
            if ref is not None and ref.kind == "Job":
                job = self.kube.get_job(monitor.namespace, ref.name)
                jobs = [job] if job is not None else []
            found += detect.interruptions(pods, jobs, monitor, now)
            if pods:
                if nodes is None:
                    nodes, leases = self.kube.list_nodes(), self.kube.list_node_leases()
                found += detect.node_faults(nodes, leases or [], pods, monitor, now)
        if found and self.alertmanager_url:
            try:
                alertmanager.post_alerts(self.alertmanager_url, found, clock=self.clock)
            except alertmanager.AlertmanagerError as exc:
                log.warning("cannot post %d detected fault(s) to Alertmanager: %s", len(found), exc)
        self.submit(found)
        return len(found)

    def escalate(self) -> int:
        """The operator's escalation (it replaces the copied rules): a P1 that Alertmanager still shows
        active, neither silenced (acknowledged) nor inhibited, after the policy's delay is re-posted as
        a P0 with escalated_from="P1"; copies whose P1 ended or was acknowledged are resolved. Returns how
        many copies were posted. Needs --alertmanager-url."""
        if not self.alertmanager_url or not self.leader():
            return 0
        now = self.clock()
        posted = 0
        for body in self.kube.list_monitors():
            monitor = _monitor(body)
            if monitor is None:
                continue
            policies = []
            for ref in monitor.spec.policy_refs:
                raw = self.kube.get_policy(monitor.namespace, ref.name)
                parsed = _policy(raw)
                if parsed is None:
                    break
                policies.append(parsed)
            else:
                settings = escalation.settings(effective_policy(monitor, policies).escalation)
                where = {"namespace": monitor.namespace, "training_job": monitor.name}
                _, alerts = alertmanager.raw_alerts(self.alertmanager_url, where)
                ns, job = monitor.namespace, monitor.name
                due = (
                    escalation.due(alerts, settings, now, namespace=ns, training_job=job)
                    if settings.enabled
                    else []
                )
                out = [escalation.escalated(a, settings, now) for a in due]
                out += escalation.ended(alerts, settings, now, namespace=ns, training_job=job)
                if out:
                    alertmanager.post_alerts(self.alertmanager_url, out, clock=self.clock)
                    posted += len(due)
                    for a in due:
                        log.info("escalated %s of %s/%s to P0: unacknowledged for %ss", a["labels"].get("alertname"),
                                 monitor.namespace, monitor.name, int(settings.after_s))  # fmt: skip
        return posted

    def cordon_notices(self) -> int:
        """Post (refresh) TrainguardNodeCordoned for every node this operator's records cordoned and
        its annotations still show cordoned: the fault's own alert may never have paged (see
        remediation/notices.py). Returns how many were posted. Needs --alertmanager-url."""
        if not self.alertmanager_url or not self.leader():
            return 0
        cordoned = dict(self.cluster.cordon_history())
        if not cordoned:
            return 0
        monitors = [
            (str(b["metadata"]["namespace"]), str(b["metadata"]["name"]), _records(b))
            for b in self.kube.list_monitors()
        ]
        posted = notices.cordon_notices(monitors, cordoned, self.clock())
        return alertmanager.post_alerts(self.alertmanager_url, posted, clock=self.clock)

    def notify(self, record: Record, message: str) -> None:
        """A NOTIFY step: what trainguard did not do and why, as a P0 for the job's receivers."""
        if not self.alertmanager_url:
            log.warning(
                "no --alertmanager-url: the notice of %s is only in the record: %s", record.get("id"), message
            )
            return
        ns, name = record.get("namespace", ""), record.get("trainingJob", "")
        labels = {"alertname": WITHHELD, "severity": "P0", "namespace": ns, "training_job": name,
                  "remediation": str(record.get("id", ""))}  # fmt: skip
        if record.get("node"):
            labels["node"] = str(record["node"])
        alertmanager.post_alerts(
            self.alertmanager_url,
            [
                {
                    "labels": labels,
                    "annotations": {
                        "summary": f"trainguard withheld an action: {message}",
                        "description": f"{record.get('alert')}: {message}",
                    },
                }
            ],
        )

    def _token(self, namespace: str, name: str) -> str:
        key = self.key()
        if key is None:
            raise RuntimeError("no operator key: the sidecars' token cannot be derived")
        return tokens.derive(key, tokens.EVENTS, namespace, name)

    def _save(self, body: dict[str, Any], record: Record) -> Record:
        """The record in the monitor's status (under the monitor's lock, read fresh by the caller)."""
        meta = body["metadata"]
        before = next((r for r in _records(body) if r.get("id") == record.get("id")), None)
        updated = records.with_record(_records(body), record)
        self.kube.patch_status(
            "trainingjobmonitors", meta["namespace"], meta["name"], {"remediations": updated}
        )
        body.setdefault("status", {})["remediations"] = updated
        for kind, phase in step_changes(before, record):
            self.on_step(kind, phase)
        return record

    def _announce(self, body: dict[str, Any], reason: str, message: str) -> None:
        try:
            warning = reason.endswith(("Failed", "Skipped"))
            self.kube.post_event(body, reason, message, "Warning" if warning else "Normal")
        except Exception:
            log.exception("could not post the %s Event", reason)


def step_changes(before: Record | None, after: Record) -> list[tuple[str, str]]:
    """(kind, phase) of each step of `after` whose phase differs from the same step in `before` (every
    step of a new record): what the saved record moved on, once per move."""
    old = list((before or {}).get("steps") or [])
    changes = []
    for i, step in enumerate(after.get("steps") or []):
        previous = old[i] if i < len(old) and old[i].get("kind") == step.get("kind") else {}
        if step.get("phase") != previous.get("phase"):
            changes.append((str(step.get("kind")), str(step.get("phase"))))
    return changes


def _parsed(body: dict[str, Any] | None) -> TrainingJobMonitor | AlertPolicy | None:
    """The object's spec as a model (its status is the loop's own record, read raw), or None if invalid:
    its reconcile reports it as Degraded."""
    if body is None:
        return None
    try:
        return parse_object({k: v for k, v in body.items() if k != "status"})
    except InvalidInput:
        return None


def _monitor(body: dict[str, Any] | None) -> TrainingJobMonitor | None:
    parsed = _parsed(body)
    return parsed if isinstance(parsed, TrainingJobMonitor) else None


def _policy(body: dict[str, Any] | None) -> AlertPolicy | None:
    parsed = _parsed(body)
    return parsed if isinstance(parsed, AlertPolicy) else None


def _records(body: dict[str, Any]) -> list[Record]:
    return list((body.get("status") or {}).get("remediations") or [])


def _summary(record: Record) -> str:
    steps = ", ".join(f"{s.get('kind')}:{s.get('phase')}" for s in record.get("steps", []))
    where = f" on {record['node']}" if record.get("node") else ""
    return (
        f"{record.get('alert')}{where}: {record.get('phase')} [{steps}] {record.get('message') or ''}".strip()
    )
