"""HTTP for the exporter: /metrics and /healthz on TCP for Prometheus and the kubelet, the SDK's
report and control endpoints on a unix socket, and fault injection when enabled.

The TCP port is open to the whole pod network, so it serves nothing that changes or reveals the
training state without the operator's signature (catalog/control_auth.py: the monitor's events token
signs each call and never travels): a report posted there could page someone with a NaN loss or hide a
stall with fake steps, and the control view names checkpoint paths. `--sdk-tcp` opens the SDK's
endpoints on TCP as well, for local development.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

from trainguard.catalog import control_auth
from trainguard.exporter.app import Exporter
from trainguard.exporter.faults import FaultError

log = logging.getLogger("trainguard.exporter.http")
MAX_BODY = 1 << 20


class BadRequest(ValueError):
    pass


def content_length(value: str | None) -> int:
    """A Content-Length to trust: absent is 0; negative, non-numeric or too large is refused (a
    negative one would skip the size check and read to EOF)."""
    if value is None or not value.strip():
        return 0
    text = value.strip()
    if not (text.isascii() and text.isdigit()):  # no sign, no spaces inside, ASCII digits only
        raise BadRequest(f"invalid Content-Length {value!r}")
    length = int(text)
    if length > MAX_BODY:
        raise BadRequest("request body too large")
    return length


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Handler(BaseHTTPRequestHandler):
    exporter: Exporter
    fault_injection: bool = False
    token_file: str | None = None
    nonces: control_auth.Nonces = control_auth.Nonces(time.time)
    """The nonces of the operator's calls this sidecar took (serve() gives each server its own)."""
    sdk: bool = False
    """Serve the SDK's endpoints (report, unauthenticated control view): the unix socket, or TCP
    with --sdk-tcp."""
    server_version = "trainguard-exporter"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def address_string(self) -> str:
        return str(self.client_address[0]) if isinstance(self.client_address, tuple) else "unix"

    def _send(self, code: int, body: bytes = b"", content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, obj: Any) -> None:
        self._send(code, json.dumps(obj).encode())

    def _refuse(self, code: int, message: str) -> None:
        """Answer without reading the body, then close: the connection's framing is not to be trusted."""
        self.close_connection = True
        self._json(code, {"error": message})

    def _authorized(self, body: bytes = b"") -> bool:
        """The operator's control calls are signed with the monitor's events token (mounted from the
        same Secret); a refusal is answered here, naming the scheme (so an operator can tell this sidecar
        from an older one that took the token itself)."""
        token = ""
        if self.token_file:
            with contextlib.suppress(OSError):
                token = Path(self.token_file).read_text().strip()
        call = control_auth.Call(self.command, self.path, body)
        why = control_auth.check(token, call, self.headers.get("Authorization", ""), self.nonces)
        if why:
            # a call that tried to authenticate is worth a warning; an SDK polling the wrong port is not
            level = logging.WARNING if self.headers.get("Authorization") else logging.DEBUG
            log.log(level, "%s %s from %s refused: %s", self.command, self.path, self.address_string(), why)
            self._json(401, {"error": why, "scheme": control_auth.SCHEME})
        return not why

    def do_GET(self) -> None:
        if self.path == "/metrics":
            self._send(200, self.exporter.exposition(), CONTENT_TYPE_LATEST)
        elif self.path == "/healthz":
            self._send(200 if self.exporter.healthy() else 503, b"ok\n", "text/plain")
        elif self.path == "/v1/control":
            if not (self.sdk or self._authorized()):
                return
            self._json(200, self.exporter.training.control_view())
        elif self.path == "/v1/hardware":
            if not self._authorized():
                return
            self._json(200, {"faults": self.exporter.hardware_faults()})
        elif self.path == "/v1/faults" and self.fault_injection:
            self._json(200, self.exporter.faults.describe())
        else:
            self._send(404, b"not found\n", "text/plain")

    def do_POST(self) -> None:
        try:
            length = content_length(self.headers.get("Content-Length"))
        except BadRequest as exc:
            self._refuse(400, str(exc))  # the body's end is unknown: do not read it
            return
        raw = self.rfile.read(length) if length else b""
        if self.path == "/v1/report" and not self.sdk:
            self._json(
                403, {"error": "reports are accepted on the SDK's unix socket only (or TCP with --sdk-tcp)"}
            )
            return
        if self.path == "/v1/control" and not self._authorized(raw):
            return
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, json.JSONDecodeError) as exc:
            self._json(400, {"error": str(exc)})
            return
        if self.path == "/v1/report":
            events = body.get("events") if isinstance(body, dict) else None
            if not isinstance(events, list):
                self._json(400, {"error": 'expected {"events": [...]}'})
                return
            self.exporter.ingest([e for e in events if isinstance(e, dict)])
            self._send(204)
        elif self.path == "/v1/control":
            try:
                self.exporter.training.set_control(body)
            except (ValueError, TypeError) as exc:
                self._json(400, {"error": str(exc)})
                return
            self._json(200, self.exporter.training.control_view())
        elif self.path == "/v1/faults" and self.fault_injection:
            try:
                gpu, percent = body.get("gpu"), body.get("percent")
                self.exporter.add_fault(
                    str(body.get("fault")),
                    None if gpu is None else int(gpu),
                    None if percent is None else float(percent),
                )
            except (FaultError, ValueError, TypeError) as exc:
                self._json(400, {"error": str(exc)})
                return
            log.warning("fault injected: %s", body)
            self.exporter.render()
            self._json(200, self.exporter.faults.describe())
        else:
            self._send(404, b"not found\n", "text/plain")

    def do_DELETE(self) -> None:
        if self.path == "/v1/faults" and self.fault_injection:
            self.exporter.faults.clear()
            self.exporter.render()
            self._send(204)
        else:
            self._send(404, b"not found\n", "text/plain")


class UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def serve(
    exporter: Exporter,
    host: str,
    port: int,
    *,
    socket_path: str | None = None,
    fault_injection: bool = False,
    token_file: str | None = None,
    sdk_tcp: bool = False,
) -> list[socketserver.BaseServer]:
    """Start the servers on daemon threads and return them (shutdown() stops each)."""
    common = {"exporter": exporter, "fault_injection": fault_injection, "token_file": token_file,
              "nonces": control_auth.Nonces(time.time)}  # fmt: skip
    tcp = type("TCPHandler", (Handler,), common | {"sdk": sdk_tcp})
    if sdk_tcp and not is_loopback(host):
        log.warning("--sdk-tcp on %s: any pod that reaches this port can post training reports (a NaN loss "
                    "pages someone, fake steps hide a stall); use it on loopback only", host)  # fmt: skip
    servers: list[socketserver.BaseServer] = [ThreadingHTTPServer((host, port), tcp)]
    if socket_path:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)
        Path(socket_path).parent.mkdir(parents=True, exist_ok=True)
        servers.append(UnixHTTPServer(socket_path, type("UnixHandler", (Handler,), common | {"sdk": True})))
        os.chmod(socket_path, 0o666)  # the training containers run as other users
    for s in servers:
        threading.Thread(target=s.serve_forever, name=f"http-{type(s).__name__}", daemon=True).start()
    return servers
