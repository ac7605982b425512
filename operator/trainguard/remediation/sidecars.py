"""The sidecars' control endpoint (POST and GET /v1/control with the monitor's bearer token), and which
pods of a gang have a sidecar that can be called. Every call has a timeout: a sidecar on a dying node
must not stall the plan."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

CONTROL_TIMEOUT = 3.0
"""Seconds one sidecar control call may take."""


class ControlError(Exception):
    """A sidecar did not answer its control endpoint with 2xx (or not at all)."""


class SidecarControl:
    def __init__(self, timeout: float = CONTROL_TIMEOUT) -> None:
        self.timeout = timeout

    def _call(self, method: str, url: str, token: str, body: dict[str, Any] | None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:200].decode(errors="replace")
            raise ControlError(f"{method} {url}: HTTP {exc.code} {detail}".strip()) from None
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
