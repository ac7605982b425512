"""The eviction gate of planned maintenance, at admission (render/webhook.py's ValidatingWebhookConfiguration
on pods/eviction): an eviction of a monitored job's pod from a node going into maintenance is answered
HTTP 429 until the job's checkpoint is taken (remediation/maintenance.py decides), which `kubectl drain`
and every eviction client retry as they retry a PodDisruptionBudget's refusal.

Every replica answers, from its own watch caches (no API call). It fails open: a cache not listed yet,
an eviction of a pod it does not know, or any error lets the eviction through, as the apiserver does when
the webhook cannot be reached (failurePolicy Ignore): the operator never blocks maintenance.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainguard.api.common import LabelSelector
from trainguard.controller.admission import parse_valid
from trainguard.kube import NotSynced
from trainguard.remediation.guardrails import ACT
from trainguard.remediation.maintenance import ALLOW, Verdict, eviction_verdict
from trainguard.times import parse_rfc3339

log = logging.getLogger("trainguard.admission")

Obj = dict[str, Any]
HELD_FORGET_S = 3600.0
"""A hold older than this is forgotten (its node long drained, or its maintenance called off)."""


class GateReads(Protocol):
    """What the gate reads (kube.ClusterCache)."""

    def monitors_in(self, namespace: str, timeout: float | None = None) -> list[Obj]: ...

    def pods(self, namespace: str, selector: LabelSelector) -> list[Obj]: ...

    def nodes(self) -> list[Obj]: ...


def _created(pod: Mapping[str, Any]) -> float | None:
    try:
        return parse_rfc3339(str((pod.get("metadata") or {}).get("creationTimestamp") or ""))
    except ValueError:
        return None


@dataclass
class EvictionGate:
    """Decides each eviction, remembering when it first held one per job and node (`held_since` of
    maintenance.eviction_verdict): the bound on the hold counts from there when no record exists yet."""

    clock: Callable[[], float] = time.time
    _held: dict[tuple[str, str, str], float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def decide(self, eviction: Mapping[str, Any], reads: GateReads, cache_wait: float) -> Verdict:
        meta = eviction.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        now = self.clock()
        for monitor, raw in parse_valid(reads.monitors_in(namespace, timeout=cache_wait)):
            pod = next(
                (
                    p
                    for p in reads.pods(namespace, monitor.spec.selector)
                    if p["metadata"].get("name") == name
                ),
                None,
            )
            if pod is None:
                continue
            node_name = str((pod.get("spec") or {}).get("nodeName") or "")
            node = next((n for n in reads.nodes() if n["metadata"].get("name") == node_name), None)
            key = (namespace, monitor.name, node_name)
            with self._lock:
                self._held = {k: t for k, t in self._held.items() if now - t < HELD_FORGET_S}
                held = self._held.get(key)
            records = list((raw.get("status") or {}).get("remediations") or [])
            verdict = eviction_verdict(
                node,
                monitor,
                records,
                now,
                held_since=held if held is not None else now,
                pod_created=_created(pod),
            )
            if not verdict.allowed:
                with self._lock:
                    self._held.setdefault(key, now)
            return verdict
        return ALLOW


def answer_eviction(
    eviction: Mapping[str, Any],
    reads: GateReads | None,
    gate: EvictionGate,
    cache_wait: float,
    mode: str = ACT,
) -> Verdict:
    """The gate's answer, open on every error: a broken gate must not hold a node's maintenance. With
    the operator in dry run or off (`mode`, --remediation-mode) no record will take a checkpoint, so
    nothing is held."""
    if reads is None or mode != ACT:
        return ALLOW
    try:
        return gate.decide(eviction, reads, cache_wait)
    except NotSynced:  # a replica starting: the apiserver waits 5s, a drain must not
        return ALLOW
    except Exception:
        log.exception("eviction gate: letting the eviction through")
        return ALLOW
