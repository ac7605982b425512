"""HTTP to the sidecar over TCP or a unix socket, with short timeouts."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any
from urllib.parse import urlparse


class Refused(OSError):
    """The sidecar answered 401 or 403: it does not take the SDK's calls on this endpoint (its TCP
    port without --sdk-tcp). Trying again changes nothing."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


class Transport:
    """`http://host:port` or `unix:///path.sock`."""

    def __init__(self, endpoint: str, timeout: float = 1.0) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        url = urlparse(endpoint)
        self.unix = url.scheme == "unix"
        self.path = url.path
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or 9400
        if url.scheme not in ("http", "unix"):
            raise ValueError(
                f"TRAINGUARD_ENDPOINT must be http://HOST:PORT or unix:///PATH (got {endpoint!r})"
            )

    def _conn(self, timeout: float) -> http.client.HTTPConnection:
        if self.unix:
            return UnixHTTPConnection(self.path, timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        """The decoded JSON answer. Every failure is an OSError or a ValueError (bad JSON), so a caller
        that must never raise catches those two: a garbled answer (http.client.HTTPException) is one,
        a refusal (401, 403) is the OSError `Refused`."""
        conn = self._conn(self.timeout if timeout is None else timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json"} if data is not None else {}
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            if resp.status in (401, 403):
                raise Refused(resp.status, f"sidecar refused {method} {path} with {resp.status}")
            if resp.status >= 400:
                raise OSError(f"sidecar answered {resp.status} to {method} {path}")
            return json.loads(raw) if raw else None
        except http.client.HTTPException as exc:
            raise OSError(f"sidecar gave a malformed answer to {method} {path}: {exc!r}") from exc
        finally:
            conn.close()
