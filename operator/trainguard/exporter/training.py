"""What the training process reports through the SDK, and what the operator asks of it.

Thread-safe: the SDK's reports arrive on HTTP threads, the poller reads a copy.
"""

from __future__ import annotations

import copy
import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainguard.exporter.faults import Faults

CHECKPOINT_KINDS = ("incremental", "full")


@dataclass
class TrainingView:
    start_ts: float | None = None
    """min(exporter start, the SDK's started_at): "not yet" for a step or checkpoint means "not
    since then", so stall and checkpoint rules have a reference before the first one."""
    step: float | None = None
    last_step_ts: float | None = None
    loss: float | None = None
    nonfinite_total: float = 0.0
    grad_norm: float | None = None
    tokens_per_second_per_gpu: float | None = None
    loss_scale: float | None = None
    loss_scale_updates_total: float = 0.0
    dataloader_wait_ratio: float | None = None
    allreduce_time_ratio: float | None = None
    fragmentation: dict[str, float] = field(default_factory=dict)
    checkpoint_ts: dict[str, float] = field(default_factory=dict)
    checkpoint_step: dict[str, float] = field(default_factory=dict)
    inference_latency_s: float | None = None
    inference_queue_depth: float | None = None
    reports_total: float = 0.0


@dataclass
class Control:
    """Set by the operator (authenticated), read by the SDK."""

    pause: bool = False
    checkpoint: str | None = None
    advisories: list[dict[str, Any]] = field(default_factory=list)
    resume_from: dict[str, Any] | None = None


def _num(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class TrainingState:
    def __init__(
        self, gpus_per_pod: int = 1, faults: Faults | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.gpus = max(1, gpus_per_pod)
        self.faults = faults or Faults()
        self.clock = clock
        self.lock = threading.Lock()
        self.view = TrainingView()
        self.control = Control()
        self.prev_step_ts: float | None = None
        self.instance = secrets.token_hex(8)
        """Chosen at start: an SDK that sees a new one says hello again (the sidecar restarted)."""
        self.view.start_ts = clock()
        self.visible_devices: str | None = None
        """NVIDIA_VISIBLE_DEVICES of the training container, from the SDK's hello."""

    def reported_visible_devices(self) -> str | None:
        with self.lock:
            return self.visible_devices

    def set_gpus(self, gpus: int) -> None:
        with self.lock:
            self.gpus = max(1, gpus)

    def snapshot(self) -> TrainingView:
        with self.lock:
            return copy.deepcopy(self.view)

    def control_view(self) -> dict[str, Any]:
        with self.lock:
            return {
                "instance": self.instance,
                "pause": self.control.pause,
                "checkpoint": self.control.checkpoint,
                "advisories": list(self.control.advisories),
                "resume_from": self.control.resume_from,
            }

    def set_control(self, body: dict[str, Any]) -> None:
        with self.lock:
            if "pause" in body:
                self.control.pause = bool(body["pause"])
            if "checkpoint" in body:
                kind = body["checkpoint"]
                if kind not in (None, *CHECKPOINT_KINDS):
                    raise ValueError(f"checkpoint must be one of {', '.join(CHECKPOINT_KINDS)} or null")
                self.control.checkpoint = kind
            if "advisories" in body:
                self.control.advisories = [dict(a) for a in body["advisories"]][-32:]

    def ingest(self, report: dict[str, Any]) -> bool:
        """Apply one SDK report; returns True when it carried a non-finite loss (a fast-path event)."""
        kind = report.get("type")
        with self.lock:
            self.view.reports_total += 1
            if kind == "step":
                return self._step(report)
            if kind == "hello":
                self._hello(report)
            elif kind == "checkpoint":
                self._checkpoint(report)
            elif kind == "request":
                self.view.inference_latency_s = _num(report.get("latency_s"))
                self.view.inference_queue_depth = _num(report.get("queue_depth"))
            elif kind == "fragmentation":
                ratio = _num(report.get("ratio"))
                if ratio is not None:
                    self.view.fragmentation[str(report.get("gpu", 0))] = ratio
        return False

    def _step(self, r: dict[str, Any]) -> bool:
        v, faults = self.view, self.faults
        if faults.has("stall"):
            return False  # a hung rank reports nothing
        now = _num(r.get("ts")) or self.clock()
        v.step = _num(r.get("step"))
        v.last_step_ts = now
        nonfinite = False
        loss = _num(r.get("loss"))
        if faults.has("nan-loss"):
            loss = math.nan
        if loss is not None:
            if math.isfinite(loss):
                v.loss = loss
            else:
                v.nonfinite_total += 1
                nonfinite = True
        grad = _num(r.get("grad_norm"))
        if grad is not None:
            v.grad_norm = grad * (100.0 if faults.has("grad-explosion") else 1.0)
        step_time = _num(r.get("step_time_s"))
        if step_time is None and self.prev_step_ts is not None:
            step_time = now - self.prev_step_ts
        self.prev_step_ts = now
        tokens = _num(r.get("tokens"))
        if tokens is not None and step_time and step_time > 0:
            tps = tokens / step_time / self.gpus
            v.tokens_per_second_per_gpu = tps * (0.4 if faults.has("throughput-drop") else 1.0)
        scale = _num(r.get("loss_scale"))
        if scale is not None:
            if v.loss_scale is not None and scale != v.loss_scale:
                v.loss_scale_updates_total += 1
            v.loss_scale = scale
        if step_time and step_time > 0:
            for key, attr in (
                ("dataloader_wait_s", "dataloader_wait_ratio"),
                ("allreduce_s", "allreduce_time_ratio"),
            ):
                part = _num(r.get(key))
                if part is not None:
                    setattr(v, attr, min(1.0, max(0.0, part / step_time)))
        return nonfinite

    def _hello(self, r: dict[str, Any]) -> None:
        """The SDK's first report, and again for each new exporter instance: what a restarted
        sidecar would otherwise have lost (start time, checkpoints) and which GPUs are the pod's."""
        started = _num(r.get("started_at"))
        if started is not None and math.isfinite(started) and started > 0:
            current = self.view.start_ts
            self.view.start_ts = started if current is None else min(current, started)
        if "visible_devices" in r:
            visible = r["visible_devices"]
            self.visible_devices = visible if isinstance(visible, str) else None
        checkpoints = r.get("checkpoints")
        if not isinstance(checkpoints, dict):
            return
        for kind in CHECKPOINT_KINDS:
            c = checkpoints.get(kind)
            if not isinstance(c, dict):
                continue
            ts = _num(c.get("ts"))
            if ts is None or not math.isfinite(ts):
                continue
            known = self.view.checkpoint_ts.get(kind)
            if known is not None and ts <= known:
                continue  # the exporter already knows this one or a newer one
            path = c.get("path")
            self._record_checkpoint(kind, ts, _num(c.get("step")), path if isinstance(path, str) else None)

    def _record_checkpoint(self, kind: str, ts: float, step: float | None, path: Any) -> None:
        self.view.checkpoint_ts[kind] = ts
        if step is not None:
            self.view.checkpoint_step[kind] = step
        best = self.control.resume_from
        if step is not None and (best is None or step >= float(best.get("step", -1))):
            self.control.resume_from = {"step": step, "kind": kind, "path": path}

    def _checkpoint(self, r: dict[str, Any]) -> None:
        kind = str(r.get("kind")) if r.get("kind") in CHECKPOINT_KINDS else "incremental"
        if not r.get("ok", True):
            return
        self._record_checkpoint(kind, _num(r.get("ts")) or self.clock(), _num(r.get("step")), r.get("path"))
        # a requested checkpoint is done once one at least as complete is saved
        if self.control.checkpoint == kind or (self.control.checkpoint == "incremental" and kind == "full"):
            self.control.checkpoint = None
