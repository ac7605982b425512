"""Reporter: what a training script calls. Every public method is cheap and never raises."""

from __future__ import annotations

import atexit
import collections
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from trainguard.sdk import storage
from trainguard.sdk.collectives import CollectiveHistogram, Timed
from trainguard.sdk.transport import Refused, Transport

log = logging.getLogger("trainguard.sdk")

DEFAULT_ENDPOINT = "unix:///var/run/trainguard/sdk.sock"
"""The injected sidecar's socket (the sidecar serves the SDK on TCP only with --sdk-tcp)."""
CHECKPOINT_KINDS = ("incremental", "full")  # the exporter counts any other kind as incremental
FIRST_CONTROL_TIMEOUT_S = 0.5  # resume_from() waits at most this long for a sidecar it never reached
RESUME_FROM_ENV = "TRAINGUARD_RESUME_FROM"
"""Set by `trainguard launch` for a trainer it restarted on the operator's word: the checkpoint the whole
gang resumes from ({step, kind, path, ts}, JSON), which resume_from() answers first."""
RESTORE_PROGRESS_EVERY_S = 2.0
"""While a checkpoint loads, its read throughput so far is reported this often (by the Reporter's thread)."""


def _checkpoint(value: Any) -> dict[str, Any] | None:
    """A resume_from as the sidecar answers it ({step, kind, path, ts}), or None when it is not one."""
    if not isinstance(value, dict):
        return None
    step = value.get("step")
    if isinstance(step, bool) or not isinstance(step, int | float) or not math.isfinite(step):
        return None
    return dict(value)


def _env_pointer(text: str | None) -> dict[str, Any] | None:
    """TRAINGUARD_RESUME_FROM as a checkpoint, or None when unset, empty or not one (logged: the trainer
    then resumes from what the sidecar says)."""
    if not text or not text.strip() or text.strip() == "null":
        return None
    try:
        found = _checkpoint(json.loads(text))
    except ValueError:
        found = None
    if found is None:
        log.warning("trainguard: %s is not a checkpoint {step, kind, path, ts} (%r); ignored", RESUME_FROM_ENV,
                    text[:200])  # fmt: skip
    return found


def _newer(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """The higher step of two checkpoints; on a tie, `b`."""
    if a is None or b is None:
        return a if b is None else b
    return a if float(a["step"]) > float(b["step"]) else b


def _clean(value: Any) -> Any:
    """JSON has no NaN: a non-finite loss travels as a string the sidecar counts as non-finite."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _seconds(value: Any) -> float | None:
    """A duration as sent: a finite, non-negative float, else None."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


class Restore:
    """A checkpoint being loaded (`Reporter.restore(path)`): the sidecar exports restoring 1 from begin()
    to end(), and the read throughput: every RESTORE_PROGRESS_EVERY_S while loading (bytes this process
    read since begin, from /proc/self/io), then the final figure (the checkpoint's size over the time it
    took; the bytes read where its size cannot be measured). A context manager, or begin() and end() for
    a load that starts and ends in different callbacks."""

    def __init__(self, reporter: Reporter, path: str) -> None:
        self.reporter = reporter
        self.path = path
        self.started: float | None = None
        self.seconds: float | None = None
        """How long the load took, once it ended."""
        self.read_bytes_per_second: float | None = None
        """The last figure reported."""
        self._io: tuple[int, int] | None = None
        self._last_progress = 0.0

    def begin(self) -> Restore:
        if self.started is None:
            self.started = self._last_progress = time.monotonic()
            self._io = storage.process_io()
            self.reporter._restore_event(self, "start")
        return self

    def progress(self) -> None:
        """Report the throughput so far (the Reporter's thread calls this while the load runs)."""
        if self.started is None or self.seconds is not None:
            return
        now = time.monotonic()
        self._last_progress = now
        read = storage.bytes_read_since(self._io)
        rate = None if read is None else read / max(now - self.started, 1e-6)
        self.reporter._restore_event(self, "progress", rate)

    def progress_due(self, now: float) -> bool:
        return self.seconds is None and now - self._last_progress >= RESTORE_PROGRESS_EVERY_S

    def end(self, ok: bool = True) -> None:
        if self.started is None or self.seconds is not None:
            return
        self.seconds = max(time.monotonic() - self.started, 1e-6)
        size = storage.checkpoint_size(self.path) if ok else None
        read = size if size is not None else storage.bytes_read_since(self._io)
        self.reporter._restore_event(self, "end", None if read is None else read / self.seconds, ok=ok)

    def __enter__(self) -> Restore:
        return self.begin()

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.end(ok=exc_type is None)


class Saving:
    """A checkpoint being written (`with tg.saving(step, kind, path): save(path)`): the sidecar is told
    when the write begins, so a long write never looks like a stall while it runs, and checkpoint_saved
    follows at its end with the seconds the trainer was blocked (ok False when the block raised; the
    exception goes on). begin() and end() for a write that starts and ends in different callbacks."""

    def __init__(self, reporter: Reporter, step: Any, kind: Any, path: Any) -> None:
        self.reporter = reporter
        self.step, self.kind, self.path = step, kind, path
        self.started: float | None = None
        self.seconds: float | None = None
        """How long the write took, once it ended."""

    def begin(self) -> Saving:
        if self.started is None:
            self.started = time.monotonic()
            self.reporter.save_began()
        return self

    def end(self, ok: bool = True) -> None:
        if self.started is None or self.seconds is not None:
            return
        self.seconds = time.monotonic() - self.started
        self.reporter.checkpoint_saved(self.step, self.kind, self.path, ok=ok, seconds=self.seconds)

    def __enter__(self) -> Saving:
        return self.begin()

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.end(ok=exc_type is None)


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
        clock: Callable[[], float] = time.time,
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
        self._clock = clock
        self.started_at = clock()
        self._queue_size = max(1, queue_size)
        self._queue: collections.deque[dict[str, Any]] = collections.deque(maxlen=self._queue_size)
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()  # one flush at a time: the thread's and close()'s
        self._wake = threading.Event()
        self._closed = threading.Event()
        self.dropped = 0
        self.sent = 0
        self.failures = 0
        self.refused = 0
        """Reports the sidecar refused (401/403: the wrong endpoint); also counted in `dropped`."""
        self._warned = False
        self._warned_refused = False
        self._warned_input = False
        self._control: dict[str, Any] = {
            "pause": False,
            "checkpoint": None,
            "advisories": [],
            "resume_from": None,
            "pinned": False,
        }
        self._own_best: dict[str, Any] | None = None  # the newest checkpoint this Reporter recorded
        self._told: dict[str, Any] | None = _env_pointer(os.environ.get(RESUME_FROM_ENV))
        """The launcher's resume-from for this generation (TRAINGUARD_RESUME_FROM): the operator's word."""
        self._last_control = 0.0
        self._control_fetched = False  # once the sidecar has answered GET /v1/control
        self._first_resume_fetch_done = False
        self._instance: str | None = None  # the sidecar's instance id last seen (it changes on restart)
        self._hello_lost = False  # a hello was dropped from the full queue: send another
        self._checkpoints: dict[str, dict[str, Any]] = {}  # kind -> the newest successful one recorded
        self._last_step: dict[str, Any] | None = None  # the newest step logged: {"step", "ts"}
        self._bye_sent = False
        self._exiting = False
        self._collectives = CollectiveHistogram()
        self._restores: list[Restore] = []  # loads in progress, for the thread's progress reports
        self._put(self._hello())  # the first event sent
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(target=self._run, name="trainguard-sdk", daemon=True)
            self._thread.start()
        # a script that never calls close() still says bye when its interpreter exits, so a sidecar
        # run as a regular container (--exit-after-bye) lets the pod complete
        atexit.register(self._at_exit)

    # ---- reporting (non-blocking) ----

    def _put(self, event: dict[str, Any]) -> None:
        with self._lock:
            if len(self._queue) == self._queue_size:  # deque(maxlen) drops the oldest: count it
                self.dropped += 1
                if self._queue[0]["type"] == "hello":
                    self._hello_lost = True
            self._queue.append(event)

    def _count_dropped(self, events: Iterable[dict[str, Any]]) -> None:
        """Count reports that will never be sent (the caller holds the lock). A dropped hello is
        queued again at the next control refresh: without it the sidecar cannot know the job."""
        for event in events:
            self.dropped += 1
            if event.get("type") == "hello":
                self._hello_lost = True

    def _bad_input(self, what: str, exc: Exception) -> None:
        with self._lock:
            self.dropped += 1
        if not self._warned_input:
            self._warned_input = True
            log.warning("trainguard: %s got a value it cannot report (%s); that report is dropped", what, exc)

    def _hello(self) -> dict[str, Any]:
        """Who this trainer is, for a sidecar that starts (or restarts) without knowing: a restarted
        sidecar lost the job's start time, its last step, its checkpoint times and which GPUs are
        this pod's (the caller holds the lock, or no thread runs yet)."""
        return {
            "type": "hello",
            "started_at": self.started_at,
            "pid": os.getpid(),
            "visible_devices": os.environ.get("NVIDIA_VISIBLE_DEVICES") or None,
            "checkpoints": {kind: dict(ckpt) for kind, ckpt in self._checkpoints.items()},
            "last_step": dict(self._last_step) if self._last_step else None,
        }

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
        try:
            event: dict[str, Any] = {"type": "step", "step": int(step), "ts": self._clock()}
            for key, value in (("loss", loss), ("grad_norm", grad_norm), ("tokens", tokens), ("loss_scale", loss_scale),
                               ("dataloader_wait_s", dataloader_wait_s), ("allreduce_s", allreduce_s),
                               ("step_time_s", step_time_s)):  # fmt: skip
                if value is not None:
                    event[key] = _clean(float(value))
        except (TypeError, ValueError, OverflowError) as exc:  # a str, a NaN step, a many-element tensor
            self._bad_input("log_step", exc)
            return
        with self._lock:
            self._last_step = {"step": event["step"], "ts": event["ts"]}
        self._put(event)
        if isinstance(event.get("loss"), str):
            self._wake.set()  # a non-finite loss is a P0: do not wait for the next flush

    def checkpoint_saved(
        self, step: int, kind: str, path: str, ok: bool = True, seconds: float | None = None
    ) -> None:
        """A checkpoint written (or failed, ok False). `seconds`: how long the trainer was blocked
        writing it, where the caller timed it (trainguard_checkpoint_save_seconds_total; saving() times
        it for you). A value that is not a non-negative number is left out, the checkpoint still reported."""
        try:
            step, kind, path, ok = int(step), str(kind), str(path), bool(ok)
        except (TypeError, ValueError, OverflowError) as exc:
            self._bad_input("checkpoint_saved", exc)
            return
        ts = self._clock()
        # started_at says which trainer saved it: one started after the operator pinned a checkpoint
        # resumed from the pin, so its checkpoints past the pin end it
        event = {"type": "checkpoint", "step": step, "kind": kind, "path": path, "ok": ok, "ts": ts,
                 "started_at": self.started_at}  # fmt: skip
        blocked = _seconds(seconds)
        if blocked is not None:
            event["seconds"] = blocked
        self._put(event)
        if ok:
            with self._lock:
                recorded = kind if kind in CHECKPOINT_KINDS else "incremental"
                self._checkpoints[recorded] = {"step": step, "ts": ts, "path": path}
                self._own_best = _newer(self._own_best, {"step": step, "kind": kind, "path": path, "ts": ts})
                if not self._control.get("pinned"):  # a pin moves only when the sidecar says so
                    self._control["resume_from"] = _newer(_checkpoint(self._control.get("resume_from")),
                                                          self._own_best)  # fmt: skip
                if self._control.get("checkpoint") in (kind, "incremental"):
                    self._control["checkpoint"] = None
        self._wake.set()

    def saving(self, step: int, kind: str, path: str) -> Saving:
        """`with tg.saving(step, kind, path): save(path)`: reports the write's start, then
        checkpoint_saved with the seconds it blocked the trainer (see Saving)."""
        return Saving(self, step, kind, path)  # checked by checkpoint_saved at its end, as any report

    def save_began(self) -> None:
        """A checkpoint write begins: the sidecar does not count the wait for the next step as a stall
        until checkpoint_saved says it ended (Saving and the framework integrations call it)."""
        self._put({"type": "saving", "ts": self._clock(), "pid": os.getpid()})

    def report_oom(self, device: int | None = None, message: str = "") -> None:
        """The accelerator ran out of memory (torch.OutOfMemoryError): counted by the exporter
        (trainguard_train_oom_total). Sent at once, not with the next flush: the process is usually
        about to die of it. `device`: the pod-level GPU index where known. A device that is not a number
        is left out rather than lose the report."""
        try:
            gpu = None if device is None or isinstance(device, bool) else int(device)
        except (TypeError, ValueError, OverflowError):
            gpu = None
        try:
            text = str(message)[:500]
        except Exception:  # a message whose str() fails still leaves an OOM to count
            text = ""
        self._put({"type": "oom", "ts": self._clock(), "device": gpu, "message": text, "pid": os.getpid()})
        self.flush()

    def collective(self, op: str = "all_reduce") -> Timed:
        """`with tg.collective():` around an all-reduce (or `op`): its wall time goes into the
        trainguard_train_collective_seconds histogram. Bucketed here and sent with the next flush, so a
        timed collective costs about a microsecond. An asynchronous call (NCCL) returns before the
        collective is done: time it with trainguard.sdk.torch, which synchronises."""
        return Timed(self._collectives, str(op))

    def observe_collective(self, seconds: float, op: str = "all_reduce") -> None:
        """One collective that took `seconds` (timed by the caller)."""
        try:
            value = float(seconds)
        except (TypeError, ValueError, OverflowError) as exc:
            self._bad_input("observe_collective", exc)
            return
        if not self._collectives.observe(value, str(op)):
            self._bad_input("observe_collective", ValueError(f"{seconds!r} s for {op!r}"))

    def restore(self, path: str) -> Restore:
        """`with tg.restore(path): state = load(path)`: the sidecar shows the job restoring and how fast
        it reads (see Restore)."""
        return Restore(self, str(path))

    def _restore_event(self, r: Restore, state: str, rate: float | None = None, ok: bool = True) -> None:
        event: dict[str, Any] = {"type": "restore", "state": state, "path": r.path, "ts": self._clock(),
                                 "pid": os.getpid()}  # fmt: skip
        if rate is not None and math.isfinite(rate):
            event["read_bytes_per_second"] = rate
            r.read_bytes_per_second = rate
        if state == "end":
            event["ok"], event["seconds"] = ok, r.seconds
        with self._lock:
            if state == "start":
                self._restores.append(r)
            elif state == "end" and r in self._restores:
                self._restores.remove(r)
        self._put(event)
        self._wake.set()

    def log_inference(
        self,
        latency_s: float | None = None,
        queue_depth: int | None = None,
        kv_cache_hit_ratio: float | None = None,
    ) -> None:
        """Inference mode: mean request latency, pending requests and the KV-cache hit ratio (hits /
        lookups, e.g. vLLM's prefix-cache hit rate), each sent only when given."""
        try:
            event: dict[str, Any] = {"type": "request"}
            if latency_s is not None:
                event["latency_s"] = _clean(float(latency_s))
            if queue_depth is not None:
                event["queue_depth"] = int(queue_depth)
            if kv_cache_hit_ratio is not None:
                event["kv_cache_hit_ratio"] = _clean(float(kv_cache_hit_ratio))
        except (TypeError, ValueError, OverflowError) as exc:
            self._bad_input("log_inference", exc)
            return
        self._put(event)

    def log_request(self, latency_s: float, queue_depth: int) -> None:
        """log_inference(latency_s, queue_depth), as the SDK called it before the KV-cache ratio."""
        self.log_inference(latency_s, queue_depth)

    def log_fragmentation(self, gpu: int, ratio: float) -> None:
        try:
            event = {"type": "fragmentation", "gpu": int(gpu), "ratio": _clean(float(ratio))}
        except (TypeError, ValueError, OverflowError) as exc:
            self._bad_input("log_fragmentation", exc)
            return
        self._put(event)

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
        """The checkpoint to resume from: {"step", "kind", "path", "ts"}, or None. First the one
        `trainguard launch` gave this process (TRAINGUARD_RESUME_FROM: the operator restarted the gang in
        place from it; a checkpoint this process saved since is newer and wins); then the one the
        operator pinned when the sidecar says so (a good checkpoint from before a NaN, or the pointer a
        restarted gang was given), else the newest good one this process or the sidecar knows.

        Usually called once, right after construction, before the background thread has asked the
        sidecar: so the first call asks it now (at most FIRST_CONTROL_TIMEOUT_S) unless that is done."""
        if self._thread is None:
            self._refresh_control(force=True)
        elif not self._control_fetched and not self._first_resume_fetch_done:
            self._first_resume_fetch_done = True
            self._refresh_control(force=True, timeout=min(self.transport.timeout, FIRST_CONTROL_TIMEOUT_S))
        with self._lock:
            if self._told is not None:
                best = _newer(dict(self._told), self._own_best)
                return dict(best) if best else None
            best = self._control.get("resume_from")
            return dict(best) if best else None

    def advisories(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(a) for a in self._control.get("advisories") or []]

    # ---- background ----

    def _warn_once(self, exc: BaseException) -> None:
        if isinstance(exc, Refused):
            self._warn_refused(exc)
            return
        self.failures += 1
        if not self._warned and not self._exiting:
            self._warned = True
            log.warning("trainguard sidecar not reachable at %s (%s); training continues, reports are dropped "
                        "until it is back", self.endpoint, exc)  # fmt: skip

    def _warn_refused(self, exc: Refused) -> None:
        """A refusal is a wrong endpoint, not an outage: retrying the same batch changes nothing."""
        self.failures += 1
        if not self._warned_refused and not self._exiting:
            self._warned_refused = True
            log.warning("trainguard sidecar at %s refused the SDK (HTTP %d): it takes reports on its unix socket "
                        "only; set TRAINGUARD_ENDPOINT=%s (the injected sidecar's socket), or start the exporter "
                        "with --sdk-tcp for local development. Refused reports are dropped and counted",
                        self.endpoint, exc.status, DEFAULT_ENDPOINT)  # fmt: skip

    def flush(self) -> None:
        """Send what is queued now (the background thread does this every flush interval)."""
        with self._send_lock:
            self._flush()

    def _flush(self) -> None:
        collectives = self._collectives.take()
        if collectives is not None:
            self._put(collectives)
        with self._lock:
            batch = list(self._queue)
            self._queue.clear()
        if not batch:
            return
        for event in batch:  # measured here, on the Reporter's thread, not in the training step
            if event["type"] == "checkpoint" and event.get("ok") and "fs_size_bytes" not in event:
                event.update(storage.checkpoint_measures(event["path"]))
        try:
            self.transport.request("POST", "/v1/report", {"events": batch})
            self.sent += len(batch)
            if self._warned or self._warned_refused:
                log.info("trainguard sidecar at %s takes reports again", self.endpoint)
                self._warned = self._warned_refused = False
        except Refused as exc:
            self._warn_refused(exc)
            with self._lock:
                self.refused += len(batch)
                self._count_dropped(batch)
        except (OSError, ValueError) as exc:
            self._warn_once(exc)
            with self._lock:  # put back the newest that fit in front of what came since: the bound holds
                room = max(0, self._queue_size - len(self._queue))
                kept = batch[len(batch) - room :] if room else []
                self._queue.extendleft(reversed(kept))
                self._count_dropped(batch[: len(batch) - len(kept)])

    def _refresh_control(self, force: bool = False, timeout: float | None = None) -> None:
        now = time.monotonic()
        if not force and now - self._last_control < self.control_interval_s:
            return
        self._last_control = now
        try:
            control = self.transport.request("GET", "/v1/control", timeout=timeout)
        except (OSError, ValueError) as exc:
            self._warn_once(exc)
            return
        if not isinstance(control, dict):
            return
        instance = control.pop("instance", None)
        hello = None
        with self._lock:
            self._control_fetched = True
            self._control.update(control)
            told = _checkpoint(control.get("resume_from"))
            pinned = control.get("pinned") is True and told is not None
            # a pin is the operator's choice and wins over what this process saved since; otherwise
            # the newest of the sidecar's and this process's own (its report may still be queued)
            self._control["pinned"] = pinned
            self._control["resume_from"] = told if pinned else _newer(told, self._own_best)
            # no instance (an older exporter) changes nothing; a new one is a restarted sidecar
            if isinstance(instance, str):
                restarted = self._instance is not None and instance != self._instance
                if restarted or self._hello_lost:
                    self._hello_lost = False
                    hello = self._hello()
                self._instance = instance
        if hello is not None:
            self._put(hello)
            self._wake.set()

    def _run(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                restores = list(self._restores)
            self._wake.wait(
                min(self.flush_interval_s, RESTORE_PROGRESS_EVERY_S) if restores else self.flush_interval_s
            )
            self._wake.clear()
            now = time.monotonic()
            for r in restores:
                if r.progress_due(now):
                    r.progress()
            # ask before sending: the first hello then goes to a sidecar whose instance is known, so one
            # that restarts right after taking it is told again (asked after, the restarted one's
            # instance would be the first seen, and taken for the one that had the hello)
            self._refresh_control()
            self.flush()

    def close(self, timeout_s: float = 2.0) -> None:
        """Say bye, flush and stop the background thread. Skipping it is safe: the thread is a
        daemon, and the bye is sent when the interpreter exits. A second call sends nothing new."""
        self._closed.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._lock:
            bye, self._bye_sent = not self._bye_sent, True
        if bye:
            # the sidecar's last word from this process: with --exit-after-bye it stops once every
            # trainer that said hello has said bye
            self._put({"type": "bye", "pid": os.getpid()})
        self.flush()
        atexit.unregister(self._at_exit)

    def _at_exit(self) -> None:
        """Registered at construction: a script that never closes its Reporter still says bye."""
        self._exiting = True  # a sidecar gone by now is worth no warning: nothing follows
        try:
            self.close(timeout_s=min(1.0, self.transport.timeout))
        except Exception:  # an exit hook must never turn a clean exit into a traceback
            log.debug("trainguard: the bye at exit failed", exc_info=True)

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
