"""The sidecars' control endpoint (POST and GET /v1/control, GET /v1/hardware), called signed with the
monitor's events token (catalog/control_auth.py: the token never travels on the pod network). Every call
has a timeout: a sidecar on a dying node must not stall the plan.

A sidecar older than signed calls answers 401 without naming the scheme: that one is called again with
the token as a bearer, as it expects, until its pod is replaced (docs/trust.md)."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from trainguard.catalog import control_auth

log = logging.getLogger("trainguard.remediation.sidecars")

CONTROL_TIMEOUT = 3.0
"""Seconds one sidecar control call may take."""


class ControlError(Exception):
    """A sidecar did not answer its control endpoint with 2xx (or not at all)."""


class _Unauthorized(Exception):
    def __init__(self, message: str, scheme: str) -> None:
        super().__init__(message)
        self.message, self.scheme = message, scheme


def _scheme(raw: bytes) -> str:
    """The scheme a 401's JSON body names ("" from a sidecar older than signed calls)."""
    try:
        answer = json.loads(raw)
    except ValueError:
        return ""
    return str(answer.get("scheme") or "") if isinstance(answer, dict) else ""


class SidecarControl:
    def __init__(self, timeout: float = CONTROL_TIMEOUT, clock: Callable[[], float] = time.time) -> None:
        self.timeout = timeout
        self.clock = clock

    def _call(self, method: str, url: str, token: str, body: dict[str, Any] | None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        path = urllib.parse.urlsplit(url).path
        signed = control_auth.authorization(
            token, control_auth.Call(method, path, data or b""), now=self.clock()
        )
        try:
            return self._send(method, url, data, signed)
        except _Unauthorized as exc:
            if exc.scheme:  # a sidecar that checks signatures refused this one: no bearer for it
                raise ControlError(exc.message) from None
            log.info("%s predates signed calls: calling it with the bearer token", url)
            try:
                return self._send(method, url, data, f"Bearer {token}")
            except _Unauthorized as again:
                raise ControlError(again.message) from None

    def _send(self, method: str, url: str, data: bytes | None, authorization: str) -> dict[str, Any]:
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", authorization)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raw = exc.read()[:400]
            detail = raw[:200].decode(errors="replace")
            message = f"{method} {url}: HTTP {exc.code} {detail}".strip()
            if exc.code == 401:
                raise _Unauthorized(message, _scheme(raw)) from None
            raise ControlError(message) from None
        except (OSError, ValueError) as exc:  # refused, timed out, unreachable, not JSON
            raise ControlError(f"{method} {url}: {exc}") from None
        if not isinstance(answer, dict):
            raise ControlError(f"{method} {url}: expected a JSON object")
        return answer

    def control(self, base_url: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/control; the answer is the sidecar's control view after the change."""
        return self._call("POST", f"{base_url}/v1/control", token, body)

    def read_control(self, base_url: str, token: str) -> dict[str, Any]:
        return self._call("GET", f"{base_url}/v1/control", token, None)

    def read_hardware(self, base_url: str, token: str) -> dict[str, Any]:
        """GET /v1/hardware: the GPU faults the sidecar saw itself ({"faults": [...]})."""
        return self._call("GET", f"{base_url}/v1/hardware", token, None)
