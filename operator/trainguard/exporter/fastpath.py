"""The fast path: P0 signals detected in the sidecar and posted straight to the operator.

Detection is pure (previous and current readings in, events out); the sender posts each event on
its own thread, retries with backoff, and gives up at once on a rejected token instead of retrying
forever. Its bearer is the pod's projected ServiceAccount token (audience trainguard.io/events), read
from its file for every attempt because the kubelet rotates it; the operator checks it with a
TokenReview and takes the pod and node from it. Without that file (a cluster or a run that projects
none) the event is still posted, with no bearer: the operator refuses it (401) and counts the refusal,
and the sender logs why; the alert still reaches the operator through Prometheus and Alertmanager.
"""

from __future__ import annotations

import json
import logging
import queue
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainguard.catalog import FATAL_XIDS
from trainguard.catalog.events import fingerprint
from trainguard.catalog.severity import grade_labels
from trainguard.exporter.readings import GPUReading

log = logging.getLogger("trainguard.exporter.fastpath")


def event(alertname: str, labels: dict[str, str], summary: str, now: float) -> dict[str, Any]:
    # the grade in priority and, for an operator that predates it, in severity too
    full = {"alertname": alertname, **grade_labels("P0"), **labels}
    return {
        "source": "sidecar",
        "labels": full,
        "annotations": {"summary": summary},
        "fingerprint": fingerprint(full),
        "startsAt": now,
    }


def detect_gpu_faults(
    previous: list[GPUReading] | None, current: list[GPUReading], base: dict[str, str], now: float
) -> list[dict[str, Any]]:
    """DBE counter increases, newly seen fatal XIDs and GPUs that just fell off the bus (edges only:
    a fault already reported is not news)."""
    before = {r.index: r for r in previous or []}
    out = []
    for r in current:
        old = before.get(r.index)
        labels = base | {"gpu": str(r.index), "UUID": r.uuid}
        if r.lost and (old is None or not old.lost):
            out.append(event("GPULost", labels, f"GPU {r.index} is lost (fell off the bus)", now))
        before_dbe = None if old is None else old.ecc_dbe_total
        if before_dbe is not None and r.ecc_dbe_total is not None and r.ecc_dbe_total > before_dbe:
            out.append(event("GPUDoubleBitECCError", labels, f"double-bit ECC error on GPU {r.index}", now))
        xid = int(r.last_xid or 0)
        if xid in FATAL_XIDS and (old is None or int(old.last_xid or 0) != xid):
            out.append(
                event("GPUCriticalXid", labels | {"xid": str(xid)}, f"fatal XID {xid} on GPU {r.index}", now)
            )
    return out


def detect_stall(last_step_ts: float | None, now: float, threshold_s: float) -> bool:
    return last_step_ts is not None and now - last_step_ts > threshold_s


def _reason(exc: urllib.error.HTTPError) -> str:
    """The receiver's reason for a refusal (its JSON `error`), which names why and never the token."""
    try:
        return str(json.loads(exc.read() or b"{}").get("error") or exc.reason)[:300]
    except (ValueError, OSError, AttributeError):
        return str(exc.reason)


@dataclass
class FastPathSender:
    url: str
    token_file: str | None
    """The projected ServiceAccount token (render/sidecar.py's IDENTITY_DIR), read for every attempt."""
    timeout_s: float = 2.0
    max_attempts: int = 6
    ca_file: str | None = None
    sleep: Callable[[float], None] = time.sleep
    repeat_after_s: float = 60.0
    """The same fingerprint is posted at most once in this long (a NaN every step is one event)."""
    clock: Callable[[], float] = time.monotonic
    results: dict[str, int] = field(default_factory=dict)
    _queue: queue.Queue[dict[str, Any]] = field(default_factory=lambda: queue.Queue(maxsize=256))
    _last: dict[str, float] = field(default_factory=dict)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fastpath", daemon=True)
        self._thread.start()

    def send(self, ev: dict[str, Any]) -> bool:
        """Queue an event unless the same fingerprint went out within repeat_after_s."""
        now = self.clock()
        last = self._last.get(ev["fingerprint"])
        if last is not None and now - last < self.repeat_after_s:
            return False
        self._last[ev["fingerprint"]] = now
        try:
            self._queue.put_nowait(ev)
        except queue.Full:
            self._count("dropped")
            return False
        return True

    def _count(self, result: str) -> None:
        self.results[result] = self.results.get(result, 0) + 1

    def _token(self) -> str | None:
        if not self.token_file:
            return None
        try:
            return Path(self.token_file).read_text().strip() or None
        except OSError:
            return None

    def _tls(self) -> ssl.SSLContext:
        """The receiver's CA when the mounted Secret has one (read each time: it may arrive later), else
        the system's; a missing or unreadable file never stops the sender."""
        if self.ca_file and Path(self.ca_file).is_file():
            try:
                return ssl.create_default_context(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as exc:
                log.warning("cannot use the CA file %s (%s); using the system's CAs", self.ca_file, exc)
        return ssl.create_default_context()

    def _run(self) -> None:
        while True:
            self.post(self._queue.get())

    def post(self, ev: dict[str, Any]) -> str:
        """Deliver one event; returns the result (sent, unauthorized, failed)."""
        data = json.dumps(ev).encode()
        context = self._tls() if self.url.startswith("https") else None
        delay = 0.1
        for attempt in range(1, self.max_attempts + 1):
            headers = {"Content-Type": "application/json"}
            token = self._token()
            if token:
                headers["Authorization"] = f"Bearer {token}"
            req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s, context=context):
                    self._count("sent")
                    return "sent"
            except urllib.error.HTTPError as exc:
                if exc.code in (401, 403):
                    # a wrong token does not get better by retrying; never log the token itself
                    log.error(
                        "fast-path receiver refused the sender (%d: %s); event %s not delivered",
                        exc.code,
                        _reason(exc) if token else f"no identity token at {self.token_file or '(none)'}",
                        ev["fingerprint"],
                    )
                    self._count("unauthorized")
                    return "unauthorized"
                if 400 <= exc.code < 500:
                    self._count("rejected")
                    return "rejected"
            except (urllib.error.URLError, OSError, TimeoutError):
                pass
            if attempt < self.max_attempts:
                self.sleep(delay)
                delay = min(delay * 2, 5.0)
        self._count("failed")
        return "failed"
