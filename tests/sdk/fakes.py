"""Stand-ins for what the SDK talks to: a sidecar over HTTP, and the objects torch, transformers,
accelerate and Lightning hand a callback where the real ones need a GPU (fp16 loss scaling, the CUDA
allocator). tests/sdk_frameworks runs the callbacks on the real frameworks, on CPU.

Each stand-in has the attributes the real object has, with its awkward parts: a disabled GradScaler
still answers get_scale() with 1.0, torch.cuda.memory_stats() gives zeros for a device this process
never used, and a Lightning fp32 plugin has no `scaler` attribute at all."""

from __future__ import annotations

import json
import threading
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trainguard.sdk import Reporter


class FakeSidecar:
    """The exporter's two SDK endpoints: POST /v1/report (204) and GET /v1/control (a JSON object).
    `control` is what GET answers; `report_status` other than 204 makes reports fail the way a
    sidecar in trouble does; `on_report` runs while a report is being answered."""

    def __init__(self, control: dict[str, Any] | None = None) -> None:
        self.control: dict[str, Any] = control if control is not None else {
            "pause": False, "checkpoint": None, "advisories": [], "resume_from": None}  # fmt: skip
        self.batches: list[list[dict[str, Any]]] = []
        self.control_gets = 0
        self.report_status = 204
        self.control_delay_s = 0.0
        self.on_report: Any = None
        self.lock = threading.Lock()

    @property
    def events(self) -> list[dict[str, Any]]:
        with self.lock:
            return [e for batch in self.batches for e in batch]

    def hellos(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == "hello"]

    def handler(self) -> type[BaseHTTPRequestHandler]:
        sidecar = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def _send(self, status: int, body: bytes = b"") -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path != "/v1/control":
                    self._send(404)
                    return
                time.sleep(sidecar.control_delay_s)
                with sidecar.lock:
                    sidecar.control_gets += 1
                    body = json.dumps(sidecar.control).encode()
                self._send(200, body)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/v1/report":
                    self._send(404)
                    return
                if sidecar.on_report is not None:
                    sidecar.on_report()
                if sidecar.report_status != 204:
                    self._send(sidecar.report_status, b'{"error": "unavailable"}')
                    return
                with sidecar.lock:
                    sidecar.batches.append(json.loads(raw)["events"])
                self._send(204)

        return Handler


@contextmanager
def running_sidecar(control: dict[str, Any] | None = None) -> Iterator[tuple[FakeSidecar, str]]:
    sidecar = FakeSidecar(control)
    server = ThreadingHTTPServer(("127.0.0.1", 0), sidecar.handler())
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield sidecar, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class Recorder(Reporter):
    """A Reporter that keeps its events instead of sending them."""

    def __init__(self, **kwargs: Any) -> None:
        self.events: list[dict[str, Any]] = []  # before the constructor queues its hello
        super().__init__("http://127.0.0.1:9", start=False, incremental_every=10, full_every=100, **kwargs)

    def _put(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def reports(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]


class GradScaler:
    """torch.amp.GradScaler as the SDK reads it: get_scale() is 1.0 when disabled (torch's answer)."""

    def __init__(self, init_scale: float = 65536.0, enabled: bool = True) -> None:
        self._scale = init_scale
        self._enabled = enabled

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def update(self, new_scale: float) -> None:
        self._scale = new_scale


class AcceleratedOptimizer:
    """accelerate's wrapper, what transformers' Trainer passes its callbacks as `optimizer`:
    `scaler` is the GradScaler with fp16, None otherwise (bf16, fp32, DeepSpeed)."""

    def __init__(self, scaler: GradScaler | None) -> None:
        self.optimizer = types.SimpleNamespace(param_groups=[{"lr": 1e-4}])
        self.scaler = scaler


def hf_callback_kwargs(optimizer: Any) -> dict[str, Any]:
    """The keyword arguments transformers' CallbackHandler passes every event."""
    return {"model": types.SimpleNamespace(training=True), "processing_class": None, "optimizer": optimizer,
            "lr_scheduler": object(), "train_dataloader": [], "eval_dataloader": None}  # fmt: skip


class MixedPrecision:
    """Lightning's MixedPrecision plugin: a GradScaler for "16-mixed", None for "bf16-mixed"."""

    def __init__(self, precision: str, scaler: GradScaler | None) -> None:
        self.precision = precision
        self.scaler = scaler


class Precision:
    """Lightning's plain (fp32) plugin: no `scaler` attribute."""

    precision = "32-true"


def lightning_trainer(plugin: Any, *, old_style: bool, global_step: int = 0) -> types.SimpleNamespace:
    """A Lightning Trainer: older releases expose `trainer.precision_plugin`, newer ones keep it on
    `trainer.strategy.precision_plugin`."""
    trainer = types.SimpleNamespace(global_step=global_step, should_stop=False, ckpt_path=None,
                                    checkpoint_callbacks=[], default_root_dir="/out",
                                    save_checkpoint=lambda path, weights_only=False: None,
                                    strategy=types.SimpleNamespace(precision_plugin=plugin))  # fmt: skip
    if old_style:
        trainer.precision_plugin = plugin
    return trainer


class Cuda:
    """torch.cuda's allocator statistics: `used` maps device -> (reserved, allocated) bytes; a device
    this process never allocated on reports zeros; without CUDA, memory_stats must not be called."""

    def __init__(
        self, available: bool, count: int = 0, used: dict[int, tuple[int, int]] | None = None
    ) -> None:
        self.available = available
        self.count = count if available else 0
        self.used = used or {}
        self.stats_calls = 0

    def is_available(self) -> bool:
        return self.available

    def device_count(self) -> int:
        return self.count

    def memory_stats(self, device: int = 0) -> dict[str, int]:
        if not self.available:
            raise AssertionError("Torch not compiled with CUDA enabled")
        if not 0 <= device < self.count:
            raise AssertionError("Invalid device id")
        self.stats_calls += 1
        reserved, allocated = self.used.get(device, (0, 0))
        return {"reserved_bytes.all.current": reserved, "allocated_bytes.all.current": allocated,
                "num_alloc_retries": 0}  # fmt: skip


class NumpyInt64:
    """Like numpy.int64 (a step counter kept in numpy): int() and float() work, json.dumps does not."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __float__(self) -> float:
        return float(self.value)
