"""kopf handlers. Registered on a registry passed in, so importing this module changes nothing."""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import Any, cast

import kopf
from pydantic import ValidationError

from trainguard.api import GROUP, VERSION, InvalidInput, TrainingJobMonitor, parse_object
from trainguard.api.common import LabelSelector
from trainguard.controller.kube import Kube
from trainguard.controller.reconcile import reconcile_monitor, utcnow
from trainguard.controller.status import Outcome, monitor_status
from trainguard.render.sidecar import inject, matching_monitor

log = logging.getLogger("trainguard.handlers")

MONITORS = (GROUP, VERSION, "trainingjobmonitors")
POLICIES = (GROUP, VERSION, "alertpolicies")
RESYNC_SECONDS = 120.0
POD_COUNT_SECONDS = 15.0


class MonitorLocks:
    """One lock per monitor: its own handler, the policy handler and the resync timer run on
    kopf's thread pool and would otherwise render and apply the same monitor at once."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[tuple[str, str], threading.Lock] = {}

    def __call__(self, namespace: str, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((namespace, name), threading.Lock())


LOCKS = MonitorLocks()


def _announcer(body: Mapping[str, Any]) -> Callable[[str, str], None]:
    """Post a Kubernetes Event about the object (through kopf's event queue)."""

    def post(reason: str, message: str) -> None:
        kopf.info(kopf.Body(cast(kopf.RawBody, dict(body))), reason=reason, message=message)

    return post


def _reconcile(kube: Kube, namespace: str, name: str) -> None:
    with LOCKS(namespace, name):
        fresh = kube.get_monitor(namespace, name)
        if fresh is not None:  # read under the lock, so the status it starts from is current
            reconcile_monitor(kube, fresh, announce=_announcer(fresh))


def register(registry: kopf.OperatorRegistry, *, receiver_url: str) -> None:
    """Attach every handler of the operator to `registry`."""

    # ---- indices: what other handlers look up without an API call ----

    @kopf.index(*MONITORS, id="monitors_by_policy", registry=registry)
    def monitors_by_policy(*, namespace: str | None, name: str, spec: kopf.Spec, **_: Any) -> dict[Any, Any]:
        return {(namespace, ref.get("name")): name for ref in spec.get("policyRefs", []) or []}

    @kopf.index(*MONITORS, id="monitors_by_namespace", registry=registry)
    def monitors_by_namespace(*, namespace: str | None, body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return {namespace: {"apiVersion": body["apiVersion"], "kind": body["kind"],
                            "metadata": {"name": body.metadata.name, "namespace": namespace,
                                         "uid": body.metadata.uid},
                            "spec": dict(body.spec)}}  # fmt: skip

    # ---- monitors ----

    @kopf.on.resume(*MONITORS, id="monitor", registry=registry)
    @kopf.on.create(*MONITORS, id="monitor", registry=registry)
    @kopf.on.update(*MONITORS, id="monitor", registry=registry)
    def monitor_changed(*, namespace: str | None, name: str, memo: Any, **_: Any) -> None:
        _reconcile(memo["kube"], namespace or "default", name)

    @kopf.timer(
        *MONITORS, id="resync", interval=RESYNC_SECONDS, initial_delay=RESYNC_SECONDS, registry=registry
    )
    def monitor_resync(*, namespace: str | None, name: str, memo: Any, **_: Any) -> None:
        # repairs drift (an owned object edited or deleted by hand) and refreshes the pod count
        _reconcile(memo["kube"], namespace or "default", name)

    @kopf.timer(*MONITORS, id="pods", interval=POD_COUNT_SECONDS, initial_delay=5, registry=registry)
    def monitor_pods(
        *, namespace: str | None, name: str, spec: kopf.Spec, status: kopf.Status, memo: Any, **_: Any
    ) -> None:
        """Keeps status.podsMonitored current between reconciles (a list of pods, nothing more)."""
        kube: Kube = memo["kube"]
        try:
            selector = LabelSelector.model_validate(_plain(spec).get("selector") or {})
        except ValidationError:
            return  # the monitor's own reconcile reports it as Degraded; no retry storm here
        if selector.is_empty():
            return
        count = kube.count_pods(namespace or "default", selector.to_selector_string())
        if status.get("podsMonitored") != count:
            with LOCKS(namespace or "default", name):
                kube.patch_status(
                    "trainingjobmonitors", namespace or "default", name, {"podsMonitored": count}
                )

    # ---- policies: every monitor that names a policy is re-rendered when it changes ----

    @kopf.on.resume(*POLICIES, id="policy", registry=registry)
    @kopf.on.create(*POLICIES, id="policy", registry=registry)
    @kopf.on.update(*POLICIES, id="policy", registry=registry)
    @kopf.on.delete(*POLICIES, id="policy-deleted", registry=registry, optional=True)
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
        users: list[str] = sorted(
            set(monitors_by_policy.get((namespace, name), [])) if monitors_by_policy else []
        )
        for monitor_name in users:
            _reconcile(kube, namespace, monitor_name)
        if body.metadata.get("deletionTimestamp"):
            return
        try:
            parse_object(_plain(body), f"{namespace}/{name}")
            outcome = Outcome(
                generation=body.metadata.get("generation"), rules_applied=True, routes_applied=True
            )
        except InvalidInput as exc:
            outcome = Outcome(generation=body.metadata.get("generation"), error_reason="InvalidSpec",
                              error_message="; ".join(str(p) for p in exc.problems))  # fmt: skip
        status = monitor_status(body.get("status"), outcome, utcnow())
        status["conditions"] = [c for c in status["conditions"] if c["type"] in ("Ready", "Degraded")]
        status["monitors"] = len(users)
        kube.patch_status("alertpolicies", namespace, name, status)

    # ---- sidecar injection ----

    @kopf.on.mutate("", "v1", "pods", id="inject-sidecar", operations=["CREATE"], ignore_failures=True,
                    registry=registry)  # fmt: skip
    def inject_sidecar(
        *,
        body: kopf.Body,
        patch: kopf.Patch,
        monitors_by_namespace: kopf.Index[str, dict[str, Any]] | None = None,
        **_: Any,
    ) -> None:
        pod = _plain(body)
        namespace = pod.get("metadata", {}).get("namespace", "")
        monitors = []
        for raw in (monitors_by_namespace or {}).get(namespace, []):
            try:
                parsed = parse_object(raw)
            except InvalidInput:
                continue  # an invalid monitor selects nothing; its status says why
            if isinstance(parsed, TrainingJobMonitor):
                monitors.append(parsed)
        monitor = matching_monitor(pod, monitors)
        if monitor is None:
            return
        changes = inject(pod, monitor, fallback_trace=secrets.token_hex(16), receiver_url=receiver_url)
        if changes is None:
            return
        patch.metadata["annotations"] = changes["metadata"]["annotations"]
        for key, value in changes["spec"].items():
            patch.spec[key] = value
        log.info("injected the exporter into pod %s/%s for monitor %s",
                 namespace, pod["metadata"].get("name") or pod["metadata"].get("generateName", "?"), monitor.name)  # fmt: skip


def _plain(body: Mapping[str, Any]) -> dict[str, Any]:
    """kopf bodies are read-only views; the renderers take plain dicts."""
    return {k: _copy(v) for k, v in body.items()}


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(v) for v in value]
    return value
