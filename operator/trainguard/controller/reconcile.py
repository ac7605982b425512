"""One reconcile of a monitor: render what it should own, apply what changed, report status.

Never raises for a bad object: problems end in the Degraded condition with a message that says
what to fix. A workloadRef that does not resolve (a kind the cluster does not serve, one run elsewhere)
is Degraded with reason WorkloadUnresolved, naming the field, while Ready stays True: the rules and
routes work, and the P0 response turns a restart into a notice. One whose object does not exist yet is
not Degraded: WorkloadResolved says so (WorkloadNotFound), as a monitor applied before its job waits. An apply the API refuses (a 422, an admission webhook or policy, a 403) is Degraded with
reason ApplyFailed, naming the object and the API's message; a transient failure (5xx, 429, no answer)
is reported the same way and raised, so kopf retries with backoff.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from trainguard.api import InvalidInput, PolicyProblem, TrainingJobMonitor, parse_object, policies_for
from trainguard.api.common import LabelSelector
from trainguard.api.monitor import WorkloadRef
from trainguard.catalog.severity import GRADE
from trainguard.controller.status import (
    NAMESPACE_LABEL_FAILED,
    WORKLOAD_NOT_FOUND,
    WORKLOAD_RESOLVED,
    WORKLOAD_UNRESOLVED,
    Outcome,
    monitor_status,
)
from trainguard.kube import (
    ApiError,
    MissingAPI,
    NotSynced,
    api_status,
    content_hash,
    namespace_terminating,
    transient,
    with_hash,
)
from trainguard.kube.objects import is_terminating, labels_of
from trainguard.kube.workloads import Workload
from trainguard.remediation import tokens
from trainguard.render.kubernetes import (
    emptied_receiver_secret,
    fastpath_secret,
    fastpath_secret_name,
    monitor_objects,
    operator_receiver,
    receiver_secret_name,
    with_labels,
)
from trainguard.render.policy import effective_policy
from trainguard.render.shared import PER_MONITOR, rules_status
from trainguard.render.sidecar import carries_exporter

log = logging.getLogger("trainguard.reconcile")


def utcnow() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _no_announce(reason: str, message: str) -> None:
    return None


PolicyRead = Callable[[str, str], dict[str, Any] | None]


Obj = dict[str, Any]


class ReconcileAPI(Protocol):
    """kube.Kube's calls a reconcile makes."""

    def get_policy(self, namespace: str, name: str) -> Obj | None: ...

    def apply(self, obj: Obj) -> bool | None: ...

    def create_if_absent(self, obj: Obj) -> bool: ...

    def patch_status(self, plural: str, namespace: str, name: str, status: Obj) -> None: ...


class ResyncAPI(ReconcileAPI, Protocol):
    def unchanged(self, obj: Obj) -> bool:
        """Whether an apply of `obj` would write nothing, asked of the watch cache (kube.Kube.unchanged)."""
        ...

    def live_version(self, obj: Obj) -> str | None:
        """The owned object's resourceVersion in the watch cache (kube.Kube.live_version)."""
        ...


class Rehearsal:
    """A ReconcileAPI that writes nothing: it answers an apply from `kube.unchanged` and records what a
    reconcile would write (`writes`), so the resync can tell from the watch caches alone that a monitor
    is in place. Policies are read from `policy` (the policy cache). Namespace labels are not its
    business: the reconcile's `label_namespace` writes them itself, reading its cache first. A Secret due
    to be written again (Kube.secret_rewrite_s) is kept apart in `secrets`: a blind write, which needs
    no fresh read of the monitor."""

    def __init__(self, kube: ResyncAPI, policy: PolicyRead) -> None:
        self.kube = kube
        self.policy = policy
        self.writes: list[str] = []
        self.secrets: list[Obj] = []
        self.compared: list[Obj] = []
        """Every object an apply was asked for, as rendered (in_place.InPlace keeps them)."""
        self.status: Obj | None = None
        """The status the reconcile would patch: the resync names the fields it changes."""

    def get_policy(self, namespace: str, name: str) -> Obj | None:
        return self.policy(namespace, name)

    def apply(self, obj: Obj) -> bool | None:
        """Always "unchanged" to the reconcile, which then neither logs nor announces an apply it did not
        make; what differs is in `writes` (or `secrets`)."""
        self.compared.append(obj)
        if self.kube.unchanged(obj):
            return False
        if obj["kind"] == "Secret":
            self.secrets.append(obj)
        else:
            self.writes.append(
                f"apply {obj['kind']} {obj['metadata'].get('namespace')}/{obj['metadata']['name']}"
            )
        return False

    def create_if_absent(self, obj: Obj) -> bool:
        self.writes.append(
            f"create {obj['kind']} {obj['metadata'].get('namespace')}/{obj['metadata']['name']}"
        )
        return False

    def patch_status(self, plural: str, namespace: str, name: str, status: Obj) -> None:
        self.writes.append(f"status {plural} {namespace}/{name}")
        self.status = status


class ReconcileReads(Protocol):
    """The watch caches a reconcile reads (kube.ClusterCache)."""

    def nodes(self) -> list[Obj]: ...

    def pods(self, namespace: str, selector: LabelSelector) -> list[Obj]: ...

    def workload(self, namespace: str, ref: WorkloadRef, selector: LabelSelector) -> Workload: ...


class ResyncReads(ReconcileReads, Protocol):
    """The watch caches the resync reads besides a reconcile's: the policies (kube.ClusterCache)."""

    def policy(self, namespace: str, name: str) -> Obj | None: ...


def cached_policy(reads: ResyncReads, kube: ReconcileAPI) -> PolicyRead:
    """A policy from the policy cache; from the API only while that cache has not listed. A policy the
    cache does not hold yet makes the rehearsal differ from the status, and the reconcile that follows
    reads it by name."""

    def read(namespace: str, name: str) -> Obj | None:
        try:
            return reads.policy(namespace, name)
        except NotSynced:
            return kube.get_policy(namespace, name)

    return read


def workload_problem(reads: ReconcileReads, monitor: TrainingJobMonitor) -> tuple[str, bool] | None:
    """Why the monitor's workloadRef does not resolve ("" when it does or there is none), and whether only
    because the object does not exist (yet); None when the caches cannot tell now (not listed yet, the
    API unreachable): the conditions are left as they were."""
    ref = monitor.spec.workload_ref
    if ref is None:
        return "", False
    try:
        found = reads.workload(monitor.namespace, ref, monitor.spec.selector)
    except (NotSynced, ApiError) as exc:
        log.warning("%s/%s: the workload %s %s cannot be read now: %s", monitor.namespace, monitor.name,
                    ref.kind, ref.name, exc)  # fmt: skip
        return None
    return found.problem, found.missing


def recorded_problem(body: dict[str, Any]) -> tuple[str, bool] | None:
    """The workload problem the monitor's status holds, as `workload_problem` gives it ("" when it holds
    none): from WorkloadResolved, or, written by an operator before that condition, from Degraded
    (None when Degraded for another reason, which is said first and hid the workload's)."""
    conditions = (body.get("status") or {}).get("conditions") or []
    for c in conditions:
        if c.get("type") == WORKLOAD_RESOLVED:
            if c.get("status") == "True":
                return "", False
            return str(c.get("message") or ""), c.get("reason") == WORKLOAD_NOT_FOUND
    for c in conditions:
        if c.get("type") != "Degraded" or c.get("status") != "True":
            continue
        return (str(c.get("message") or ""), False) if c.get("reason") == WORKLOAD_UNRESOLVED else None
    return "", False


def recorded_message(body: dict[str, Any]) -> str:
    """The message of the monitor's Degraded condition now ("" when it is not Degraded)."""
    for c in (body.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Degraded" and c.get("status") == "True":
            return str(c.get("message") or "")
    return ""


def node_names(reads: ReconcileReads, selector: LabelSelector) -> list[str]:
    return sorted(str(n["metadata"]["name"]) for n in reads.nodes() if selector.matches(labels_of(n)))


def monitored_pods(reads: ReconcileReads, monitor: TrainingJobMonitor) -> int:
    """Pods of the selector that carry the exporter: a pod let through without it is not monitored."""
    pods = reads.pods(monitor.namespace, monitor.spec.selector)
    return sum(1 for p in pods if not is_terminating(p) and carries_exporter(p))


PODS_WITHOUT_EXPORTER = "PodsWithoutExporter"
NAMED_AT_MOST = 5


def without_exporter_message(names: list[str]) -> str:
    """The Warning's text: which pods, and the fix."""
    shown = ", ".join(names[:NAMED_AT_MOST]) + (
        f" and {len(names) - NAMED_AT_MOST} more" if len(names) > NAMED_AT_MOST else ""
    )
    return (
        f"{len(names)} pod(s) of the selector run without the trainguard exporter ({shown}): admitted before the "
        "operator knew this monitor or while its webhook was unavailable, so no GPU signal or fast path "
        "covers them; delete them so that their controller recreates them with the exporter"
    )


def unmonitored_pods(reads: ReconcileReads, monitor: TrainingJobMonitor) -> list[str]:
    """Live pods of the selector that run without the exporter, by name: admitted before the webhook's
    cache held their monitor, while the webhook was down (it fails open), or in a namespace it does not
    see. Nothing watches their GPUs or takes their fast path until they are recreated."""
    pods = reads.pods(monitor.namespace, monitor.spec.selector)
    return sorted(
        str((p.get("metadata") or {}).get("name") or "")
        for p in pods
        if not is_terminating(p)
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        and not carries_exporter(p)
    )


@dataclass(frozen=True)
class ReceiverSettings:
    """The operator's remediation receiver, as the monitors' objects point at it."""

    key: bytes
    """The operator key every monitor's tokens are derived from (remediation.tokens)."""
    url: str
    """Base URL of the receiver (https://host:port): /v1/events for sidecars, /v1/alerts for Alertmanager."""
    ca: str | None = None
    """PEM of the CA that signed the receiver's certificate, for the sidecars and Alertmanager."""


def credentials(monitor: TrainingJobMonitor, receiver: ReceiverSettings) -> dict[str, Any]:
    """The monitor's fast-path Secret with tokens derived from the operator key and bound to the monitor's
    uid: applied each time (Kube.apply writes a Secret whatever it last wrote), so a new key, a Secret
    deleted by hand, or a monitor deleted and created again under its name (a new uid, new tokens) is
    repaired like any other object."""
    ns, name, uid = monitor.namespace, monitor.name, monitor.metadata.uid or ""
    return fastpath_secret(
        monitor,
        tokens.derive(receiver.key, tokens.EVENTS, ns, name, uid),
        tokens.derive(receiver.key, tokens.ALERTS, ns, name, uid),
        receiver.ca,
    )


def reconcile_monitor(
    kube: ReconcileAPI,
    reads: ReconcileReads,
    body: dict[str, Any],
    *,
    now: Callable[[], str] = utcnow,
    announce: Callable[[str, str], None] = _no_announce,
    receiver: ReceiverSettings | None = None,
    label_namespace: Callable[[str], str] | None = None,
    severity_style: str = GRADE,
    object_labels: Mapping[str, str] | None = None,
    rule_form: str = PER_MONITOR,
) -> dict[str, Any]:
    """Reconcile one monitor body and write its status (unless it is the status the body holds); returns
    the status. With `receiver`,
    the monitor's credentials are derived and Alertmanager posts its P0 and P1 alerts to the operator.
    `label_namespace` labels the monitor's namespace for the sidecar-injection webhook before anything
    else (controller/namespace_labels.py), answering why it could not ("" when it is labelled). The
    rules' severity label is in `severity_style`, the platform's (--severity-style); `object_labels` go
    on every object applied (the platform's --object-labels); with `rule_form` shared its PrometheusRule
    holds only what the shared group cannot judge (render/shared.py)."""
    meta = body.get("metadata", {})
    ns, name = meta.get("namespace", "default"), meta.get("name", "?")
    outcome = Outcome(generation=meta.get("generation"))
    try:
        parsed_monitor = parse_object(body, f"{ns}/{name}")
    except InvalidInput as exc:
        outcome.error_reason, outcome.error_message = "InvalidSpec", exc.fields()
        return _write(kube, reads, body, outcome, now=now)
    assert isinstance(parsed_monitor, TrainingJobMonitor)
    monitor = parsed_monitor
    if label_namespace is not None:
        outcome.namespace_problem = label_namespace(ns)
        if outcome.namespace_problem and outcome.namespace_problem != recorded_message(body):
            announce(NAMESPACE_LABEL_FAILED, outcome.namespace_problem)  # once per distinct problem
    found, recorded = workload_problem(reads, monitor), recorded_problem(body)
    outcome.workload_problem, outcome.workload_missing = found or recorded or ("", False)
    outcome.workload_checked = True
    if outcome.workload_problem and (outcome.workload_problem, outcome.workload_missing) != recorded:
        # once per distinct problem
        announce(
            WORKLOAD_NOT_FOUND if outcome.workload_missing else WORKLOAD_UNRESOLVED, outcome.workload_problem
        )

    try:  # read by name, not from the cache: a policy applied with the monitor may not be there yet (the
        # resync's Rehearsal reads the cache: a policy missing there makes it differ, then this reads it)
        policies = policies_for(monitor, kube.get_policy)
    except PolicyProblem as exc:
        outcome.error_reason, outcome.error_message = exc.reason, exc.message
        return _write(kube, reads, body, outcome, now=now, monitor=monitor)

    effective = effective_policy(monitor, policies)
    outcome.rules = rules_status(monitor, effective, rule_form)
    # maintenance windows may name nodes by label: the renderer is pure, so resolve them here
    windows = {
        w.name: node_names(reads, w.node_selector)
        for w in effective.maintenance_windows
        if w.node_selector is not None and not w.node_selector.is_empty()
    }
    if receiver is not None:
        operator = operator_receiver(monitor, receiver.url, with_ca=bool(receiver.ca))
        desired = [
            *with_labels([credentials(monitor, receiver)], object_labels or {}),
            *monitor_objects(
                monitor,
                effective,
                windows,
                operator,
                severity_style=severity_style,
                object_labels=object_labels,
                rule_form=rule_form,
            ),
        ]
    else:
        desired = monitor_objects(
            monitor,
            effective,
            windows,
            severity_style=severity_style,
            object_labels=object_labels,
            rule_form=rule_form,
        )
    outcome.input_hash = content_hash({"objects": desired})
    label = ""
    done: set[str] = set()
    names_done: set[str] = set()
    previous = body.get("status") or {}
    same_input = previous.get("inputHash") == outcome.input_hash
    try:
        for obj in desired:
            label = f"{obj['kind']} {obj['metadata']['namespace']}/{obj['metadata']['name']}"
            stamped, _ = with_hash(obj)
            # applied unless untouched since this process applied the same content (Kube.apply): a hand
            # edit or a deletion is repaired at the next reconcile
            changed = kube.apply(stamped)
            if changed is None:  # a Secret first written by this process: changed if the input did
                changed = not same_input
            (outcome.applied if changed else outcome.unchanged).append(label)
            done.add(obj["kind"])
            names_done.add(obj["metadata"]["name"])
        secret = receiver_secret_name(monitor)
        label = f"Secret {ns}/{secret}"
        if secret in names_done:
            outcome.receiver_secret = secret
        elif previous.get("receiverSecret") == secret:
            kube.apply(emptied_receiver_secret(monitor))
            outcome.applied.append(f"{label} (emptied: no inline receiver values left)")
            outcome.receiver_secret = ""
        label = f"Secret {ns}/{fastpath_secret_name(monitor)}"
        # without a receiver (the operator's tests, an old setup) a random token, made once
        if receiver is None and kube.create_if_absent(fastpath_secret(monitor, secrets.token_urlsafe(32))):
            outcome.applied.append(label)
    except MissingAPI as exc:
        outcome.error_reason = "MissingCRDs"
        outcome.error_message = (
            f"{exc}: install prometheus-operator's CRDs (PrometheusRule, AlertmanagerConfig, PodMonitor)"
        )
        return _write(kube, reads, body, outcome, now=now, monitor=monitor)
    except ApiError as exc:
        if namespace_terminating(exc):  # the monitor goes with its namespace: not a failure to report
            raise NamespaceTerminating(f"{ns}/{name}: namespace {ns} is being deleted") from exc
        outcome.rules_applied = "PrometheusRule" in done
        outcome.routes_applied = "AlertmanagerConfig" in done
        outcome.error_reason = "ApplyFailed"
        outcome.error_message = apply_failure_message(label, exc)
        degraded: dict[str, Any] = next(
            (c for c in previous.get("conditions") or [] if c.get("type") == "Degraded"), {}
        )
        if degraded.get("message") != outcome.error_message:  # once per distinct failure, not per resync
            announce("ApplyFailed", outcome.error_message)
        status = _write(kube, reads, body, outcome, now=now, monitor=monitor)
        if transient(exc):
            raise
        return status
    outcome.rules_applied = outcome.routes_applied = True
    if outcome.applied:
        message = f"applied {', '.join(outcome.applied)} for generation {outcome.generation}"
        log.info("%s/%s: %s", ns, name, message)
        announce("Applied", message)
    bare = unmonitored_pods(reads, monitor)  # a monitor applied to a running job: every pod, said once
    if len(bare) > int(previous.get("podsUnmonitored") or 0):
        announce(PODS_WITHOUT_EXPORTER, without_exporter_message(bare))
    return _write(kube, reads, body, outcome, now=now, monitor=monitor)


SECRET_WRITE_POLICY = "trainguard-operator-secret-writes"
"""The ValidatingAdmissionPolicy that lets the operator write only the Secrets it labelled (deploy/)."""


class NamespaceTerminating(Exception):
    """The monitor's namespace is being deleted: the API refuses anything new in it (the apply of an
    object not yet there, an Event), and the monitor is about to go too."""


def apply_failure_message(label: str, exc: ApiError) -> str:
    """The object and the API's own message (its Status.message), which names the offending field."""
    detail = str(api_status(exc).get("message") or exc.reason or "")
    hint = {
        403: "the operator's RBAC does not allow it (see deploy/rbac.yaml)",
        422: "the object was invalid for the cluster's schema",
    }.get(exc.status or 0, "retried at the next reconcile")
    if exc.status == 403 and SECRET_WRITE_POLICY in detail:
        hint = (
            "a Secret of that name exists that trainguard did not write (deploy/secret-write-policy.yaml "
            "keeps the operator off it): rename or remove that Secret"
        )
    return f"{label}: the API refused the apply ({exc.status}): {detail}; {hint}"


def _write(
    kube: ReconcileAPI,
    reads: ReconcileReads,
    body: dict[str, Any],
    outcome: Outcome,
    *,
    now: Callable[[], str],
    monitor: TrainingJobMonitor | None = None,
) -> dict[str, Any]:
    meta = body["metadata"]
    if monitor is not None:
        outcome.pods = monitored_pods(reads, monitor)
        outcome.pods_unmonitored = len(unmonitored_pods(reads, monitor))
    if outcome.error_reason:
        log.warning(
            "%s/%s: %s: %s",
            meta.get("namespace"),
            meta.get("name"),
            outcome.error_reason,
            outcome.error_message,
        )
    previous = body.get("status") or {}
    status = monitor_status(previous, outcome, now())
    if not outcome.input_hash and previous.get("inputHash"):
        status["inputHash"] = previous["inputHash"]
    if any(previous.get(k) != v for k, v in status.items()):  # a merge patch of the same is no write
        kube.patch_status("trainingjobmonitors", meta["namespace"], meta["name"], status)
    return status
