"""The operator's HTTPS intake: Alertmanager's webhook (POST /v1/alerts) and the sidecars' fast-path
events (POST /v1/events).

A request is answered in this order: the path (404), the method (405), a standby replica (503 with
Retry-After: Alertmanager and the sidecars retry on 5xx), the bearer token's presence (401), the
Content-Length (400, before a byte of the body is read), the body (400 naming the field), the sender,
then `on_signals`, and 200 once it returned: the operator's `on_signals` returns once every signal that
could be acted on is in its monitor's status, so a 200 means the signal will be acted on; it raises
pending.NotRecorded when that write failed: 503 with Retry-After, and the sender posts again (500 if it
raised anything else). The sender of /v1/alerts holds the monitor's "alerts" token for every monitor
the body names, derived with the uid of that monitor as the operator's watch cache holds it now
(`monitors`): 401 for a wrong token or a monitor that does not exist now (a token of a monitor deleted
and created again under its name is wrong), 503 with Retry-After when the cache has not listed yet or
cannot reach the API, so that Alertmanager posts again. The sender of /v1/events is a pod
whose projected ServiceAccount token a TokenReview verifies (`senders`, remediation/senders.py: 401
for a token that names no pod, 403 naming why that pod may not speak for the monitor, 503 when the
review cannot be made), and the event's pod and node are taken from that identity. Nothing is passed
on from a request that fails any check. A token is never logged.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from trainguard.kube.errors import NotSynced, Stale
from trainguard.remediation import tokens
from trainguard.remediation.identity import Refused
from trainguard.remediation.model import Signal
from trainguard.remediation.pending import NotRecorded
from trainguard.remediation.signals import PayloadError, from_alertmanager, from_fastpath

log = logging.getLogger("trainguard.remediation.receiver")

ALERTS_PATH = "/v1/alerts"
EVENTS_PATH = "/v1/events"
RETRY_AFTER_S = 5
REQUEST_TIMEOUT_S = 10.0
"""A client that stalls mid-handshake or mid-body holds a thread no longer than this."""
_LINGER_S = 2.0
_LINGER_BYTES = 16 << 20
_DIGITS = re.compile(r"[0-9]+\Z", re.ASCII)

SOURCES = {ALERTS_PATH: "alertmanager", EVENTS_PATH: "fastpath"}
RESULTS = {
    400: "invalid",
    401: "unauthorized",
    403: "unauthorized",
    405: "invalid",
    500: "failed",
    503: "standby",
}
"""What a refused post counts as in the operator's metrics, by status (a 200 is "accepted")."""

_ROUTES: dict[str, tuple[str | None, Callable[[Any, float], list[Signal]]]] = {
    ALERTS_PATH: (tokens.ALERTS, from_alertmanager),
    EVENTS_PATH: (None, lambda body, now: [from_fastpath(body, now)]),  # the sender's identity instead
}


_ABSENT_UID = "no-such-monitor"
"""What a token is checked against for a monitor the cache does not hold (then refused whatever the
check says), so that an absent monitor costs the same time as a present one."""


class MonitorUids(Protocol):
    def monitor_uid(self, namespace: str, name: str) -> str | None:
        """The metadata.uid of the monitor as the operator's watch cache holds it now, None when it holds
        no such monitor; raises kube.errors.NotSynced or Stale when the cache cannot say
        (kube.ClusterCache.monitor_uid)."""
        ...


class SenderCheck(Protocol):
    def admit(self, token: str, signals: list[Signal]) -> list[Signal]:
        """The signals as taken from the pod the token names, or identity.Refused."""
        ...


@dataclass
class ReceiverConfig:
    host: str
    port: int
    certfile: str
    keyfile: str
    key: bytes
    """The operator key tokens are derived from (tokens.load_key)."""
    max_body: int = 1 << 20
    max_connections: int = 64
    """Connections served at once; one more is closed unanswered (the sender retries), so a flood of
    slow clients holds at most this many threads."""


class _Reject(Exception):
    def __init__(
        self, status: int, reason: str, headers: dict[str, str] | None = None, result: str | None = None
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = headers or {}
        self.result = result or RESULTS.get(status, "invalid")


def _bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def _content_length(values: list[str] | None, max_body: int) -> int:
    if not values:
        raise _Reject(400, "Content-Length: missing (chunked bodies are not accepted)")
    if len(values) > 1:
        raise _Reject(400, "Content-Length: given more than once")
    if not _DIGITS.match(values[0].strip()):
        raise _Reject(400, "Content-Length: not a non-negative integer")
    length = int(values[0].strip())
    if length > max_body:
        raise _Reject(400, f"body: {length} bytes is over the limit of {max_body}")
    return length


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    receiver: Receiver
    slots: threading.BoundedSemaphore
    refused = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            if self.refused in (1, 10, 100) or self.refused % 1000 == 0:
                log.warning("%d connection(s) refused: %d are being served, the most at once",
                            self.refused, self.receiver.config.max_connections)  # fmt: skip
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # TLS handshakes that fail, clients that hang up: worth a debug line, not a traceback
        log.debug("connection from %s ended with an error", client_address[0], exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "trainguard-receiver"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    timeout = REQUEST_TIMEOUT_S
    _unread_body = False

    def setup(self) -> None:
        super().setup()  # applies the timeout to the socket
        conn = self.connection
        if isinstance(conn, ssl.SSLSocket):
            conn.do_handshake()  # here, on the connection's own thread, not in the accept loop

    def do_POST(self) -> None:
        self._serve("POST")

    def do_GET(self) -> None:
        self._serve("GET")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_OPTIONS(self) -> None:
        self._serve("OPTIONS")

    def _serve(self, method: str) -> None:
        self._unread_body = True
        receiver = self.server.receiver
        try:
            status, body = receiver.handle(method, self.path.split("?", 1)[0], self._read_request)
            self._respond(status, body, {})
        except _Reject as r:
            self._respond(r.status, {"error": r.reason}, r.headers)

    def _read_request(self, max_body: int) -> tuple[str | None, bytes]:
        token = _bearer(self.headers.get("Authorization"))
        if token is None:
            raise _Reject(401, "a bearer token is required", {"WWW-Authenticate": "Bearer"})
        if self.headers.get("Transfer-Encoding") is not None:
            raise _Reject(400, "Transfer-Encoding: not accepted; send a Content-Length")
        length = _content_length(self.headers.get_all("Content-Length"), max_body)
        data = self.rfile.read(length)
        if len(data) != length:
            raise _Reject(400, f"body: ended after {len(data)} of {length} bytes")
        self._unread_body = False
        return token, data

    def _respond(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        if self._unread_body:
            # the body was not read, so the connection cannot carry another request
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.wfile.flush()

    def finish(self) -> None:
        super().finish()
        if self._unread_body:
            self._linger()

    def _linger(self) -> None:
        """Discard what the client is still sending, briefly, before closing: closing a socket with
        unread data resets the connection, and the client would lose the answer saying why."""
        conn = self.connection
        try:
            # on an SSLSocket this drops the TLS layer: what follows is raw bytes, discarded unread
            conn.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + _LINGER_S
            drained = 0
            while drained < _LINGER_BYTES:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                conn.settimeout(left)
                chunk = conn.recv(65536)
                if not chunk:
                    break
                drained += len(chunk)
        except (OSError, ValueError):
            pass

    def log_message(self, format: str, *args: Any) -> None:
        # the request line holds no token; headers are never logged
        log.debug("%s %s", self.client_address[0], format % args)


class Receiver:
    """Serves the intake on a daemon thread. `on_signals` runs on the request's thread (several may
    run at once); the answer waits for it, so a 200 means the signals were taken in (recorded, with the
    operator's intake) and a NotRecorded it raises is a 503 with Retry-After."""

    def __init__(
        self,
        config: ReceiverConfig,
        on_signals: Callable[[list[Signal]], None],
        accepting: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
        observe: Callable[[str, str], None] = lambda source, result: None,
        *,
        monitors: MonitorUids,
        senders: SenderCheck | None = None,
    ) -> None:
        """`observe(source, result)` is told of each post to a known path (the operator's metrics);
        `monitors` says which monitor object each name is now (the uid Alertmanager's tokens are bound
        to); `senders` checks the fast path's senders (without it, every event is refused)."""
        if len(config.key) < tokens.MIN_KEY_BYTES:
            raise ValueError(f"the operator key must hold at least {tokens.MIN_KEY_BYTES} bytes")
        self.config = config
        self.on_signals = on_signals
        self.accepting = accepting
        self.clock = clock
        self.observe = observe
        self.monitors = monitors
        self.senders = senders
        self.port = config.port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def tls_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.config.certfile, self.config.keyfile)
        return ctx

    def start(self) -> None:
        ctx = self.tls_context()
        server = _Server((self.config.host, self.config.port), _Handler, bind_and_activate=True)
        server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        server.receiver = self
        server.slots = threading.BoundedSemaphore(self.config.max_connections)
        self._server = server
        self.port = int(server.server_address[1])
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="remediation-receiver",
            daemon=True,
        )
        self._thread.start()
        log.info("remediation receiver listening on https://%s:%d", self.config.host, self.port)

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def handle(
        self, method: str, path: str, read: Callable[[int], tuple[str | None, bytes]]
    ) -> tuple[int, dict[str, Any]]:
        """The decision for one request; `read` checks the token's presence and the length, then
        returns the token and the body (or raises _Reject)."""
        source = SOURCES.get(path)
        try:
            answer = self._decide(method, path, read)
        except _Reject as r:
            if source is not None:
                self.observe(source, r.result)
            raise
        if source is not None:
            self.observe(source, "accepted")
        return answer

    def _decide(
        self, method: str, path: str, read: Callable[[int], tuple[str | None, bytes]]
    ) -> tuple[int, dict[str, Any]]:
        route = _ROUTES.get(path)
        if route is None:
            raise _Reject(404, f"no such endpoint: {path}")
        if method != "POST":
            raise _Reject(405, f"{method} is not allowed on {path}; use POST", {"Allow": "POST"})
        if not self.accepting():
            raise _Reject(503, "this replica is on standby; retry", {"Retry-After": str(RETRY_AFTER_S)})
        purpose, parse = route
        token, data = read(self.config.max_body)
        try:
            body = json.loads(data)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError included
            raise _Reject(400, f"body: not JSON: {str(exc)[:200]}") from None
        try:
            signals = parse(body, self.clock())
        except PayloadError as exc:
            raise _Reject(400, str(exc)) from None
        if purpose is None:
            signals = self._sender(path, token or "", signals)
        else:
            self._monitor_token(path, purpose, token or "", signals)
        try:
            self.on_signals(signals)
        except NotRecorded as exc:
            log.warning("%s: %d signal(s) not recorded, answered 503: %s", path, len(signals), exc)
            raise _Reject(
                503, "the signals could not be recorded; retry", {"Retry-After": str(RETRY_AFTER_S)}, "failed"
            ) from None
        except Exception:
            log.exception("%s: handing on %d signal(s) failed", path, len(signals))
            raise _Reject(500, "the signals could not be taken in; retry") from None
        return 200, {"accepted": len(signals), "fingerprints": [s.fingerprint for s in signals]}

    def _monitor_token(self, path: str, purpose: str, token: str, signals: list[Signal]) -> None:
        monitors = sorted({(s.namespace, s.training_job) for s in signals})
        try:
            uids = [self.monitors.monitor_uid(ns, name) for ns, name in monitors]
        except (NotSynced, Stale) as exc:
            log.warning("%s: the tokens cannot be checked now, answered 503: %s", path, exc)
            raise _Reject(
                503,
                "the operator cannot check the token now; retry",
                {"Retry-After": str(RETRY_AFTER_S)},
                "failed",
            ) from None
        # every monitor is checked (no early exit; an absent one against a placeholder uid), so timing
        # says nothing about which one failed or whether it exists
        ok = [
            tokens.verify(self.config.key, purpose, ns, name, uid or _ABSENT_UID, presented=token)
            and uid is not None
            for (ns, name), uid in zip(monitors, uids, strict=True)
        ]
        if not all(ok):
            absent = [f"{ns}/{name}" for (ns, name), uid in zip(monitors, uids, strict=True) if uid is None]
            log.warning(
                "%s: refused a token that is not the %r token of %s%s",
                path,
                purpose,
                ", ".join(f"{ns}/{name}" for ns, name in monitors),
                f" (no such monitor now: {', '.join(absent)})" if absent else "",
            )
            raise _Reject(
                401, "the token is not valid for this endpoint and monitor", {"WWW-Authenticate": "Bearer"}
            )

    def _sender(self, path: str, token: str, signals: list[Signal]) -> list[Signal]:
        """The signals as the pod that sent them may say them (pod and node its own), or a refusal."""
        if self.senders is None:
            raise _Reject(
                401, "this receiver does not check fast-path senders", {"WWW-Authenticate": "Bearer"}
            )
        try:
            return self.senders.admit(token, signals)
        except Refused as r:
            log.warning("%s: refused a fast-path sender (%d): %s", path, r.status, r.reason)
            headers = {
                401: {"WWW-Authenticate": "Bearer"},
                503: {"Retry-After": str(RETRY_AFTER_S)},
            }.get(r.status, {})
            raise _Reject(r.status, r.reason, headers) from None
