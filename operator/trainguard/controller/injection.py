"""The sidecar-injection webhook, answered on kopf's event loop.

As a kopf mutating handler, each injection took a thread of kopf's executor and back (the loop and
that thread then contend for the GIL while other requests arrive), and kopf built the answer's JSON
patch by copying and diffing the whole pod: together about 3 times the handler's own time, and a p99
over 10 ms at 100 pods a second (bench/admission.py). So `/inject-sidecar` is served by
`AdmissionServer`, kopf's own webhook server, which hands every other webhook (the eviction gate) to
kopf's admission engine: the answer comes from the watch cache on the loop, without a thread, its
patch built from the replaced fields (admission.json_patch). A thread is taken only when a read would
wait (admission.Deferred): a replica whose cache has not listed yet (a LIST), and a restart an older
operator began (a GET of the workload). The Event of a failed injection is posted from a thread,
never awaited. docs/architecture.md (controller) and docs/performance.md (Admission latency).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any

import kopf

from trainguard.api import TrainingJobMonitor
from trainguard.catalog.kubernetes import RESUME_FROM
from trainguard.controller.admission import (
    Candidates,
    Deferred,
    ParsedMonitors,
    admit,
    json_patch,
    review_answer,
)
from trainguard.controller.metrics import OperatorMetrics
from trainguard.kube import Kube, NotSynced
from trainguard.render.webhook import WEBHOOK_PATH

log = logging.getLogger("trainguard.injection")

WEBHOOK_ID = WEBHOOK_PATH.lstrip("/")
"""kopf's webhook server routes a request by its path: the id it hands to the answer."""
API_TIMEOUT = 3.0
"""A LIST of the namespace's monitors by a replica whose cache has not listed: the apiserver waits 5 s
for the whole answer, and a slow list admits the pod without the sidecar."""
CACHE_WAIT = 1.0
"""How long a thread waits for a starting replica's monitor cache before it asks the API instead."""

Answer = Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]


class SidecarInjection:
    """The answer to the sidecar-injection webhook's AdmissionReviews. `reads` is the operator's watch
    cache (its `monitors_in`); `parsed` keeps the monitors parsed and indexed between requests."""

    def __init__(
        self,
        kube: Kube,
        reads: Any,
        *,
        receiver_url: str,
        sidecar_image: str,
        native_sidecar: bool,
        metrics: OperatorMetrics | None = None,
        parsed: Candidates | None = None,
    ) -> None:
        self.kube = kube
        self.reads = reads
        self.receiver_url = receiver_url
        self.sidecar_image = sidecar_image
        self.native_sidecar = native_sidecar
        self.metrics = metrics
        self.parsed: Candidates = parsed if parsed is not None else ParsedMonitors()

    async def __call__(self, review: Mapping[str, Any]) -> dict[str, Any]:
        """On the event loop; on a thread only when a read would wait."""
        try:
            return self.answer(review, wait=False)
        except Deferred:
            return await asyncio.to_thread(self.answer, review, wait=True)

    def answer(self, review: Mapping[str, Any], *, wait: bool) -> dict[str, Any]:
        """The AdmissionReview's answer: allowed, with the pod's changes as a JSON patch. Without `wait`
        (on the loop), raises Deferred instead of waiting for a read, and posts a failure's Event from
        a thread."""
        started = time.monotonic()
        pod = (review.get("request") or {}).get("object")
        if not isinstance(pod, Mapping):  # not a pod creation: nothing to inject
            return review_answer(review, [])
        post = self._post_event if wait else self._post_event_later
        changes = admit(
            pod,
            monitors_in=lambda namespace: self._monitors_in(namespace, wait=wait),
            post_event=post,
            receiver_url=self.receiver_url,
            sidecar_image=self.sidecar_image,
            native_sidecar=self.native_sidecar,
            parsed=self.parsed,
            resume_pointer=lambda monitor: self._resume_pointer(monitor, wait=wait),
            failed=self.metrics.injection_failed if self.metrics is not None else lambda: None,
        )
        answer = review_answer(review, json_patch(pod, changes) if changes is not None else [])
        if self.metrics is not None:
            self.metrics.admitted(time.monotonic() - started)
        return answer

    def _monitors_in(self, namespace: str, *, wait: bool) -> list[dict[str, Any]]:
        try:
            return list(self.reads.monitors_in(namespace, timeout=CACHE_WAIT if wait else 0.0))
        except NotSynced:  # a replica starting: its cache has not listed yet
            if not wait:
                raise Deferred("the monitor cache has not listed yet") from None
            return self.kube.list_monitors(namespace, timeout=API_TIMEOUT)

    def _resume_pointer(self, monitor: TrainingJobMonitor, *, wait: bool) -> str | None:
        """The checkpoint a gang restart left on the workload (trainguard.io/resume-from), read from
        the API: only for a restart step an operator before this one began, whose progress lacks the
        pointer. A failure to read it costs the pointer, never the injection."""
        ref = monitor.spec.workload_ref
        if ref is None:
            return None
        if not wait:
            raise Deferred("the resume-from pointer is on the workload")
        try:
            return self.kube.workload_annotation(monitor.namespace, ref.resolved_api_version(), ref.kind,
                                                 ref.name, RESUME_FROM, timeout=1.0)  # fmt: skip
        except Exception:
            log.warning("cannot read %s of %s %s/%s", RESUME_FROM, ref.kind, monitor.namespace, ref.name)
            return None

    def _post_event(self, obj: dict[str, Any], reason: str, message: str, type_: str) -> None:
        self.kube.post_event(obj, reason, message, type_, timeout=1.0)

    def _post_event_later(self, obj: dict[str, Any], reason: str, message: str, type_: str) -> None:
        """The Event posted from a thread: the loop answers the pod now."""

        def post() -> None:
            try:
                self._post_event(obj, reason, message, type_)
            except Exception:
                log.exception("could not record the injection failure as an Event")

        asyncio.get_running_loop().run_in_executor(None, post)


class AdmissionServer(kopf.WebhookServer):
    """kopf's webhook server (TLS, its certificate reloads), with the webhooks named in `answers`
    answered by their own coroutine on the loop; every other one by kopf's admission engine."""

    def __init__(self, answers: Mapping[str, Answer], **server: Any) -> None:
        super().__init__(**server)
        self.answers = dict(answers)

    async def __call__(self, fn: Any) -> AsyncGenerator[Any, None]:
        async def route(request: Any, *, webhook: str | None = None, **context: Any) -> Any:
            answer = self.answers.get(webhook or "")
            if answer is None:
                return await fn(request, webhook=webhook, **context)
            return await answer(request)

        async for client_config in super().__call__(route):
            yield client_config
