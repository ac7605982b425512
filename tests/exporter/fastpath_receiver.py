"""A test stand-in for the operator's receiver of fast-path events (POST /v1/events): it records what
arrives and when, and answers 401 to a wrong bearer as the receiver does."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.processes import free_port


class Receiver:
    """A test stand-in for the operator's receiver: records what arrives and when."""

    def __init__(self, token: str, reject_first: int = 0) -> None:
        self.token = token
        self.got: list[tuple[float, str, dict[str, Any]]] = []
        self.attempts = 0
        self.reject_first = reject_first
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                outer.attempts += 1
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                auth = self.headers.get("Authorization", "")
                if outer.attempts <= outer.reject_first:
                    self.send_response(503)
                elif auth != f"Bearer {outer.token}":
                    self.send_response(401)
                else:
                    outer.got.append((time.monotonic(), auth, body))
                    self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/events"


@contextlib.contextmanager
def receiver(token: str, **kw: Any) -> Iterator[Receiver]:
    r = Receiver(token, **kw)
    try:
        yield r
    finally:
        r.server.shutdown()
        r.server.server_close()
