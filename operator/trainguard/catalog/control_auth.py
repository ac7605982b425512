"""How the operator's calls to a sidecar's control endpoints are authenticated: signed, never carrying the
token itself. The sidecar serves plain HTTP on the pod network, so a bearer token there could be read
off the wire by anyone on the path and replayed for as long as the token lives. A signature over the
method, path, time, a nonce and the body proves the caller holds the monitor's events token, and the
sidecar takes each nonce once within the time it accepts, so a copied request is worth nothing.

The contract both sides share (operator: remediation/sidecars.py; sidecar: exporter/server.py):

    Authorization: TrainguardHMAC ts=<unix seconds>,nonce=<32 hex>,sig=<urlsafe base64, no padding>
    sig = HMAC-SHA256(token, "METHOD\\nPATH\\nts\\nnonce\\n" + hex(SHA-256(body)))
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

SCHEME = "TrainguardHMAC"
MAX_SKEW_S = 30.0
"""How far a request's time may be from the sidecar's clock, either way."""
MAX_NONCES = 10_000
"""Nonces kept at most; a burst beyond it is refused rather than remembered (the operator makes a few
calls per remediation)."""

_HEADER = re.compile(rf"^{SCHEME} ts=(\d{{1,12}}),nonce=([0-9a-f]{{32}}),sig=([A-Za-z0-9_-]{{43}})$")


@dataclass(frozen=True)
class Call:
    """What a signature covers of one request, beside its time and nonce."""

    method: str
    path: str
    body: bytes = b""


def signature(token: str, call: Call, ts: int, nonce: str) -> str:
    digest = hashlib.sha256(call.body).hexdigest()
    message = f"{call.method.upper()}\n{call.path}\n{ts}\n{nonce}\n{digest}"
    mac = hmac.new(token.encode(), message.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


def authorization(token: str, call: Call, *, now: float, nonce: str = "") -> str:
    """The Authorization header value for one call."""
    nonce = nonce or secrets.token_hex(16)
    ts = int(now)
    return f"{SCHEME} ts={ts},nonce={nonce},sig={signature(token, call, ts, nonce)}"


@dataclass
class Nonces:
    """The nonces taken in the last 2 x MAX_SKEW_S (a request older than MAX_SKEW_S is refused by its time,
    so older nonces need not be kept)."""

    clock: Callable[[], float]
    _seen: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, nonce: str) -> bool:
        """True the first time a nonce is offered; False for a replay, or when full."""
        now = self.clock()
        with self._lock:
            if len(self._seen) >= MAX_NONCES:
                self._seen = {n: t for n, t in self._seen.items() if now - t <= 2 * MAX_SKEW_S}
            if nonce in self._seen or len(self._seen) >= MAX_NONCES:
                return False
            self._seen[nonce] = now
            return True


def check(token: str, call: Call, header: str, nonces: Nonces) -> str:
    """Why the call is refused, or "" when it is the operator's: signed with `token`, within MAX_SKEW_S
    of now, its nonce not seen before."""
    if not token:
        return "the sidecar has no token to check calls with"
    found = _HEADER.match(header.strip())
    if not found:
        return f"a signed {SCHEME} Authorization header is required"
    ts, nonce, sig = int(found.group(1)), found.group(2), found.group(3)
    if abs(nonces.clock() - ts) > MAX_SKEW_S:
        return f"the request's time is more than {MAX_SKEW_S:g}s from the sidecar's clock"
    if not hmac.compare_digest(sig, signature(token, call, ts, nonce)):
        return "the signature does not match"
    if not nonces.take(nonce):
        return "the request was seen before"
    return ""
