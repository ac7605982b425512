"""Certificates and keys for the local control plane, made with the openssl command line."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d: Path, name: str = "ca", *, cn: str | None = None, pkcs1: bool = False) -> None:
    """A self-signed CA `name.crt`/`name.key`, CN trainguard-e2e-<name> unless `cn` is given (which then
    is its DNS name too, as cert-controller's rotator checks a CA it finds); `pkcs1`: the key in PKCS#1
    PEM (BEGIN RSA PRIVATE KEY), the only form that rotator reads."""
    extra = ["-addext", f"subjectAltName=DNS:{cn}"] if cn else []
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj", f"/CN={cn or f'trainguard-e2e-{name}'}",
             *extra, "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=d)  # fmt: skip
    if pkcs1:
        _openssl("rsa", "-in", f"{name}.key", "-traditional", "-out", f"{name}.key", cwd=d)


def make_cert(
    d: Path, name: str, subject: str, sans: list[str] | None = None, *, ca: str = "ca", client: bool = False
) -> None:
    """A leaf certificate `name.crt`/`name.key` signed by `ca`."""
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        subject,
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        cwd=d,
    )
    ext = d / f"{name}.ext"
    lines = ["basicConstraints=CA:FALSE", "keyUsage=digitalSignature,keyEncipherment"]
    lines.append("extendedKeyUsage=" + ("clientAuth" if client else "serverAuth"))
    if sans:
        lines.append("subjectAltName=" + ",".join(sans))
    ext.write_text("\n".join(lines) + "\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "3650", "-extfile", ext.name, "-out", f"{name}.crt", cwd=d)  # fmt: skip


def make_keypair(d: Path, name: str) -> None:
    _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=d)
    _openssl("rsa", "-in", f"{name}.key", "-pubout", "-out", f"{name}.pub", cwd=d)
