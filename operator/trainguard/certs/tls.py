"""Server-side TLS whose certificate can change under a listening socket, for the webhook and the
receiver on self-managed certificates."""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization

from trainguard.certs.ca import Material, key_pem


class ReloadableTLS:
    """Server-side TLS whose certificate can change under a listening socket: the contexts handed to
    the servers switch each new handshake to the newest context (sni_callback runs on every
    ClientHello, with or without a server name), so a rotation needs no restart and drops no
    connection in flight."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.cert_file = directory / "tls.crt"
        self.key_file = directory / "tls.key"
        self.ca_file = directory / "ca.crt"
        self._current: ssl.SSLContext | None = None

    def load(self, material: Material) -> None:
        """Write the files (for servers that want paths) and make the new context current."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write(self.key_file, key_pem(material.key))
        _write(self.cert_file, material.cert.public_bytes(serialization.Encoding.PEM))
        _write(self.ca_file, material.bundle())
        self._current = self._context()

    def _context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        return ctx

    def server_context(self) -> ssl.SSLContext:
        """A context for a server socket; it follows every later `load`."""
        ctx = self._context()

        def switch(conn: Any, server_name: str | None, _: ssl.SSLContext) -> None:
            current = self._current
            if current is not None and conn.context is not current:
                conn.context = current

        ctx.sni_callback = switch
        return ctx


def _write(path: Path, data: bytes) -> None:
    """Atomically, readable by us only: a reader never sees half a key."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
