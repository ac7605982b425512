"""Self-managed TLS for the admission webhook and the remediation receiver, for clusters without
cert-manager (`trainguard operator --self-managed-certs`).

The Secret WEBHOOK_CERT_SECRET in the operator's namespace is the source of truth: a private CA
(`ca.key`, and `ca.crt`, the bundle of every CA still trusted, the signing one first) and the
serving certificate (`tls.crt`, `tls.key`) for the webhook Service's DNS names and the receiver's
host. Every replica reads it, serves what it holds and reloads it without a restart (all replicas
must present a certificate the webhook configuration's caBundle trusts); whoever starts first
creates it (a lost create race reads the winner's); only the leader rotates it, by an update that
carries the resourceVersion it read, so two writers cannot both win.

Rotation: the serving certificate is reissued once a third of its lifetime (at most renew_before)
is left, or when the names it must cover change. The CA is renewed the same way, in two steps so
that the apiserver never sees a certificate its caBundle does not trust: first the new CA joins
the bundle (the serving certificate still chains to the old one), and only `propagation` later is
the serving certificate reissued by the new CA; an old CA leaves the bundle when it expires.

The decisions (`plan`, `serving_names`, `renewal_due`) are pure, with the clock passed in; the
Secret, the files and the webhook configuration are written by `SelfManagedCerts` at the edge.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import logging
import os
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("trainguard.webhook_certs")

WEBHOOK_CERT_SECRET = "trainguard-operator-webhook-tls"
"""The Secret the operator keeps its CA and serving certificate in (fixed: RBAC names it)."""
CA_KEY = "ca.key"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class CertPolicy:
    """Lifetimes. Renewal is due when min(lifetime / 3, renew_before) is left: 90 days renew at 30
    days left, a 30-second test certificate at 10 seconds left."""

    serving_lifetime: dt.timedelta = dt.timedelta(days=90)
    ca_lifetime: dt.timedelta = dt.timedelta(days=3650)
    renew_before: dt.timedelta = dt.timedelta(days=30)
    propagation: dt.timedelta | None = None
    """How long a new CA sits in the caBundle before a certificate it signed is served; default
    min(10 minutes, ca_lifetime / 20)."""

    @property
    def ca_propagation(self) -> dt.timedelta:
        if self.propagation is not None:
            return self.propagation
        return min(dt.timedelta(minutes=10), self.ca_lifetime / 20)

    @property
    def check_interval(self) -> float:
        """Seconds between two reads of the Secret: far below any renewal margin."""
        return max(1.0, min(60.0, self.serving_lifetime.total_seconds() / 12))


@dataclass(frozen=True)
class Names:
    """The subject alternative names the serving certificate must carry."""

    dns: tuple[str, ...] = ()
    ips: tuple[IPAddress, ...] = ()


def serving_names(namespace: str, service: str | None, urls: Iterable[str | None]) -> Names:
    """The Service's DNS names (the apiserver calls name.namespace.svc; sidecars may use any form)
    and the host of each URL the webhook or the receiver is reached at (an IP for an operator
    outside the cluster)."""
    dns: set[str] = set()
    ips: set[IPAddress] = set()
    if service:
        dns |= {service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
                f"{service}.{namespace}.svc.cluster.local"}  # fmt: skip
    for url in urls:
        host = urlsplit(url).hostname if url else None
        if not host:
            continue
        try:
            ips.add(ipaddress.ip_address(host))
        except ValueError:
            dns.add(host.lower())
    return Names(dns=tuple(sorted(dns)), ips=tuple(sorted(ips, key=lambda a: (a.version, int(a)))))


def cert_names(cert: x509.Certificate) -> Names:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return Names()
    dns = sorted(str(n).lower() for n in san.get_values_for_type(x509.DNSName))
    ips = [a for a in san.get_values_for_type(x509.IPAddress) if isinstance(a, IPAddress)]
    return Names(dns=tuple(dns), ips=tuple(sorted(ips, key=lambda a: (a.version, int(a)))))


def renewal_due(cert: x509.Certificate, now: dt.datetime, renew_before: dt.timedelta) -> bool:
    """Whether min(a third of its lifetime, renew_before) or less is left (or it is not valid yet,
    which a clock set back would show)."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    margin = min((end - start) / 3, renew_before)
    return now >= end - margin or now < start


@dataclass(frozen=True)
class Material:
    """What the Secret holds, parsed."""

    ca_cert: x509.Certificate
    ca_key: ec.EllipticCurvePrivateKey
    trusted: tuple[x509.Certificate, ...]
    """ca.crt: the signing CA first, then older CAs not yet expired."""
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def bundle(self) -> bytes:
        return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in self.trusted)

    def secret_data(self) -> dict[str, str]:
        """The Secret's data (base64), kubernetes.io/tls plus ca.crt and ca.key."""
        pem = serialization.Encoding.PEM
        fields = {
            "tls.crt": self.cert.public_bytes(pem),
            "tls.key": _key_pem(self.key),
            "ca.crt": self.bundle(),
            CA_KEY: _key_pem(self.ca_key),
        }
        return {k: base64.b64encode(v).decode("ascii") for k, v in fields.items()}


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def material_from_data(data: dict[str, str] | None) -> Material | None:
    """Parse a Secret's data; None when anything is missing or unreadable (it is then replaced)."""
    try:
        raw = {k: base64.b64decode((data or {})[k]) for k in ("tls.crt", "tls.key", "ca.crt", CA_KEY)}
        ca_key = serialization.load_pem_private_key(raw[CA_KEY], password=None)
        key = serialization.load_pem_private_key(raw["tls.key"], password=None)
        trusted = tuple(x509.load_pem_x509_certificates(raw["ca.crt"]))
        cert = x509.load_pem_x509_certificate(raw["tls.crt"])
    except (KeyError, ValueError, TypeError) as exc:
        log.warning("Secret %s holds no usable certificates (%s): issuing new ones", WEBHOOK_CERT_SECRET, exc)
        return None
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey) or not isinstance(key, ec.EllipticCurvePrivateKey):
        return None
    signing = [c for c in trusted if c.public_key() == ca_key.public_key()]
    if not signing or cert.public_key() != key.public_key():
        return None
    return Material(ca_cert=signing[0], ca_key=ca_key, trusted=trusted, cert=cert, key=key)


def signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


@dataclass(frozen=True)
class Plan:
    """What to change in the Secret, and why (logged)."""

    fresh: bool = False
    """Start over: a new CA alone in the bundle and a serving certificate it signed."""
    new_ca: bool = False
    """A new CA joins the bundle and signs from now on (the serving certificate stays as it is)."""
    new_serving: bool = False
    """Reissue the serving certificate, signed by the CA that signs now (already in the bundle)."""
    drop: tuple[x509.Certificate, ...] = ()
    reasons: tuple[str, ...] = ()

    @property
    def changes(self) -> bool:
        return self.fresh or self.new_ca or self.new_serving or bool(self.drop)


def _valid(cert: x509.Certificate, now: dt.datetime) -> bool:
    return cert.not_valid_before_utc <= now < cert.not_valid_after_utc


def plan(material: Material | None, names: Names, now: dt.datetime, policy: CertPolicy) -> Plan:
    """The rotation decision for the Secret as read at `now`."""
    if material is None:
        return Plan(fresh=True, reasons=("no certificates yet",))
    ca, cert = material.ca_cert, material.cert
    if not _valid(ca, now):
        return Plan(fresh=True, reasons=("the CA is not valid now",))
    reasons: list[str] = []
    new_ca = renewal_due(ca, now, policy.ca_lifetime)
    if new_ca:
        reasons.append("the CA is due for renewal (the new CA joins the bundle first)")
    if not _valid(cert, now):
        reasons.append("the serving certificate is not valid now")
    elif not any(signed_by(cert, c) for c in material.trusted):
        reasons.append("the serving certificate chains to no CA in the bundle")
    else:
        # while the serving certificate still chains to the old CA and the new one is younger than
        # `propagation`, nothing is reissued: the new CA may not be in the apiserver's caBundle yet
        moving = not signed_by(cert, ca)
        settled = not moving or now - issued(ca) >= policy.ca_propagation
        if settled and renewal_due(cert, now, policy.renew_before):
            reasons.append("the serving certificate is due for renewal")
        if settled and cert_names(cert) != names:
            reasons.append("the serving certificate's names changed")
        if settled and moving:
            reasons.append("the serving certificate moves to the new CA")
    new_serving = len(reasons) > int(new_ca)
    drop = tuple(c for c in material.trusted if c != ca and now >= c.not_valid_after_utc)
    if drop:
        reasons.append(f"{len(drop)} expired CA(s) leave the bundle")
    return Plan(new_ca=new_ca, new_serving=new_serving, drop=drop, reasons=tuple(reasons))


def _backdate(lifetime: dt.timedelta) -> dt.timedelta:
    """Valid from a little before now, for nodes whose clocks are behind ours."""
    return min(dt.timedelta(minutes=5), lifetime / 10)


def issued(cert: x509.Certificate) -> dt.datetime:
    """When a certificate made here was issued: its notBefore undone of _backdate (lifetime / 10 of
    the lifetime, so window / 11, at most 5 minutes)."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return start + min(dt.timedelta(minutes=5), (end - start) / 11)


def _usage(*, ca: bool) -> x509.KeyUsage:
    """Signing only (ECDSA keys sign the handshake); a CA also signs certificates and CRLs."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def issue_ca(now: dt.datetime, lifetime: dt.timedelta) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    stamp = now.strftime("%Y%m%d%H%M%S")
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"trainguard-operator-ca-{stamp}")])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _backdate(lifetime))
        .not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(ca=True), critical=True)
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def issue_serving(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    names: Names,
    now: dt.datetime,
    lifetime: dt.timedelta,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A server certificate for `names`, never outliving its CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    common = names.dns[0] if names.dns else str(names.ips[0]) if names.ips else "trainguard-operator"
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names.dns]
    sans += [x509.IPAddress(a) for a in names.ips]
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common[:64])]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(max(now - _backdate(lifetime), ca.not_valid_before_utc))
        .not_valid_after(min(now + lifetime, ca.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def carry_out(
    material: Material | None, step: Plan, names: Names, now: dt.datetime, policy: CertPolicy
) -> Material:
    """The Secret's next contents under `step` (new keys are random; nothing else is)."""
    if material is None or step.fresh:
        ca, ca_key = issue_ca(now, policy.ca_lifetime)
        cert, key = issue_serving(ca, ca_key, names, now, policy.serving_lifetime)
        return Material(ca_cert=ca, ca_key=ca_key, trusted=(ca,), cert=cert, key=key)
    ca, ca_key = material.ca_cert, material.ca_key
    trusted = tuple(c for c in material.trusted if c not in step.drop)
    cert, key = material.cert, material.key
    if step.new_serving:
        # signed by the CA the apiserver already trusts: a CA made in this same step is not in the
        # webhook configuration's caBundle yet
        cert, key = issue_serving(ca, ca_key, names, now, policy.serving_lifetime)
    if step.new_ca:
        ca, ca_key = issue_ca(now, policy.ca_lifetime)
        trusted = (ca, *trusted)
    return Material(ca_cert=ca, ca_key=ca_key, trusted=trusted, cert=cert, key=key)


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
        _write(self.key_file, _key_pem(material.key))
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


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class SelfManagedCerts:
    """The edge: the Secret (read, created, updated), the files and contexts the servers use, and
    the webhook configuration's caBundle. `sync` once before the servers start, then `start`."""

    core: Any
    """kubernetes.client.CoreV1Api."""
    namespace: str
    names: Names
    policy: CertPolicy
    tls: ReloadableTLS
    leader: Callable[[], bool]
    apply_bundle: Callable[[bytes], None] | None = None
    """Writes the webhook configuration with this caBundle (None: the operator does not manage it)."""
    on_bundle: Callable[[bytes], None] = lambda bundle: None
    """Told of each new bundle (the receiver's CA that the sidecars and Alertmanager get)."""
    clock: Callable[[], dt.datetime] = utcnow
    timeout: float = 30.0
    material: Material | None = None
    _version: str | None = None
    _applied: bytes | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _read(self) -> tuple[Material | None, str | None, bool]:
        """(material, resourceVersion, exists)."""
        try:
            secret = self.core.read_namespaced_secret(
                WEBHOOK_CERT_SECRET, self.namespace, _request_timeout=self.timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return None, None, False
            raise
        return material_from_data(secret.data), secret.metadata.resource_version, True

    def _body(self, material: Material, version: str | None) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": WEBHOOK_CERT_SECRET,
            "namespace": self.namespace,
            "labels": {"app.kubernetes.io/part-of": "trainguard"},
        }
        if version is not None:
            meta["resourceVersion"] = version
        return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "kubernetes.io/tls",
                "data": material.secret_data()}  # fmt: skip

    def sync(self) -> Material:
        """Read the Secret; create it when absent; on the leader, rotate what is due; then serve
        what the Secret holds. A write that loses a race (409) takes the winner's Secret."""
        for _ in range(3):
            material, version, exists = self._read()
            now = self.clock()
            step = plan(material, self.names, now, self.policy)
            if step.changes and (not exists or self.leader()):
                new = carry_out(material, step, self.names, now, self.policy)
                try:
                    if exists:
                        self.core.replace_namespaced_secret(WEBHOOK_CERT_SECRET, self.namespace,
                                                            self._body(new, version), _request_timeout=self.timeout)  # fmt: skip
                    else:
                        self.core.create_namespaced_secret(self.namespace, self._body(new, None),
                                                           _request_timeout=self.timeout)  # fmt: skip
                except ApiException as exc:
                    if exc.status == 409:
                        continue  # another replica wrote first: read its Secret
                    raise
                log.info("Secret %s/%s %s: %s", self.namespace, WEBHOOK_CERT_SECRET,
                         "updated" if exists else "created", "; ".join(step.reasons))  # fmt: skip
                material = new
            if material is None:
                raise RuntimeError(
                    f"Secret {self.namespace}/{WEBHOOK_CERT_SECRET} holds no usable certificates"
                )
            self._serve(material)
            return material
        raise RuntimeError(f"Secret {self.namespace}/{WEBHOOK_CERT_SECRET}: three write conflicts in a row")

    def _serve(self, material: Material) -> None:
        old = self.material
        if old is None or old.cert != material.cert or old.trusted != material.trusted:
            self.tls.load(material)
            if old is not None:
                log.info("serving the renewed certificate (serial %x, valid until %s)",
                         material.cert.serial_number, material.cert.not_valid_after_utc)  # fmt: skip
        self.material = material
        bundle = material.bundle()
        if old is None or old.bundle() != bundle:
            self.on_bundle(bundle)
        if self.apply_bundle is not None and bundle != self._applied:
            self.apply_bundle(bundle)
            self._applied = bundle

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="webhook-certs", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.policy.check_interval):
            try:
                self.sync()
            except Exception as exc:
                log.error("cannot sync Secret %s/%s: %s", self.namespace, WEBHOOK_CERT_SECRET, exc)
