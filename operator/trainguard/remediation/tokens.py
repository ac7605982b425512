"""Per-monitor bearer tokens, derived from one operator key.

The operator hands each monitor's sidecars and Alertmanager receiver a token it can check again by
deriving it, so it never reads a Secret back (its RBAC may write Secrets, not read them). The purpose
is part of the derivation: a sidecar's "events" token cannot post to /v1/alerts, and a token for one
monitor is worth nothing for another. So is the monitor's metadata.uid, which the apiserver gives each
object it creates: a monitor deleted and created again under the same name is another object, with new
tokens, and whoever kept the old Secret's tokens holds nothing. Every check therefore derives from the
uid of the monitor as it is now (the receiver reads it from the operator's watch cache).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from pathlib import Path

EVENTS = "events"
"""Purpose of the token mounted into a monitor's sidecars: the operator's calls to their control
endpoint carry it. It no longer authenticates fast-path events: a sidecar posts those as its pod,
with a projected ServiceAccount token (remediation/identity.py)."""
ALERTS = "alerts"
"""Purpose of the token Alertmanager posts a monitor's alerts with."""
PURPOSES: tuple[str, ...] = (EVENTS, ALERTS)
MIN_KEY_BYTES = 32


def derive(key: bytes, purpose: str, namespace: str, name: str, uid: str) -> str:
    """HMAC-SHA256 of "purpose\\nnamespace\\nname\\nuid" under the key, urlsafe base64 without
    padding. Newlines cannot occur in Kubernetes names or the uids the apiserver assigns, so no two
    quadruples share a message. `uid` is the monitor's metadata.uid; without one there is no object to
    bind the token to (ValueError)."""
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"the operator key must hold at least {MIN_KEY_BYTES} bytes")
    if not uid:
        raise ValueError(
            f"monitor {namespace}/{name} has no metadata.uid: its tokens are bound to it (read the monitor "
            "from the apiserver, which assigns one)"
        )
    mac = hmac.new(key, f"{purpose}\n{namespace}\n{name}\n{uid}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


def verify(key: bytes, purpose: str, namespace: str, name: str, uid: str, *, presented: str) -> bool:
    """Whether `presented` is the token for this purpose and monitor (the object with this uid), compared
    in constant time."""
    expected = derive(key, purpose, namespace, name, uid).encode("ascii")
    try:
        given = presented.encode("ascii")
    except UnicodeEncodeError:
        return False
    return hmac.compare_digest(expected, given)


def load_key(path: str | Path) -> bytes:
    """The operator key from a mounted file, surrounding whitespace stripped."""
    try:
        key = Path(path).read_bytes().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the operator key {path}: {exc.strerror or exc}") from None
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(
            f"the operator key {path} holds {len(key)} bytes; at least {MIN_KEY_BYTES} are needed "
            f"(make one with: head -c 48 /dev/urandom | base64)"
        )
    return key


def new_key() -> bytes:
    """A fresh key, printable so that it fits a Secret's stringData and survives strip()."""
    return base64.urlsafe_b64encode(secrets.token_bytes(48))
