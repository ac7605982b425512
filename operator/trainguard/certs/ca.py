"""The self-managed certificate authority's decisions, pure with the clock passed in: which names the
serving certificate must cover, when a certificate or the CA is due, and what the Secret holds next.

Rotation: the serving certificate is reissued once a third of its lifetime (at most renew_before)
is left, or when the names it must cover change. The CA is renewed the same way, in two steps so
that the apiserver never sees a certificate its caBundle does not trust: first the new CA joins
the bundle (the serving certificate still chains to the old one), and only `propagation` later is
the serving certificate reissued by the new CA; an old CA leaves the bundle when it expires.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger("trainguard.certs")

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
            "tls.key": key_pem(self.key),
            "ca.crt": self.bundle(),
            CA_KEY: key_pem(self.ca_key),
        }
        return {k: base64.b64encode(v).decode("ascii") for k, v in fields.items()}


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
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


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
