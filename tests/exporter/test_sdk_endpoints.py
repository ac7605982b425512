"""The TCP port is open to the pod network: it serves metrics, health and the operator's
authenticated control calls, while the SDK's report and control view stay on the unix socket unless
--sdk-tcp says otherwise. A request body is never read past a length the server cannot trust."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.exporter.running import running_exporter
from tests.processes import free_port
from trainguard.catalog import control_auth
from trainguard.exporter.server import content_length, serve

NAN_STEP = {"events": [{"type": "step", "step": 1, "loss": "nan"}]}


def unix_request(sock: str, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    class Conn(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(sock)

    conn = Conn("localhost", timeout=5)
    conn.request(
        method, path, None if body is None else json.dumps(body), {"Content-Type": "application/json"}
    )
    resp = conn.getresponse()
    return resp.status, resp.read()


def status(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> int:
    req = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_reports_and_the_control_view_are_not_served_on_tcp(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t0k3n\n")
    sock = str(tmp_path / "sdk.sock")
    with running_exporter("--backend", "none", "--no-host", "--fastpath-token-file", str(token),
                          socket_path=sock, sdk_tcp=False) as exp:  # fmt: skip
        assert status(f"{exp.url}/v1/report", json.dumps(NAN_STEP).encode()) == 403
        assert exp.value("trainguard_train_nonfinite_loss_total") == 0, "a pod on the network paged nobody"
        assert status(f"{exp.url}/v1/control") == 401, "checkpoint paths are not for every pod"
        assert status(f"{exp.url}/v1/control", headers={"Authorization": "Bearer t0k3n"}) == 401, (
            "the token itself is not taken: it would travel in clear on the pod network"
        )
        signed = {"Authorization": control_auth.authorization("t0k3n", control_auth.Call("GET", "/v1/control"),
                                                              now=time.time())}  # fmt: skip
        assert status(f"{exp.url}/v1/control", headers=signed) == 200
        assert status(f"{exp.url}/v1/control", headers=signed) == 401, "a copied request is refused"
        pause = b'{"pause": true}'
        post = control_auth.authorization(
            "t0k3n", control_auth.Call("POST", "/v1/control", pause), now=time.time()
        )
        assert status(f"{exp.url}/v1/control", b'{"pause": false}', {"Authorization": post}) == 401, (
            "the signature covers the body"
        )
        assert status(f"{exp.url}/v1/control", pause, {"Authorization": post}) == 200
        assert status(f"{exp.url}/metrics") == 200 and status(f"{exp.url}/healthz") == 200
        # the SDK's own path: the unix socket
        assert unix_request(sock, "POST", "/v1/report", NAN_STEP)[0] == 204
        assert exp.value("trainguard_train_nonfinite_loss_total") == 1
        code, body = unix_request(sock, "GET", "/v1/control")
        assert code == 200 and json.loads(body)["pause"] is True
        assert unix_request(sock, "POST", "/v1/control", {"pause": False})[0] == 401, "still the operator's"


def test_sdk_tcp_serves_them_on_tcp_for_local_development() -> None:
    with running_exporter("--backend", "none", "--no-host", sdk_tcp=True) as exp:
        assert status(f"{exp.url}/v1/report", json.dumps(NAN_STEP).encode()) == 204
        assert status(f"{exp.url}/v1/control") == 200


def test_sdk_tcp_on_a_non_loopback_address_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="trainguard.exporter.http")
    with running_exporter("--backend", "none", "--no-host") as exp:
        for host, warned in (("127.0.0.1", False), ("0.0.0.0", True)):
            caplog.clear()
            servers = serve(exp.exporter, host, free_port(), sdk_tcp=True)
            for s in servers:
                s.shutdown()
                s.server_close()
            assert any("--sdk-tcp" in r.getMessage() for r in caplog.records) == warned, host


def raw_post(url: str, length: str) -> bytes:
    """A POST whose Content-Length is `length`, with the connection left open (as an attacker would)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=3) as s:
        s.sendall(f"POST /v1/report HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n{{}}".encode())
        return s.recv(4096)  # the old code read to EOF: this timed out


@pytest.mark.parametrize("length", ["-1", "abc", "+2", " 1_0", str(2 << 20)])
def test_a_bad_content_length_is_a_400_not_a_read_to_eof(length: str) -> None:
    with running_exporter("--backend", "none", "--no-host") as exp:
        assert raw_post(exp.url, length).startswith(b"HTTP/1.1 400"), length


def test_content_length_parsing() -> None:
    assert content_length(None) == 0 and content_length("") == 0 and content_length("12") == 12
    for bad in ("-1", "1e3", "0x10", "١٢"):
        with pytest.raises(ValueError):
            content_length(bad)
