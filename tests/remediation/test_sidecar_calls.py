"""The operator's calls to a sidecar (remediation/sidecars.py) against a real exporter process: signed,
never the bearer token; and against a sidecar older than signed calls (a stand-in server that answers as
the previous release did: a 401 naming no scheme, a bearer token taken), the bearer as a fallback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.exporter.running import running_exporter
from trainguard.remediation.sidecars import ControlError, SidecarControl

TOKEN = "t0k3n"


def test_a_sidecar_that_checks_signatures_gets_them_and_refuses_a_wrong_token(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    flags = ("--backend", "none", "--no-host", "--fastpath-token-file", str(token))
    with running_exporter(*flags, socket_path=str(tmp_path / "sdk.sock"), sdk_tcp=False) as exp:
        client = SidecarControl()
        assert client.control(exp.url, TOKEN, {"pause": True})["pause"] is True
        assert client.read_control(exp.url, TOKEN)["pause"] is True
        assert client.read_hardware(exp.url, TOKEN) == {"faults": []}
        with pytest.raises(ControlError, match=r"HTTP 401 .*the signature does not match"):
            client.read_control(exp.url, "wrong")


@contextmanager
def older_sidecar(seen: list[str]) -> Iterator[str]:
    """The previous release's control endpoint: a bearer token, a 401 without a scheme."""

    class Old(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            auth = self.headers.get("Authorization", "")
            seen.append(auth.split(" ", 1)[0])
            ok = auth == f"Bearer {TOKEN}"
            body = json.dumps(
                {"pause": False} if ok else {"error": "a valid bearer token is required"}
            ).encode()
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Old)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_a_sidecar_older_than_signed_calls_gets_the_bearer_token_after_its_401() -> None:
    seen: list[str] = []
    with older_sidecar(seen) as url:
        assert SidecarControl().read_control(url, TOKEN) == {"pause": False}
        assert seen == ["TrainguardHMAC", "Bearer"]
        with pytest.raises(ControlError, match="HTTP 401"):
            SidecarControl().read_control(url, "wrong")
