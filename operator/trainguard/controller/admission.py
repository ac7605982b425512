"""Sidecar injection at admission.

Every replica answers admission requests, the standbys included. kopf pauses a standby's watches, so
the monitors come from the operator's own watch cache (kube/cache.py), which every replica keeps, and so
does what a restart gives its new pods: a gang restart's resume-from pointer is read from the monitor's
own status (the restart step's progress), not from the workload. In steady state an admission makes no
API call. Injection never denies a pod: on any error the pod is let through without the exporter and an
Event says why.

The answer goes back as the AdmissionReview's JSON patch, built here from the fields the injection
replaces (`json_patch`), not by diffing the whole pod before and after (kopf's way: about 1 ms a pod,
3 times the rest of the handler, bench/admission.py).
"""

from __future__ import annotations

import base64
import json
import logging
import operator
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trainguard.api import InvalidInput, TrainingJobMonitor, parse_spec
from trainguard.remediation.model import Phase, StepKind
from trainguard.render.sidecar import inject, matching_monitor
from trainguard.times import unix

log = logging.getLogger("trainguard.admission")

Parsed = list[tuple[TrainingJobMonitor, dict[str, Any]]]


def parse_valid(monitors: list[dict[str, Any]]) -> Parsed:
    """Each raw monitor with its spec parsed; invalid monitors are left out (their own status says
    why). The spec decides: a status the model would refuse must not unselect the pods."""
    out: Parsed = []
    for raw in monitors:
        try:
            obj = parse_spec(raw)
        except InvalidInput:
            continue
        if isinstance(obj, TrainingJobMonitor):
            out.append((obj, raw))
    return out


Candidates = Callable[[str, list[dict[str, Any]], Mapping[str, str]], Parsed]
"""(namespace, its raw monitors, a pod's labels) -> the valid monitors that may select the pod: every
one, or fewer that surely include each that does."""


class Deferred(Exception):
    """Raised by a read that would wait (a cache not listed yet, a workload read from the API) when the
    caller answers on the event loop: it answers again on a thread. `admit` lets it through."""


def every_valid(namespace: str, monitors: list[dict[str, Any]], labels: Mapping[str, str]) -> Parsed:
    """Every valid monitor, parsed now."""
    return parse_valid(monitors)


@dataclass(frozen=True)
class _Snapshot:
    """A namespace's monitors at their versions: the valid ones parsed, indexed by one of their
    matchLabels (a monitor selects only pods that carry all of them); those without are always tried."""

    versions: tuple[tuple[str, str], ...]
    raws: tuple[dict[str, Any], ...]
    """The raw monitors as given: the watch cache hands out the same objects until an event replaces
    one, so the same objects again are the same versions (checked without reading each version)."""
    monitors: Parsed
    parsed: dict[tuple[str, str], TrainingJobMonitor | None]
    by_label: dict[tuple[str, str], tuple[int, ...]]
    unindexed: tuple[int, ...]

    def candidates(self, labels: Mapping[str, str]) -> Parsed:
        picked = set(self.unindexed)
        for item in labels.items():
            picked.update(self.by_label.get(item, ()))
        return [self.monitors[i] for i in sorted(picked)]


class ParsedMonitors:
    """The namespace's monitors parsed once per version of each (metadata.resourceVersion) and indexed
    by their selectors, for every admission after: parsing 500 monitors of a namespace for each pod
    takes about 25 ms, and trying each one's selector about 0.5 ms (bench/admission.py). Thread-safe
    (the event loop and threads answer admissions at once); holds each namespace's monitors as its last
    admission found them (a deleted monitor goes at the next). Monitors without a resourceVersion (not
    from the API) are parsed each time. The objects the cache gave last time are recognised by
    identity: 20 us for 500 monitors, against 230 us to read and compare their versions."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._namespaces: dict[str, _Snapshot] = {}

    def __call__(self, namespace: str, monitors: list[dict[str, Any]], labels: Mapping[str, str]) -> Parsed:
        with self._guard:
            last = self._namespaces.get(namespace)
        if (
            last is not None
            and len(last.raws) == len(monitors)
            and all(map(operator.is_, last.raws, monitors))
        ):
            return last.candidates(labels)
        versions = tuple(
            (str(meta.get("name") or ""), str(meta.get("resourceVersion") or ""))
            for meta in (raw.get("metadata") or {} for raw in monitors)
        )
        if not all(version for _, version in versions):
            return parse_valid(monitors)
        if last is None or last.versions != versions:
            last = self._snapshot(versions, monitors, last.parsed if last is not None else {})
            with self._guard:
                if last.versions:
                    self._namespaces[namespace] = last
                else:
                    self._namespaces.pop(namespace, None)
        return last.candidates(labels)

    @staticmethod
    def _snapshot(
        versions: tuple[tuple[str, str], ...],
        monitors: list[dict[str, Any]],
        known: dict[tuple[str, str], TrainingJobMonitor | None],
    ) -> _Snapshot:
        parsed: dict[tuple[str, str], TrainingJobMonitor | None] = {}
        valid: Parsed = []
        by_label: dict[tuple[str, str], list[int]] = {}
        unindexed: list[int] = []
        for key, raw in zip(versions, monitors, strict=True):
            if key in known:
                monitor = known[key]
            else:
                found = parse_valid([raw])
                monitor = found[0][0] if found else None
            parsed[key] = monitor
            if monitor is None:
                continue
            labels = monitor.spec.selector.match_labels
            if labels:
                by_label.setdefault(min(labels.items()), []).append(len(valid))
            else:
                unindexed.append(len(valid))
            valid.append((monitor, raw))
        return _Snapshot(
            versions,
            tuple(monitors),
            valid,
            parsed,
            {k: tuple(v) for k, v in by_label.items()},
            tuple(unindexed),
        )


def select(pod: Mapping[str, Any], monitors: Parsed) -> tuple[TrainingJobMonitor, dict[str, Any]] | None:
    """The monitor (parsed, raw) whose selector matches the pod."""
    by_name = {m.name: (m, raw) for m, raw in monitors}
    monitor = matching_monitor(dict(pod), [m for m, _ in by_name.values()])
    return None if monitor is None else by_name[monitor.name]


def regarding(pod: Mapping[str, Any], monitor: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What an injection Event is about: the monitor when one matched, else the pod's controller (the
    pod itself has no name yet at admission when it comes from a Job)."""
    if monitor is not None:
        return dict(monitor)
    meta = pod.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return {
                "apiVersion": ref.get("apiVersion"),
                "kind": ref.get("kind"),
                "metadata": {
                    "name": ref.get("name"),
                    "namespace": meta.get("namespace"),
                    "uid": ref.get("uid"),
                },
            }
    return None


RESTART_WINDOW_S = 600.0
"""A gang restart's replacement pods may still be coming this long after its record finished."""
RESTARTS_BY_NEW_PODS = (StepKind.RESTART_GANG, StepKind.REPLACE_POD)
FINISHED = (Phase.SUCCEEDED, Phase.FAILED, Phase.SKIPPED)


@dataclass(frozen=True)
class Restart:
    """A restart by new pods that the monitor's status shows under way, or finished within
    RESTART_WINDOW_S: its new pods may use a warm spare."""

    pointer: str | None
    """The resume-from pointer for its new pods: the JSON the executor wrote on the workload as
    trainguard.io/resume-from, rebuilt from the restart step's progress. None when no checkpoint was
    known, and once the record's ConfirmPlacement saw the new pods placed (the executor then removes
    the annotation: a pod recreated later for another reason must not start pinned to it)."""
    recorded: bool = True
    """False for a step an operator before this one began: its progress holds no resumeFrom, the
    pointer is on the workload only."""


def restart_of(monitor: Mapping[str, Any], now: float) -> Restart | None:
    """The restart by new pods (RestartGang or ReplacePod under way or done, not a dry run) in a record
    not finished or finished within RESTART_WINDOW_S; the newest record's when there are several."""
    found: list[tuple[float, Restart]] = []
    for record in (monitor.get("status") or {}).get("remediations") or []:
        steps = record.get("steps") or []
        at = next((i for i, s in enumerate(steps) if s.get("kind") in RESTARTS_BY_NEW_PODS), None)
        if (
            at is None
            or record.get("dryRun")
            or steps[at].get("phase") not in (Phase.IN_PROGRESS, Phase.SUCCEEDED)
        ):
            continue
        if record.get("phase") in FINISHED:
            try:
                updated = unix(str(record.get("updated", "")))
            except ValueError:
                continue
            if now - updated >= RESTART_WINDOW_S:
                continue
        try:
            created = unix(str(record.get("created", "")))
        except ValueError:
            created = 0.0
        found.append((created, _restart(record, at)))
    return max(found, key=lambda f: f[0])[1] if found else None


def _restart(record: Mapping[str, Any], at: int) -> Restart:
    steps = record.get("steps") or []
    if any(s.get("kind") == StepKind.CONFIRM_PLACEMENT and s.get("phase") == Phase.SUCCEEDED
           for s in steps[at + 1 :]):  # fmt: skip
        return Restart(None)
    progress = steps[at].get("progress") or {}
    text = progress.get("resumeFrom")
    if not isinstance(text, str):
        # no progress yet: the step has not chosen, nothing deleted; progress without it: an older operator's
        return Restart(None, recorded=not progress)
    try:
        checkpoint = json.loads(text)
    except ValueError:
        return Restart(None)
    if not isinstance(checkpoint, dict):
        return Restart(None)
    generation = progress.get("generation")
    if isinstance(generation, int) and not isinstance(generation, bool) and generation > 0:
        checkpoint = {**checkpoint, "generation": generation, "record": str(record.get("id", ""))}
    return Restart(json.dumps(checkpoint, sort_keys=True))


def admit(
    pod: Mapping[str, Any],
    *,
    monitors_in: Callable[[str], list[dict[str, Any]]],
    post_event: Callable[[dict[str, Any], str, str, str], None],
    receiver_url: str,
    sidecar_image: str,
    native_sidecar: bool,
    parsed: Candidates = every_valid,
    resume_pointer: Callable[[TrainingJobMonitor], str | None] = lambda m: None,
    clock: Callable[[], float] = time.time,
    failed: Callable[[], None] = lambda: None,
) -> dict[str, Any] | None:
    """The changes for an admitted pod, or None. Never raises: a broken operator must not block pods
    (`failed` is told when injection failed and the pod goes without the exporter). `parsed` gives the
    monitors that may select the pod: ParsedMonitors keeps them parsed and indexed between requests;
    by default each request parses them all. The exporter runs `sidecar_image` (the operator's
    --sidecar-image) unless the monitor overrides it.
    During a gang restart the pod may use a warm spare, and its exporter gets the checkpoint the
    operator chose, from the monitor's status (`resume_pointer`, the workload's
    trainguard.io/resume-from read from the API, only for a restart an older operator began)."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    matched: dict[str, Any] | None = None
    try:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        found = select(pod, parsed(namespace, monitors_in(namespace), labels))
        if found is None:
            return None
        monitor, matched = found
        restart = restart_of(matched, clock())
        resume_from = None
        if restart is not None:
            resume_from = restart.pointer if restart.recorded else resume_pointer(monitor)
        changes = inject(
            dict(pod),
            monitor,
            fallback_trace=secrets.token_hex(16),
            receiver_url=receiver_url,
            sidecar_image=sidecar_image,
            native_sidecar=native_sidecar,
            tolerate_spares=restart is not None,
            resume_from=resume_from,
        )
        if changes is not None:
            log.info("injecting the exporter into a pod of %s/%s for monitor %s", namespace, _pod_name(pod),
                     monitor.name)  # fmt: skip
        return changes
    except Deferred:
        raise
    except Exception as exc:
        message = (
            f"pod {namespace}/{_pod_name(pod)} was admitted WITHOUT the trainguard exporter: {exc!r}. "
            "It is not monitored until it is recreated; see the operator's log."
        )
        log.exception("sidecar injection failed; the pod is admitted without it")
        failed()
        target = regarding(pod, matched)
        if target is not None:
            try:
                post_event(target, "InjectionFailed", message, "Warning")
            except Exception:
                log.exception("could not record the injection failure as an Event")
        return None


def _pod_name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("name") or (str(meta.get("generateName") or "") + "*"))


def json_patch(pod: Mapping[str, Any], changes: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The RFC 6902 operations that give the pod `changes` (inject's: whole fields of metadata and spec,
    each replacing the pod's own): an `add` per field, which replaces a member that exists; a parent
    the pod lacks is added whole."""
    ops: list[dict[str, Any]] = []
    for parent in sorted(changes):
        fields = changes[parent]
        if not isinstance(pod.get(parent), Mapping):
            ops.append({"op": "add", "path": f"/{_pointer(parent)}", "value": dict(fields)})
            continue
        for name in sorted(fields):
            ops.append({"op": "add", "path": f"/{_pointer(parent)}/{_pointer(name)}", "value": fields[name]})
    return ops


def _pointer(token: str) -> str:
    """One reference token of a JSON pointer (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def review_answer(review: Mapping[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The AdmissionReview that answers `review`: allowed (injection never denies a pod), with `ops`
    as its JSON patch when there are any."""
    request = review.get("request") or {}
    response: dict[str, Any] = {"uid": str(request.get("uid") or ""), "allowed": True}
    if ops:
        response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode("ascii")
        response["patchType"] = "JSONPatch"
    return {
        "apiVersion": review.get("apiVersion") or "admission.k8s.io/v1",
        "kind": review.get("kind") or "AdmissionReview",
        "response": response,
    }
