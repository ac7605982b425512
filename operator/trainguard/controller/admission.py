"""Sidecar injection at pod admission.

Every replica answers admission requests, the standbys included. kopf pauses a standby's watches, so
the monitors come from the operator's own watch cache (kube/cache.py), which every replica keeps: no
API call per pod. Injection never denies a pod: on any error the pod is let through without the
exporter and an Event says why.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

from trainguard.api import InvalidInput, TrainingJobMonitor, parse_spec
from trainguard.render.sidecar import inject, matching_monitor
from trainguard.times import unix

log = logging.getLogger("trainguard.admission")


def select(pod: Mapping[str, Any], monitors: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The raw monitor whose selector matches the pod; invalid monitors select nothing (their own
    status says why)."""
    parsed: dict[str, tuple[TrainingJobMonitor, dict[str, Any]]] = {}
    for raw in monitors:
        try:  # the spec decides; a status the model would refuse must not unselect the pods
            obj = parse_spec(raw)
        except InvalidInput:
            continue
        if isinstance(obj, TrainingJobMonitor):
            parsed[obj.name] = (obj, raw)
    monitor = matching_monitor(dict(pod), [m for m, _ in parsed.values()])
    return None if monitor is None else parsed[monitor.name][1]


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


def restarting(monitor: Mapping[str, Any], now: float) -> bool:
    """Whether trainguard is restarting the job: a RestartGang or ReplacePod step under way or done, in a
    record not finished or finished within RESTART_WINDOW_S. Its new pods may then use a warm spare."""
    for record in (monitor.get("status") or {}).get("remediations") or []:
        steps = [s for s in record.get("steps") or [] if s.get("kind") in ("RestartGang", "ReplacePod")]
        if not steps or record.get("dryRun") or steps[0].get("phase") not in ("InProgress", "Succeeded"):
            continue
        if record.get("phase") not in ("Succeeded", "Failed", "Skipped"):
            return True
        try:
            updated = unix(str(record.get("updated", "")))
        except ValueError:
            continue
        if now - updated < RESTART_WINDOW_S:
            return True
    return False


def admit(
    pod: Mapping[str, Any],
    *,
    monitors_in: Callable[[str], list[dict[str, Any]]],
    post_event: Callable[[dict[str, Any], str, str, str], None],
    receiver_url: str,
    sidecar_image: str,
    native_sidecar: bool,
    resume_pointer: Callable[[TrainingJobMonitor], str | None] = lambda m: None,
    clock: Callable[[], float] = time.time,
    failed: Callable[[], None] = lambda: None,
) -> dict[str, Any] | None:
    """The changes for an admitted pod, or None. Never raises: a broken operator must not block pods
    (`failed` is told when injection failed and the pod goes without the exporter). The exporter runs
    `sidecar_image` (the operator's --sidecar-image) unless the monitor overrides it.
    During a gang restart the pod may use a warm spare, and its exporter gets the checkpoint the
    operator chose (`resume_pointer`: the workload's trainguard.io/resume-from)."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    matched: dict[str, Any] | None = None
    try:
        matched = select(pod, monitors_in(namespace))
        if matched is None:
            return None
        monitor = parse_spec(matched)
        assert isinstance(monitor, TrainingJobMonitor)
        restart = restarting(matched, clock())
        changes = inject(
            dict(pod),
            monitor,
            fallback_trace=secrets.token_hex(16),
            receiver_url=receiver_url,
            sidecar_image=sidecar_image,
            native_sidecar=native_sidecar,
            tolerate_spares=restart,
            resume_from=resume_pointer(monitor) if restart else None,
        )
        if changes is not None:
            log.info("injecting the exporter into a pod of %s/%s for monitor %s", namespace, _pod_name(pod),
                     monitor.name)  # fmt: skip
        return changes
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
