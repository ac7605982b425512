"""kopf handlers. Registered on a registry passed in, so importing this module changes nothing.

No handler here needs a finalizer: kopf adds one for timers and for non-optional deletion handlers,
and a finalizer left behind by an uninstalled operator blocks the deletion of monitors and of their
namespaces. Periodic work is in controller.periodic; a deleted policy arrives as a watch event.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import kopf

from trainguard.api import GROUP, VERSION, InvalidInput, parse_spec
from trainguard.catalog.severity import GRADE
from trainguard.controller.events import RECENT_EVENTS, RecentEvents
from trainguard.controller.eviction import EvictionGate, answer_eviction
from trainguard.controller.in_place import InPlace, inputs_of, settings_key
from trainguard.controller.metrics import OperatorMetrics, reconcile_result
from trainguard.controller.ready_generations import ReadyGenerations
from trainguard.controller.reconcile import (
    PODS_WITHOUT_EXPORTER,
    NamespaceTerminating,
    PolicyRead,
    ReceiverSettings,
    ReconcileReads,
    Rehearsal,
    ResyncReads,
    cached_policy,
    reconcile_monitor,
    utcnow,
)
from trainguard.controller.reconciles_begun import ReconcilesBegun
from trainguard.controller.status import Outcome, monitor_status, status_changes
from trainguard.kube import Kube, namespace_terminating
from trainguard.remediation.urgency import Urgency
from trainguard.render.shared import PER_MONITOR

log = logging.getLogger("trainguard.handlers")

MONITORS = (GROUP, VERSION, "trainingjobmonitors")
POLICIES = (GROUP, VERSION, "alertpolicies")
ADMISSION_CACHE_WAIT = 1.0
"""How long the eviction gate waits for a starting replica's caches before it lets the eviction go."""


class MonitorLocks:
    """One lock per monitor: its handler, the policy handler and the periodic resync run on different
    threads and would otherwise render and apply the same monitor at once. Weakly held, so the locks
    of deleted monitors go away with their last user."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: weakref.WeakValueDictionary[tuple[str, str], threading.Lock] = (
            weakref.WeakValueDictionary()
        )

    def __call__(self, namespace: str, name: str) -> threading.Lock:
        with self._guard:
            lock = self._locks.get((namespace, name))
            if lock is None:
                lock = threading.Lock()
                self._locks[(namespace, name)] = lock
            return lock

    def held(self, namespace: str, name: str) -> bool:
        """Whether someone holds the monitor's lock now (a reconcile in flight), making no lock for it."""
        with self._guard:
            lock = self._locks.get((namespace, name))
        return lock is not None and lock.locked()

    def __len__(self) -> int:
        return len(self._locks)


LOCKS = MonitorLocks()


def announcer(kube: Kube, body: Mapping[str, Any], recent: RecentEvents = RECENT_EVENTS) -> Any:
    """Post Kubernetes Events about the object, each said once within `recent`'s window; a failed post is
    logged, never raised."""
    uid = str((body.get("metadata") or {}).get("uid") or "")

    def post(reason: str, message: str) -> None:
        if not recent.first(uid, reason, message):
            return
        try:
            warning = reason.endswith(("Failed", "Unresolved")) or reason == PODS_WITHOUT_EXPORTER
            kube.post_event(dict(body), reason, message, "Warning" if warning else "Normal")
        except Exception as exc:
            recent.forget(uid, reason, message)
            # refused in a namespace being deleted: expected, and nothing to report
            if not namespace_terminating(exc):
                log.exception("could not post the %s Event", reason)

    return post


@dataclass(frozen=True)
class MonitorSettings:
    """The operator's settings that every reconcile and resync of a monitor is given, fixed at startup:
    one object, so that the kopf handlers, the resync and the reconcile it falls back to cannot drift
    apart (the resync once rendered in another rule form than the reconcile). The receiver is not here:
    a certificate rotation replaces it, so each call is given the current one."""

    metrics: OperatorMetrics | None = None
    label_namespace: Callable[[str], str] | None = None
    """NamespaceLabels.ensure: labels the monitor's namespace for the webhook (reconcile_monitor)."""
    severity_style: str = GRADE
    object_labels: Mapping[str, str] | None = None
    rule_form: str = PER_MONITOR
    urgency: Urgency | None = None
    """The fast path's hold: a reconcile or resync waits on it before it starts (remediation/urgency.py)."""
    begun: ReconcilesBegun | None = None
    """Which monitors' reconciles began: the resync and a policy event leave a new monitor whose own
    handler has not begun its first reconcile to it (controller/reconciles_begun.py). None: every
    monitor is taken as reconciled."""
    ready: ReadyGenerations | None = None
    """The uid and generation each monitor was last reconciled to Ready at: kopf's create handler called
    again for one already done does nothing (controller/ready_generations.py). None: it runs again."""


DEFAULT_SETTINGS = MonitorSettings()


def reconcile(
    kube: Kube,
    reads: ReconcileReads,
    namespace: str,
    name: str,
    *,
    receiver: ReceiverSettings | None = None,
    settings: MonitorSettings = DEFAULT_SETTINGS,
    unless_ready_at: tuple[str, Any] | None = None,
) -> None:
    """`unless_ready_at` (uid, generation): nothing is done where this process's last reconcile of the
    monitor ended Ready at them (kopf's create handler called again; see ready_generations.py)."""
    metrics = settings.metrics
    if settings.urgency is not None:  # before the lock: the fast path takes the monitor's lock too
        settings.urgency.wait()
    with LOCKS(namespace, name):
        if settings.begun is not None:  # before anything is read: see reconciles_begun.py
            settings.begun.began(namespace, name)
        if (  # under the lock: a repeat that waited on the first reconcile sees how it ended
            unless_ready_at is not None
            and settings.ready is not None
            and settings.ready.holds(namespace, name, *unless_ready_at)
        ):
            log.debug(
                "%s/%s: created again at a generation reconciled to Ready: nothing to do", namespace, name
            )
            if metrics is not None:
                metrics.reconciled(None, 0.0, "repeated")
            return
        fresh = kube.get_monitor(namespace, name)
        if fresh is None:
            return
        # read under the lock, so the status it starts from is current
        started, status, result = time.monotonic(), None, None
        try:
            status = reconcile_monitor(kube, reads, fresh, announce=announcer(kube, fresh), receiver=receiver,
                                       label_namespace=settings.label_namespace,
                                       severity_style=settings.severity_style,
                                       object_labels=settings.object_labels, rule_form=settings.rule_form)  # fmt: skip
        except NamespaceTerminating as exc:
            log.info("%s: nothing more is applied", exc)
            result = "skipped"
        finally:
            if settings.ready is not None:
                settings.ready.reconciled(fresh, result is None and reconcile_result(status) == "success")
            if metrics is not None:  # a reconcile that raised leaves status None: an error
                metrics.reconciled(status, time.monotonic() - started, result)


def resync(
    kube: Kube,
    reads: ResyncReads,
    body: dict[str, Any],
    *,
    receiver: ReceiverSettings | None = None,
    settings: MonitorSettings = DEFAULT_SETTINGS,
    in_place: InPlace | None = None,
) -> bool:
    """One monitor of the periodic resync, decided from the watch caches: the monitor as its cache holds
    it, its policies from theirs, its objects compared with the owned objects' cache (Kube.unchanged).
    When everything is in place and the status says so, it makes no request at all; otherwise the
    reconcile (the monitor read by name, under its lock) applies what differs. Returns whether it did.
    With `in_place`, a monitor found in place from the same inputs by a recent pass is not rendered
    again (controller/in_place.py). The metrics count each pass over a monitor as a resync by outcome,
    not as a reconcile: only the one that writes is (by the reconcile it calls)."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "?")
    if settings.urgency is not None:
        settings.urgency.wait()
    if settings.begun is not None and settings.begun.awaits_handler(namespace, name, body):
        if settings.metrics is not None:
            settings.metrics.resynced("left_to_reconcile")
        return False
    if LOCKS.held(namespace, name):  # a reconcile is writing it now: the caches cannot show that yet
        if settings.metrics is not None:
            settings.metrics.resynced("reconciling")
        return False
    key = (namespace, name)
    context = settings_key(receiver, settings.severity_style, settings.object_labels, settings.rule_form)
    if in_place is not None and in_place.still(
        key, inputs_of(body, reads, kube, in_place.compared(key), context)
    ):
        if settings.metrics is not None:
            settings.metrics.resynced("in_place")
        return False
    rehearsal = _rehearse(kube, reads, body, cached_policy(reads, kube), receiver=receiver, settings=settings)
    if not rehearsal.writes:
        for secret in rehearsal.secrets:  # due to be written again, the same content
            kube.apply(secret)
        if in_place is not None:
            in_place.found(key, inputs_of(body, reads, kube, rehearsal.compared, context), rehearsal.compared)
        if settings.metrics is not None:
            settings.metrics.resynced("rendered")
        return False
    if settings.metrics is not None:
        settings.metrics.resynced("written")
    if in_place is not None:
        in_place.forget(key)
    status = (
        f" (status: {', '.join(status_changes(body.get('status'), rehearsal.status))})"
        if rehearsal.status is not None
        else ""
    )
    log.info("%s/%s: the resync finds %s to write%s", namespace, name, ", ".join(rehearsal.writes), status)
    reconcile(kube, reads, namespace, name, receiver=receiver, settings=settings)
    return True


def _rehearse(
    kube: Kube,
    reads: ResyncReads,
    body: dict[str, Any],
    policy: PolicyRead,
    *,
    receiver: ReceiverSettings | None,
    settings: MonitorSettings,
) -> Rehearsal:
    """The reconcile of `body` played against the caches with `policy` as its policies' reader: what it
    would write is in the result's `writes`, and nothing is written."""
    rehearsal = Rehearsal(kube, policy)
    reconcile_monitor(rehearsal, reads, body, receiver=receiver, label_namespace=settings.label_namespace,
                      severity_style=settings.severity_style, object_labels=settings.object_labels,
                      rule_form=settings.rule_form)  # fmt: skip
    return rehearsal


class PolicyUserReads(ResyncReads, Protocol):
    """The caches policy_users reads: a resync's, and the monitors (kube.ClusterCache)."""

    def monitor(self, namespace: str, name: str) -> dict[str, Any] | None: ...


def policy_users(
    kube: Kube,
    reads: PolicyUserReads,
    policy: Mapping[str, Any],
    users: list[str],
    *,
    receiver: ReceiverSettings | None = None,
    settings: MonitorSettings = DEFAULT_SETTINGS,
) -> list[str]:
    """The monitors that name a policy just created, changed or resumed: each rehearsed from the caches
    with the event's policy in place of its cached copy (which may not have heard of it yet), and
    reconciled only where that finds something to write. Returns those reconciled. A policy applied
    in the same burst as its monitors (kubectl apply of both, or an operator's restart, which resumes
    every policy and every monitor) is mostly in their objects already: a reconcile of each user for
    each policy event doubled the work at 2,000 monitors. A monitor that awaits its own handler's first
    reconcile (settings.begun) is left to it: that reads the policy by name. Else a monitor not in its
    cache yet is reconciled."""
    meta = policy.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    cached = cached_policy(reads, kube)

    def read(ns: str, policy_name: str) -> dict[str, Any] | None:
        return dict(policy) if (ns, policy_name) == (namespace, name) else cached(ns, policy_name)

    reconciled = []
    for user in users:
        if settings.urgency is not None:
            settings.urgency.wait()
        body = reads.monitor(namespace, user)
        if settings.begun is not None and settings.begun.awaits_handler(namespace, user, body):
            continue
        if body is not None:
            try:
                rehearsal = _rehearse(kube, reads, body, read, receiver=receiver, settings=settings)
            except NamespaceTerminating:
                continue
            if not rehearsal.writes:
                continue
        reconcile(kube, reads, namespace, user, receiver=receiver, settings=settings)
        reconciled.append(user)
    return reconciled


MONITOR_HANDLER, POLICY_HANDLER = "monitor", "policy"
CHANGE_HANDLERS = (MONITOR_HANDLER, POLICY_HANDLER)
"""kopf's ids of the handlers that run on a change of a monitor or a policy: each writes the object's
`status.observedGeneration`, which is kopf's record that the change was handled (controller/diffbase.py)."""


def register(registry: kopf.OperatorRegistry) -> None:
    """Attach every handler of the operator to `registry`. The memo carries `kube`, `reads` (the watch
    caches), `metrics`, `receiver` and `settings` (MonitorSettings; set at startup). The sidecar
    injection is no kopf handler: controller/injection.py answers it on the webhook server's loop."""

    def _settings(memo: Any) -> MonitorSettings:
        settings = memo.get("settings", DEFAULT_SETTINGS)
        if not isinstance(
            settings, MonitorSettings
        ):  # the memo is untyped: say so, not an AttributeError later
            raise TypeError(f"memo['settings'] is a {type(settings).__name__}, not MonitorSettings")
        return settings

    def _reconcile(
        memo: Any, namespace: str, name: str, unless_ready_at: tuple[str, Any] | None = None
    ) -> None:
        reconcile(
            memo["kube"],
            memo["reads"],
            namespace,
            name,
            receiver=memo.get("receiver"),
            settings=_settings(memo),
            unless_ready_at=unless_ready_at,
        )

    # ---- indices: what other handlers look up without an API call ----

    @kopf.index(*MONITORS, id="monitors_by_policy", registry=registry)
    def monitors_by_policy(*, namespace: str | None, name: str, spec: kopf.Spec, **_: Any) -> dict[Any, Any]:
        return {(namespace, ref.get("name")): name for ref in spec.get("policyRefs", []) or []}

    # ---- monitors ----

    @kopf.on.resume(*MONITORS, id=MONITOR_HANDLER, registry=registry)
    @kopf.on.create(*MONITORS, id=MONITOR_HANDLER, registry=registry)
    @kopf.on.update(*MONITORS, id=MONITOR_HANDLER, registry=registry)
    def monitor_changed(
        *,
        namespace: str | None,
        name: str,
        memo: Any,
        reason: str,
        uid: str | None,
        body: kopf.Body,
        **_: Any,
    ) -> None:
        # a creation kopf hands over again (its own mark not seen in time) is told by uid and generation
        repeat = (str(uid), body.metadata.get("generation")) if reason == kopf.Reason.CREATE and uid else None
        _reconcile(memo, namespace or "default", name, unless_ready_at=repeat)

    # ---- policies: every monitor that names a policy is re-rendered when it changes ----

    def users_of(namespace: str, name: str, index: kopf.Index[Any, str] | None) -> list[str]:
        return sorted(set(index.get((namespace, name), [])) if index else [])

    @kopf.on.resume(*POLICIES, id=POLICY_HANDLER, registry=registry)
    @kopf.on.create(*POLICIES, id=POLICY_HANDLER, registry=registry)
    @kopf.on.update(*POLICIES, id=POLICY_HANDLER, registry=registry)
    def policy_changed(
        *,
        namespace: str | None,
        name: str,
        body: kopf.Body,
        memo: Any,
        monitors_by_policy: kopf.Index[Any, str] | None = None,
        **_: Any,
    ) -> None:
        kube: Kube = memo["kube"]
        namespace = namespace or "default"
        users = users_of(namespace, name, monitors_by_policy)
        policy_users(
            kube, memo["reads"], _plain(body), users, receiver=memo.get("receiver"), settings=_settings(memo)
        )
        try:
            parse_spec(_plain(body), f"{namespace}/{name}")
            outcome = Outcome(
                generation=body.metadata.get("generation"), rules_applied=True, routes_applied=True
            )
        except InvalidInput as exc:
            outcome = Outcome(generation=body.metadata.get("generation"), error_reason="InvalidSpec",
                              error_message="; ".join(str(p) for p in exc.problems))  # fmt: skip
        status = monitor_status(body.get("status"), outcome, utcnow())
        status["conditions"] = [c for c in status["conditions"] if c["type"] in ("Ready", "Degraded")]
        status["monitors"] = len(users)
        written = _plain(body).get("status") or {}
        if any(written.get(k) != v for k, v in status.items()):  # a repeat of the event changes nothing
            kube.patch_status("alertpolicies", namespace, name, status)

    @kopf.on.event(*POLICIES, id="policy-deleted", registry=registry)
    def policy_deleted(
        *,
        type: str | None,
        namespace: str | None,
        name: str,
        memo: Any,
        monitors_by_policy: kopf.Index[Any, str] | None = None,
        **_: Any,
    ) -> None:
        """A raw watch event: it needs no finalizer, unlike a deletion handler."""
        if type != "DELETED":
            return
        namespace = namespace or "default"
        for monitor_name in users_of(namespace, name, monitors_by_policy):
            # Degraded: PolicyNotFound
            _reconcile(memo, namespace, monitor_name)

    # ---- the eviction gate of planned maintenance: every replica answers, from its caches ----

    gate = EvictionGate()

    @kopf.on.validate(
        "", "v1", "pods", subresource="eviction", id="hold-eviction", operations=["CREATE"], registry=registry
    )
    def hold_eviction(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        mode = str(memo.get("remediation_mode") or "act")
        verdict = answer_eviction(_plain(body), memo.get("reads"), gate, ADMISSION_CACHE_WAIT, mode)
        if not verdict.allowed:
            log.info("eviction of %s/%s held: %s", body.get("metadata", {}).get("namespace"),
                     body.get("metadata", {}).get("name"), verdict.message)  # fmt: skip
            raise kopf.AdmissionError(verdict.message, code=429)


def _plain(body: Mapping[str, Any]) -> dict[str, Any]:
    """kopf bodies are read-only views; the renderers take plain dicts."""
    return {k: _copy(v) for k, v in body.items()}


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(v) for v in value]
    return value
