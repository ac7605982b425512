"""What the periodic resync last found in place, and from what: so that a steady pass need not render.

The resync renders every monitor from the caches and compares (handlers.resync, a Rehearsal): 24 ms of
the leader's CPU per monitor, which at 2,000 monitors is most of a core at a 60 s period
(docs/performance.md#operator-and-rule-scale). A monitor whose inputs are those of the last pass that
found it in place renders to the same objects, so nothing needs comparing. The inputs, all read from the
watch caches without a request (`Inputs`): the monitor's resourceVersion (its spec, and its status: a
status written since is looked at again), each policy's it names, the resourceVersion of each object the
last rehearsal compared (a hand edit, a deletion or another manager's write changes it), whether each of
its Secrets is still fresh for this process (Kube.unchanged: the hourly rewrite), and the operator's
receiver settings. A monitor whose policies select maintenance-window nodes by label is always rendered
(its objects depend on the nodes' labels). An entry is trusted for `max_age_s` at most, so every monitor
is rendered again at least that often, whatever the caches say.

What a rehearsal also does and a skipped monitor does not: label its namespace (NamespaceLabels.sweep
does at the pod-count cadence) and judge its workload (the pod-count pass reconciles a monitor whose
workloadRef started or stopped resolving)."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainguard.kube.client import HASH_ANNOTATION, content_hash
from trainguard.kube.errors import NotSynced

Obj = dict[str, Any]

MAX_AGE_S = 600.0
"""The longest a monitor goes without a render while its inputs stay the same."""


class Caches(Protocol):
    def policy(self, namespace: str, name: str) -> Obj | None: ...


class Objects(Protocol):
    def live_version(self, obj: Obj) -> str | None:
        """The resourceVersion the owned objects' watch cache holds for `obj`; None when absent. Raises
        NotSynced when no cache can say."""
        ...

    def unchanged(self, obj: Obj) -> bool: ...


Inputs = tuple[Hashable, ...]


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def selects_nodes(policy: Mapping[str, Any] | None) -> bool:
    """Whether a policy has a maintenance window naming its nodes by label."""
    windows = ((policy or {}).get("spec") or {}).get("maintenanceWindows") or []
    return any(isinstance(w, Mapping) and w.get("nodeSelector") for w in windows)


def inputs_of(
    body: Mapping[str, Any], caches: Caches, objects: Objects, compared: Sequence[Obj], settings: Hashable
) -> Inputs | None:
    """What the monitor's render depends on, from the caches; None when it cannot be told this way (no
    resourceVersion, a policy that selects nodes by label, a cache that has not listed)."""
    meta = _meta(body)
    namespace, version = str(meta.get("namespace") or "default"), meta.get("resourceVersion")
    if not version:
        return None
    policies: list[tuple[str, str | None]] = []
    for ref in (body.get("spec") or {}).get("policyRefs") or []:
        name = str((ref or {}).get("name") or "")
        try:
            policy = caches.policy(namespace, name)
        except NotSynced:
            return None
        if selects_nodes(policy):
            return None
        policies.append((name, _meta(policy).get("resourceVersion") if policy else None))
    owned: list[tuple[str, str, str, str | bool | None]] = []
    for obj in compared:
        m = _meta(obj)
        try:
            state = objects.unchanged(obj) if obj.get("kind") == "Secret" else objects.live_version(obj)
        except NotSynced:
            return None
        owned.append((str(obj.get("kind")), str(m.get("namespace") or ""), str(m.get("name")), state))
    return (str(version), tuple(policies), tuple(owned), settings)


def stub(obj: Mapping[str, Any]) -> Obj:
    """What of a compared object the entry keeps: its identity and content hash, all that
    Objects.live_version and Objects.unchanged read. The rendered objects themselves (a monitor's rule
    group is ~100 KB of Python dicts) held for every monitor doubled the leader's memory at 2,000."""
    meta = _meta(obj)
    digest = (meta.get("annotations") or {}).get(HASH_ANNOTATION) or content_hash(dict(obj))
    kept = {k: meta[k] for k in ("name", "namespace") if k in meta}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": kept | {"annotations": {HASH_ANNOTATION: digest}}}  # fmt: skip


def settings_key(*parts: Any) -> str:
    """A short digest of the operator's settings a render depends on (receiver URL, CA, key, styles)."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


@dataclass
class InPlace:
    """The monitors the resync found in place: their inputs then, the objects it compared, and when."""

    max_age_s: float = MAX_AGE_S
    clock: Callable[[], float] = time.monotonic
    _found: dict[tuple[str, str], tuple[Inputs, tuple[Obj, ...], float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _swept: float | None = None

    def compared(self, key: tuple[str, str]) -> tuple[Obj, ...]:
        """The objects the last rehearsal that found the monitor in place compared (none if unknown)."""
        with self._lock:
            entry = self._found.get(key)
        return entry[1] if entry else ()

    def still(self, key: tuple[str, str], inputs: Inputs | None) -> bool:
        """Whether the monitor was found in place from these same inputs, recently enough."""
        if inputs is None:
            return False
        with self._lock:
            entry = self._found.get(key)
        return entry is not None and entry[0] == inputs and self.clock() - entry[2] < self.max_age_s

    def found(self, key: tuple[str, str], inputs: Inputs | None, compared: Sequence[Obj]) -> None:
        """A rehearsal found the monitor in place, from `inputs`, comparing `compared`."""
        now = self.clock()
        with self._lock:
            if inputs is None:
                self._found.pop(key, None)
            else:
                self._found[key] = (inputs, tuple(stub(obj) for obj in compared), now)
            # a deleted monitor's entry goes once it is too old to be trusted anyway: swept once per
            # max_age_s, not at every render (a first pass over 2,000 monitors would scan 4 million)
            if self._swept is None or now - self._swept >= self.max_age_s:
                self._swept = now
                for old in [k for k, (_, _, at) in self._found.items() if now - at >= self.max_age_s]:
                    del self._found[old]

    def forget(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._found.pop(key, None)
