"""Reporter: what a training script calls. Every public method is cheap and never raises."""

from __future__ import annotations

import collections
import logging
import math
import os
import threading
import time
from typing import Any

from trainguard.sdk.transport import Transport

log = logging.getLogger("trainguard.sdk")

DEFAULT_ENDPOINT = "http://127.0.0.1:9400"


def _clean(value: Any) -> Any:
    """JSON has no NaN: a non-finite loss travels as a string the sidecar counts as non-finite."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class Reporter:
    def __init__(
        self,
        endpoint: str | None = None,
        *,
        queue_size: int = 1024,
        flush_interval_s: float = 0.5,
        control_interval_s: float = 2.0,
        incremental_every: int | None = None,
        full_every: int | None = None,
        timeout_s: float = 1.0,
        start: bool = True,
    ) -> None:
        self.endpoint = endpoint or os.environ.get("TRAINGUARD_ENDPOINT") or DEFAULT_ENDPOINT
        self.transport = Transport(self.endpoint, timeout=timeout_s)
        env = os.environ.get
        self.incremental_every = incremental_every or int(
            env("TRAINGUARD_CHECKPOINT_INCREMENTAL_EVERY", "100")
        )
        self.full_every = full_every or int(env("TRAINGUARD_CHECKPOINT_FULL_EVERY", "1000"))
        self.flush_interval_s = flush_interval_s
        self.control_interval_s = control_interval_s
        self._queue: collections.deque[dict[str, Any]] = collections.deque(maxlen=queue_size)
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()  # one flush at a time: the thread's and close()'s
        self._wake = threading.Event()
        self._closed = threading.Event()
        self.dropped = 0
        self.sent = 0
        self.failures = 0
        self._warned = False
        self._control: dict[str, Any] = {
            "pause": False,
            "checkpoint": None,
            "advisories": [],
            "resume_from": None,
        }
        self._last_control = 0.0
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(target=self._run, name="trainguard-sdk", daemon=True)
            self._thread.start()

    # ---- reporting (non-blocking) ----

    def _put(self, event: dict[str, Any]) -> None:
        with self._lock:
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1  # deque(maxlen) drops the oldest
            self._queue.append(event)

    def log_step(
        self,
        step: int,
        loss: float | None = None,
        grad_norm: float | None = None,
        tokens: int | None = None,
        loss_scale: float | None = None,
        dataloader_wait_s: float | None = None,
        allreduce_s: float | None = None,
        step_time_s: float | None = None,
    ) -> None:
        event: dict[str, Any] = {"type": "step", "step": step, "ts": time.time()}
        for key, value in (("loss", loss), ("grad_norm", grad_norm), ("tokens", tokens), ("loss_scale", loss_scale),
                           ("dataloader_wait_s", dataloader_wait_s), ("allreduce_s", allreduce_s),
                           ("step_time_s", step_time_s)):  # fmt: skip
            if value is not None:
                event[key] = _clean(float(value))
        self._put(event)
        if loss is not None and not math.isfinite(float(loss)):
            self._wake.set()  # a NaN is a P0: do not wait for the next flush

    def checkpoint_saved(self, step: int, kind: str, path: str, ok: bool = True) -> None:
        self._put(
            {
                "type": "checkpoint",
                "step": step,
                "kind": kind,
                "path": str(path),
                "ok": bool(ok),
                "ts": time.time(),
            }
        )
        if ok:
            with self._lock:
                best = self._control.get("resume_from")
                if best is None or step >= float(best.get("step", -1)):
                    self._control["resume_from"] = {"step": step, "kind": kind, "path": str(path)}
                if self._control.get("checkpoint") in (kind, "incremental"):
                    self._control["checkpoint"] = None
        self._wake.set()

    def log_request(self, latency_s: float, queue_depth: int) -> None:
        self._put({"type": "request", "latency_s": float(latency_s), "queue_depth": int(queue_depth)})

    def log_fragmentation(self, gpu: int, ratio: float) -> None:
        self._put({"type": "fragmentation", "gpu": int(gpu), "ratio": float(ratio)})

    # ---- what the operator asks (cached; refreshed by the background thread) ----

    def should_checkpoint(self, step: int) -> str | None:
        """ "full", "incremental" or None: the operator's request first, then the cadence."""
        with self._lock:
            requested = self._control.get("checkpoint")
        if requested in ("full", "incremental"):
            return str(requested)
        if step > 0 and step % self.full_every == 0:
            return "full"
        if step > 0 and step % self.incremental_every == 0:
            return "incremental"
        return None

    def should_pause(self) -> bool:
        with self._lock:
            return bool(self._control.get("pause"))

    def resume_from(self) -> dict[str, Any] | None:
        """The newest good checkpoint: {"step", "kind", "path"}, or None."""
        if self._thread is None:
            self._refresh_control(force=True)
        with self._lock:
            best = self._control.get("resume_from")
            return dict(best) if best else None

    def advisories(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(a) for a in self._control.get("advisories") or []]

    # ---- background ----

    def _warn_once(self, exc: BaseException) -> None:
        self.failures += 1
        if not self._warned:
            self._warned = True
            log.warning("trainguard sidecar not reachable at %s (%s); training continues, reports are dropped "
                        "until it is back", self.endpoint, exc)  # fmt: skip

    def flush(self) -> None:
        """Send what is queued now (the background thread does this every flush interval)."""
        with self._send_lock:
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            batch = list(self._queue)
            self._queue.clear()
        if not batch:
            return
        try:
            self.transport.request("POST", "/v1/report", {"events": batch})
            self.sent += len(batch)
            if self._warned:
                log.info("trainguard sidecar reachable again at %s", self.endpoint)
                self._warned = False
        except (OSError, ValueError) as exc:
            self._warn_once(exc)
            with self._lock:  # keep what fits, newest first: the queue's bound still holds
                for event in reversed(batch):
                    if len(self._queue) == self._queue.maxlen:
                        self.dropped += 1
                        break
                    self._queue.appendleft(event)

    def _refresh_control(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_control < self.control_interval_s:
            return
        self._last_control = now
        try:
            control = self.transport.request("GET", "/v1/control")
        except (OSError, ValueError) as exc:
            self._warn_once(exc)
            return
        if isinstance(control, dict):
            with self._lock:
                local_best = self._control.get("resume_from")
                self._control.update(control)
                if control.get("resume_from") is None and local_best is not None:
                    self._control["resume_from"] = local_best

    def _run(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(self.flush_interval_s)
            self._wake.clear()
            self.flush()
            self._refresh_control()

    def close(self, timeout_s: float = 2.0) -> None:
        """Flush and stop the background thread (also safe to skip: it is a daemon)."""
        self._closed.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.flush()

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
