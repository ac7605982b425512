"""The exporter's core: poll the hardware on a thread, render the exposition there, and keep the
bytes a scrape serves. A slow or hung NVML call delays the next snapshot, never a scrape."""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest

from trainguard.catalog.alerts import TRAINING_INTERRUPTED
from trainguard.exporter.assignment import Assignment, resolve
from trainguard.exporter.collectors import (
    ExporterCollector,
    GPUCollector,
    HostCollector,
    Snapshot,
    SnapshotBox,
    TrainingCollector,
)
from trainguard.exporter.fastpath import FastPathSender, detect_gpu_faults, detect_stall, event
from trainguard.exporter.faults import Faults
from trainguard.exporter.host import KSWAPD_HIDDEN, MEMINFO_UNREADABLE, HostReader
from trainguard.exporter.readings import DriverInfo, GPUDevice, GPUReading, HostReading
from trainguard.exporter.restarts import interruption, launcher_state
from trainguard.exporter.slowdowns import newly_throttled
from trainguard.exporter.training import TrainingState

log = logging.getLogger("trainguard.exporter")


class GPUBackend(Protocol):
    info: DriverInfo
    error: str
    """Why no GPU can be read ("" when the backend works)."""

    def devices(self) -> list[GPUDevice]: ...

    def read(self, only: Collection[int] | None = None) -> list[GPUReading]: ...

    def close(self) -> None: ...


@dataclass
class ExporterConfig:
    identity: dict[str, str]
    backend_name: str = "nvml"
    poll_interval_s: float = 1.0
    render_interval_s: float = 1.0
    gpu_timeout_s: float = 3.0
    stall_after_s: float = 300.0
    gpu_ids: str | None = None
    """--gpu-ids: this pod's GPUs as UUIDs or NVML indices."""
    gpus_per_pod: int | None = None
    """--gpus-per-pod as given: equal to the node's GPU count, the pod owns them all."""
    filter_gpus: bool = True
    """Export only this pod's GPUs (NVML sees the whole node); a simulated backend needs no filter."""
    trace_id: str = ""


HARDWARE_MEMORY_S = 3600.0
HARDWARE_KEPT = 64
"""How long, and how many, GPU faults this sidecar detected are kept for the operator to confirm."""


@dataclass
class Exporter:
    config: ExporterConfig
    backend: GPUBackend | None
    host: HostReader | None
    training: TrainingState
    faults: Faults
    registry: CollectorRegistry
    fastpath: FastPathSender | None = None
    clock: Callable[[], float] = time.time
    box: SnapshotBox = field(default_factory=SnapshotBox)
    errors: dict[str, float] = field(default_factory=dict)
    _gpus: list[GPUReading] = field(default_factory=list)
    _faulted_prev: list[GPUReading] | None = None
    _host: HostReading = field(default_factory=HostReading)
    _exposition: bytes = b""
    _render_lock: threading.Lock = field(default_factory=threading.Lock)
    _gpu_thread: threading.Thread | None = None
    _gpu_result: list[GPUReading] | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _stalled: bool = False
    assignment: Assignment = field(default_factory=lambda: Assignment(None, "unknown", "not polled yet"))
    _gpu_problem: str = ""
    _hardware: list[dict[str, Any]] = field(default_factory=list)
    _hardware_lock: threading.Lock = field(default_factory=threading.Lock)
    _host_problem: str = ""
    _kswapd_problem: str = ""

    def __post_init__(self) -> None:
        for cls in (GPUCollector, HostCollector, TrainingCollector, ExporterCollector):
            self.registry.register(cls(self.box, self.config.identity))
        self.training.faults = self.faults

    # ---- polling ----

    def _assign(self, backend: GPUBackend) -> Assignment:
        """Which GPUs are this pod's, re-decided every poll (the SDK's hello may arrive at any time);
        a change is logged once."""
        devices = backend.devices()
        if not self.config.filter_gpus:
            new = Assignment(frozenset(d.index for d in devices), "all")
        else:
            new = resolve(devices, flag=self.config.gpu_ids, visible=self.training.reported_visible_devices(),
                          gpus_per_pod=self.config.gpus_per_pod)  # fmt: skip
        if new != self.assignment and (devices or self.assignment.source != "unknown"):
            if new.indices is None:
                log.warning("no GPU series are exported: this pod's GPUs are not known (%s); pass --gpu-ids, "
                            "or let the SDK report NVIDIA_VISIBLE_DEVICES", new.reason)  # fmt: skip
            else:
                log.info("exporting GPUs %s of this node (from %s)%s", sorted(new.indices), new.source,
                         f"; {new.reason}" if new.reason else "")  # fmt: skip
                if self.config.gpus_per_pod is None:
                    self.training.set_gpus(len(new.indices))  # tokens/s per GPU of this pod
        self.assignment = new
        return new

    def _read_gpus(self) -> None:
        backend = self.backend
        if backend is None:
            return
        if self._gpu_thread is not None and self._gpu_thread.is_alive():
            self.errors["gpu"] = self.errors.get("gpu", 0) + 1  # the last read is still hung
            self._gpu_problem = f"read hung for over {self.config.gpu_timeout_s:g}s"
            log.warning(
                "GPU read still running after %.1fs; keeping the last snapshot", self.config.gpu_timeout_s
            )
            return
        self._gpu_result = None
        failure: list[str] = []

        def work() -> None:
            try:
                if not backend.devices():
                    backend.read(frozenset())  # a backend that failed to start tries again when due
                only = self._assign(backend).indices or frozenset()  # unknown: read none, drain XIDs
                self._gpu_result = backend.read(only)
            except Exception as exc:
                log.warning("GPU read failed: %s", exc)
                failure.append(f"read failed: {type(exc).__name__}")
                self.errors["gpu"] = self.errors.get("gpu", 0) + 1

        self._gpu_thread = threading.Thread(target=work, name="gpu-read", daemon=True)
        self._gpu_thread.start()
        self._gpu_thread.join(self.config.gpu_timeout_s)
        if self._gpu_thread.is_alive():
            self.errors["gpu"] = self.errors.get("gpu", 0) + 1
            self._gpu_problem = f"read hung for over {self.config.gpu_timeout_s:g}s"
            return
        self._gpu_problem = failure[0] if failure else ""
        if self._gpu_result is not None:
            self._gpus = self._gpu_result

    def _read_host(self) -> None:
        if self.host is None:
            return
        try:
            self._host = self.host.read()
            # kswapd hidden by the pod's PID namespace costs the swap signal only: memory, disks and
            # network are still delivered, so the host collector is up and kswapd says why it is not
            self._host_problem = "" if self._host.memory_used_ratio is not None else MEMINFO_UNREADABLE
            self._kswapd_problem = "" if self._host.kswapd_visible else KSWAPD_HIDDEN
        except Exception as exc:
            log.warning("host read failed: %s", exc)
            self.errors["host"] = self.errors.get("host", 0) + 1
            self._host_problem = self._kswapd_problem = f"read failed: {type(exc).__name__}"

    def poll_hardware(self) -> None:
        self._read_gpus()
        self._read_host()

    def render(self) -> bytes:
        """Build the snapshot (faults applied) and render it; also runs the fast-path detectors.

        Runs on the poller and, after a fault is injected, on an HTTP thread: the lock keeps the
        detectors' edge state (previous readings, stalled or not) consistent between the two."""
        with self._render_lock:
            return self._render()

    def _render(self) -> bytes:
        now = self.clock()
        mine = self.assignment.indices or frozenset()
        gpus = self.faults.apply_gpus(copy.deepcopy([r for r in self._gpus if r.index in mine]))
        host = self.faults.apply_host(copy.deepcopy(self._host))
        view = self.training.snapshot()
        self._detect(gpus, view.last_step_ts, now)
        snap = Snapshot(
            gpus=gpus,
            host=host,
            training=view,
            driver=self.backend.info if self.backend is not None else DriverInfo(supported=False),
            backend=self.config.backend_name,
            errors=dict(self.errors),
            fastpath=dict(self.fastpath.results) if self.fastpath else None,
            collectors=self._collectors(),
            assignment=self.assignment if self.backend is not None else None,
            trace_id=self.config.trace_id,
        )
        self.box.set(snap)
        self._exposition = generate_latest(self.registry)
        self._faulted_prev = gpus
        return self._exposition

    def _collectors(self) -> dict[str, str]:
        """collector -> "" (up) or why it is down; a collector that is switched off is left out."""
        out = {"training": ""}  # pushed by the SDK: nothing to fail but rendering, which is logged
        if self.backend is not None:
            out["gpu"] = self.backend.error or self.backend.info.problem or self._gpu_problem
        if self.host is not None:
            out["host"] = self._host_problem
            out["kswapd"] = self._kswapd_problem
        return out

    def _detect(self, gpus: list[GPUReading], last_step_ts: float | None, now: float) -> None:
        base = dict(self.config.identity)
        for ev in detect_gpu_faults(self._faulted_prev, gpus, base, now):
            self._saw(ev, now)  # kept for the operator to confirm, whether or not the fast path is on
            if self.fastpath is not None:
                self.fastpath.send(ev)
        for gpu, reason in newly_throttled(self._faulted_prev, gpus):  # a P1: kept to confirm, never sent
            labels = base | {"gpu": str(gpu), "reason": reason}
            self._saw(event("GPUClocksThrottled", labels, f"GPU {gpu} clocks throttled ({reason})", now), now)
        if self.fastpath is None:
            return
        stalled = detect_stall(last_step_ts, now, self.config.stall_after_s)
        if stalled and not self._stalled:
            self.fastpath.send(event("TrainingJobStalled", base, "no step completed on this rank", now))
        self._stalled = stalled

    def _saw(self, ev: dict[str, Any], now: float) -> None:
        labels = ev["labels"]
        fault = {k: labels[k] for k in ("alertname", "gpu", "UUID", "xid") if k in labels}
        with self._hardware_lock:
            kept = [f for f in self._hardware if now - f["at"] < HARDWARE_MEMORY_S]
            self._hardware = [*kept, {**fault, "at": now}][-HARDWARE_KEPT:]

    def hardware_faults(self) -> list[dict[str, Any]]:
        """GET /v1/hardware: the GPU faults this sidecar detected itself in the last hour, which the
        operator asks for before it cordons a node on an alert's word."""
        now = self.clock()
        with self._hardware_lock:
            return [dict(f) for f in self._hardware if now - f["at"] < HARDWARE_MEMORY_S]

    def on_nonfinite_loss(self) -> None:
        """Called on the SDK's request thread: the event leaves within the same request."""
        if self.fastpath is None:
            return
        labels = dict(self.config.identity)
        self.fastpath.send(
            event("TrainingLossNonFinite", labels, "training produced a non-finite loss", self.clock())
        )

    def on_oom(self, report: dict[str, Any]) -> None:
        """A CUDA out-of-memory error the trainer reported: GPUOutOfMemory by the fast path, since the
        trainer may die right after and the rule's copy is a scrape and an evaluation away."""
        if self.fastpath is None:
            return
        labels = dict(self.config.identity)
        device = report.get("device")
        where = f" on GPU {device}" if isinstance(device, int) and not isinstance(device, bool) else ""
        self.fastpath.send(
            event("GPUOutOfMemory", labels, f"the trainer ran out of GPU memory{where}", self.clock())
        )

    def on_trainer_exit(self, report: dict[str, Any]) -> None:
        """`trainguard launch` saw its trainer end by itself, failed (an OOM kill, a crash): the pod lives on
        (the launcher waits for the operator's word), so no pod state will ever show it. TrainingInterrupted
        by the fast path, as the operator's own detection names a failed training container."""
        state = launcher_state(report)
        reason = interruption(state) if state is not None else None
        if self.fastpath is None or reason is None or state is None:
            return
        labels = {**self.config.identity, "reason": reason}
        summary = f"the trainer of generation {state['generation']} ended: {reason}"
        self.fastpath.send(event(TRAINING_INTERRUPTED, labels, summary, self.clock()))

    def add_fault(self, kind: str, gpu: int | None = None) -> None:
        """Fault injection: `oom` is what a trainer's OOM report does, fast-path event included."""
        self.faults.add(kind, gpu)
        if kind == "oom":
            self.on_oom({"type": "oom", "device": gpu})

    def exposition(self) -> bytes:
        return self._exposition

    def healthy(self) -> bool:
        return bool(self._exposition) and not self._stop.is_set()

    def ingest(self, reports: list[dict[str, Any]]) -> None:
        for report in reports:
            if self.training.ingest(report):
                self.on_nonfinite_loss()
            elif report.get("type") == "oom":
                self.on_oom(report)
            elif report.get("type") == "launcher" and report.get("event") == "exited":
                self.on_trainer_exit(report)

    # ---- lifecycle ----

    def run(self) -> None:
        """The polling loop: hardware every poll interval, a fresh exposition every render interval.
        start() has just polled, so the first poll here is one interval later."""
        next_poll = time.monotonic() + self.config.poll_interval_s
        while not self._stop.is_set():
            if time.monotonic() >= next_poll:
                self.poll_hardware()
                next_poll = time.monotonic() + self.config.poll_interval_s
            try:
                self.render()
            except Exception:
                log.exception("rendering the exposition failed")
                self.errors["training"] = self.errors.get("training", 0) + 1
            self._stop.wait(self.config.render_interval_s)

    def start(self) -> threading.Thread:
        self.poll_hardware()
        self.render()
        thread = threading.Thread(target=self.run, name="poller", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()
        if self.backend is not None:
            self.backend.close()
