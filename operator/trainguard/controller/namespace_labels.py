"""The label trainguard.io/monitored=true on every namespace that holds a TrainingJobMonitor: the
sidecar-injection webhook's namespaceSelector (render/webhook.py), so the apiserver calls the webhook
for the pods that can concern a monitor and for no other (a monitor selects pods of its own namespace).

Kept by the leader. A monitor's reconcile labels its namespace, and waits to see the label come back
through its watch, before it reports the monitor Ready, so a workload started once its monitor is
Ready has its pods sent to the webhook; a label that cannot be
written makes the monitor Degraded (reason NamespaceLabelFailed), since its pods would start without
the exporter. The periodic pass labels what a reconcile missed and takes the label off a namespace
found without a monitor on two passes in a row: one pass could be a monitor cache a moment behind a
monitor just created, whose reconcile has labelled the namespace already. The operator's own namespace,
kube-system and kube-node-lease are never labelled (the webhook never mutates them anyway).

The operator's only write on namespaces is a merge patch of this label; RBAC cannot limit a patch to
one label, so deploy/namespace-label-policy.yaml (a ValidatingAdmissionPolicy) refuses any other change
by its ServiceAccount: it cannot relax a namespace's Pod Security labels.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainguard.catalog.kubernetes import MONITORED, MONITORED_VALUE
from trainguard.kube import ApiError, NotSynced, api_status

log = logging.getLogger("trainguard.namespaces")

CACHE_WAIT_S = 1.0
"""How long a reconcile waits for the labelled-namespace cache's first list before it labels anyway."""
SEEN_WAIT_S = 2.0
"""How long a reconcile that labelled a namespace waits to see the label in its own cache before it goes
on (to report the monitor Ready): the apiserver matches the webhook's namespaceSelector against its own
watch-fed copy of the namespace, which a moment after the patch may not hold the label yet."""


@dataclass(frozen=True)
class LabelChanges:
    add: frozenset[str]
    """Namespaces holding a monitor without the label."""
    remove: frozenset[str]
    """Labelled namespaces without a monitor, found so on the previous pass too."""
    unmonitored: frozenset[str]
    """Every labelled namespace found without a monitor on this pass (the next pass's `unmonitored`)."""


def label_changes(
    monitored: Iterable[str],
    labelled: Iterable[str],
    unmonitored: Iterable[str],
    excluded: Iterable[str],
) -> LabelChanges:
    """What one pass changes: `monitored` are the namespaces holding a monitor now, `labelled` those
    carrying the label now, `unmonitored` the labelled ones the previous pass found without a monitor,
    `excluded` those never labelled."""
    want = set(monitored) - set(excluded)
    have = set(labelled)
    stale = have - want
    return LabelChanges(
        add=frozenset(want - have), remove=frozenset(stale & set(unmonitored)), unmonitored=frozenset(stale)
    )


def needs_label(namespace: str, labelled: Iterable[str], excluded: Iterable[str]) -> bool:
    """Whether a monitor's namespace must be labelled now."""
    return namespace not in set(excluded) and namespace not in set(labelled)


def label_failure(namespace: str, exc: ApiError) -> str:
    """What a monitor's Degraded condition says when its namespace cannot be labelled: the pods, the
    API's message, and the fix."""
    detail = str(api_status(exc).get("message") or exc.reason or "")
    hint = {
        403: "grant the operator patch on namespaces (deploy/rbac.yaml) and apply "
        "deploy/namespace-label-policy.yaml, or label the namespace yourself",
    }.get(exc.status or 0, "retried at the next reconcile")
    return (
        f"namespace {namespace} could not be labelled {MONITORED}={MONITORED_VALUE} ({exc.status}: {detail}): "
        f"the sidecar-injection webhook is not called for its pods, which start without the exporter; {hint}"
    )


class NamespaceWriter(Protocol):
    def label_namespace(self, name: str, labels: dict[str, str | None]) -> bool: ...


class NamespaceReads(Protocol):
    def labelled_namespaces(self, timeout: float | None = None) -> set[str]: ...

    def monitors(self) -> list[dict[str, Any]]: ...


@dataclass
class NamespaceLabels:
    """The edge: reads the monitor and labelled-namespace caches, writes the label."""

    kube: NamespaceWriter
    reads: NamespaceReads
    excluded: frozenset[str]
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    _unmonitored: frozenset[str] = frozenset()
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def ensure(self, namespace: str) -> str:
        """Label a monitor's namespace unless it carries the label; "" when it does (or need not), else
        why it could not be labelled (for the monitor's Degraded condition)."""
        try:
            labelled = self.reads.labelled_namespaces(timeout=CACHE_WAIT_S)
        except NotSynced:  # a starting replica: the patch is idempotent
            labelled = set()
        if not needs_label(namespace, labelled, self.excluded):
            return ""
        try:
            self.kube.label_namespace(namespace, {MONITORED: MONITORED_VALUE})
        except ApiError as exc:
            return label_failure(namespace, exc)
        log.info("labelled namespace %s %s=%s: its pods go to the sidecar-injection webhook", namespace,
                 MONITORED, MONITORED_VALUE)  # fmt: skip
        self._seen(namespace)
        return ""

    def _seen(self, namespace: str) -> None:
        """Wait (up to SEEN_WAIT_S) until the watch of labelled namespaces brings the label back."""
        deadline = self.clock() + SEEN_WAIT_S
        while self.clock() < deadline:
            try:
                if namespace in self.reads.labelled_namespaces(timeout=CACHE_WAIT_S):
                    return
            except NotSynced:
                return
            self.sleep(0.05)
        log.warning("namespace %s: the label %s is not seen in the cache %.0fs after the patch", namespace,
                    MONITORED, SEEN_WAIT_S)  # fmt: skip

    def sweep(self) -> LabelChanges:
        """One periodic pass over every namespace; a write that fails is logged and retried next pass."""
        try:
            monitored = {str((m.get("metadata") or {}).get("namespace") or "") for m in self.reads.monitors()}
            labelled = self.reads.labelled_namespaces()
        except NotSynced as exc:
            log.warning("namespace labels not checked: %s (the operator lists and watches namespaces: "
                        "deploy/rbac.yaml)", exc)  # fmt: skip
            return LabelChanges(frozenset(), frozenset(), self._unmonitored)
        with self._guard:
            changes = label_changes(monitored, labelled, self._unmonitored, self.excluded)
            self._unmonitored = changes.unmonitored
        for namespace, value in [*((n, MONITORED_VALUE) for n in sorted(changes.add)),
                                 *((n, None) for n in sorted(changes.remove))]:  # fmt: skip
            try:
                self.kube.label_namespace(namespace, {MONITORED: value})
            except ApiError as exc:
                log.warning("%s", label_failure(namespace, exc) if value else
                            f"could not remove {MONITORED} from namespace {namespace}: {exc.status} {exc.reason}")  # fmt: skip
                continue
            log.info(
                "%s namespace %s %s",
                "labelled" if value else "unlabelled (no monitor left)",
                namespace,
                MONITORED,
            )
        return changes
