"""A notification sink: an HTTP server on loopback that records what a real Alertmanager's webhook
receivers post, one path per receiver (http://127.0.0.1:PORT/<receiver>)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Notification:
    receiver: str
    """The path the webhook posted to, without its slash."""
    status: str
    """The notification's status: firing or resolved."""
    alerts: tuple[dict[str, Any], ...]
    """Alertmanager's alerts as posted: status, labels, annotations, startsAt, endsAt."""
    at: float = 0.0
    """When the post arrived (time.time())."""


@dataclass
class Sink:
    url: str = ""
    got: list[Notification] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def receiver_url(self, receiver: str) -> str:
        return f"{self.url}/{receiver}"

    def notifications(self) -> list[Notification]:
        with self._lock:
            return list(self.got)

    def deliveries(self) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
        """(receiver, sorted labels) of every firing alert delivered."""
        return {
            (n.receiver, tuple(sorted(a["labels"].items())))
            for n in self.notifications()
            for a in n.alerts
            if a.get("status") == "firing"
        }

    def wait(self, done: Callable[[Sink], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if done(self):
                return True
            time.sleep(0.1)
        return done(self)


@contextlib.contextmanager
def serve() -> Iterator[Sink]:
    sink = Sink()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            with sink._lock:
                sink.got.append(
                    Notification(
                        self.path.strip("/"),
                        str(body.get("status", "")),
                        tuple(body.get("alerts") or ()),
                        time.time(),
                    )
                )
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    sink.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="notification-sink", daemon=True)
    thread.start()
    try:
        yield sink
    finally:
        server.shutdown()
        server.server_close()
