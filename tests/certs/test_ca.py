"""Self-managed webhook certificates: what is issued (names, usages, validity) and when it rotates,
with the clock passed in; and a real TLS server that presents the renewed certificate without a
restart."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from trainguard.certs.ca import (
    CertPolicy,
    Material,
    Names,
    Plan,
    carry_out,
    cert_names,
    material_from_data,
    plan,
    renewal_due,
    serving_names,
    signed_by,
)
from trainguard.certs.tls import ReloadableTLS

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
POLICY = CertPolicy()  # serving 90 days (renewed with 30 left), CA 10 years
NAMES = serving_names("tg", "trainguard-operator", ["https://trainguard-operator.tg.svc:8443"])


def fresh(now: dt.datetime = T0, names: Names = NAMES, policy: CertPolicy = POLICY) -> Material:
    return carry_out(None, plan(None, names, now, policy), names, now, policy)


def step(m: Material, now: dt.datetime, names: Names = NAMES, policy: CertPolicy = POLICY) -> Material:
    return carry_out(m, plan(m, names, now, policy), names, now, policy)


def test_names_cover_every_form_of_the_service_and_the_urls_hosts() -> None:
    names = serving_names(
        "tg", "trainguard-operator", ["https://127.0.0.1:9443", "https://Op.Example:8443", None]
    )
    assert names.dns == (
        "op.example",
        "trainguard-operator",
        "trainguard-operator.tg",
        "trainguard-operator.tg.svc",
        "trainguard-operator.tg.svc.cluster.local",
    )
    assert names.ips == (ipaddress.ip_address("127.0.0.1"),)
    assert serving_names("tg", None, ["https://[::1]:9443"]) == Names(ips=(ipaddress.ip_address("::1"),))


def test_the_serving_certificate_is_a_server_leaf_for_exactly_those_names() -> None:
    m = fresh()
    cert = m.cert
    assert cert_names(cert) == NAMES
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and not usage.key_cert_sign
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert cert.not_valid_after_utc == T0 + 90 * DAY
    assert T0 - dt.timedelta(minutes=5) <= cert.not_valid_before_utc < T0  # backdated for clock skew
    assert signed_by(cert, m.ca_cert)
    assert m.trusted == (m.ca_cert,)


def test_the_ca_signs_certificates_only_and_outlives_the_serving_certificate() -> None:
    ca = fresh().ca_cert
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca is True and constraints.path_length == 0
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    assert ca.not_valid_after_utc == T0 + 3650 * DAY
    assert ca.issuer == ca.subject


def test_a_serving_certificate_never_outlives_its_ca() -> None:
    policy = CertPolicy(serving_lifetime=90 * DAY, ca_lifetime=30 * DAY)
    m = fresh(policy=policy)
    assert m.cert.not_valid_after_utc == m.ca_cert.not_valid_after_utc


@pytest.mark.parametrize(
    ("lifetime", "renew_before", "not_due_at", "due_at"),
    [
        (90 * DAY, 30 * DAY, 59 * DAY, 60 * DAY),  # a third of 90 days is left
        (365 * DAY, 30 * DAY, 334 * DAY, 335 * DAY),  # renew_before is less than a third
        # 30 s, backdated 3 s for clock skew: a third of 33 s (11 s) is left 19 s after issue
        (dt.timedelta(seconds=30), 30 * DAY, dt.timedelta(seconds=18), dt.timedelta(seconds=20)),
    ],
)
def test_renewal_is_due_with_a_third_or_renew_before_left(
    lifetime: dt.timedelta, renew_before: dt.timedelta, not_due_at: dt.timedelta, due_at: dt.timedelta
) -> None:
    cert = fresh(policy=CertPolicy(serving_lifetime=lifetime)).cert
    assert not renewal_due(cert, T0 + not_due_at, renew_before)
    assert renewal_due(cert, T0 + due_at, renew_before)
    assert renewal_due(cert, T0 - DAY, renew_before), "not valid yet: a clock set back"


def test_nothing_changes_until_renewal_is_due() -> None:
    m = fresh()
    for now in (T0, T0 + DAY, T0 + 59 * DAY):
        assert not plan(m, NAMES, now, POLICY).changes


def test_serving_renewal_keeps_the_ca_and_the_bundle() -> None:
    m = fresh()
    renewed = step(m, T0 + 61 * DAY)
    assert renewed.cert.serial_number != m.cert.serial_number
    assert renewed.cert.not_valid_after_utc == T0 + 151 * DAY
    assert renewed.ca_cert == m.ca_cert and renewed.bundle() == m.bundle()
    assert signed_by(renewed.cert, m.ca_cert)
    assert not plan(renewed, NAMES, T0 + 62 * DAY, POLICY).changes


def test_new_names_reissue_the_serving_certificate_at_once() -> None:
    m = fresh()
    names = serving_names("tg", "trainguard-operator", ["https://10.0.0.7:9443"])
    p = plan(m, names, T0 + DAY, POLICY)
    assert p.new_serving and not p.new_ca and not p.fresh
    assert cert_names(carry_out(m, p, names, T0 + DAY, POLICY).cert) == names


def test_an_expired_serving_certificate_is_reissued_by_the_same_ca() -> None:
    m = fresh()
    p = plan(m, NAMES, T0 + 100 * DAY, POLICY)
    assert p.new_serving and not p.fresh
    assert step(m, T0 + 100 * DAY).ca_cert == m.ca_cert


def test_ca_rotation_adds_the_new_ca_before_serving_from_it_then_drops_the_old() -> None:
    policy = CertPolicy(serving_lifetime=90 * DAY, ca_lifetime=300 * DAY, propagation=dt.timedelta(hours=1))
    m = fresh(policy=policy)
    old_ca = m.ca_cert
    at = T0 + 201 * DAY  # two thirds of the CA's life
    m = step(m, T0 + 190 * DAY, policy=policy)  # keep the serving certificate young for this test
    assert m.ca_cert == old_ca

    # 1: the new CA joins the bundle, first; the serving certificate still chains to the old one
    p = plan(m, NAMES, at, policy)
    assert p.new_ca and not p.new_serving
    m = carry_out(m, p, NAMES, at, policy)
    new_ca = m.ca_cert
    assert new_ca != old_ca and m.trusted == (new_ca, old_ca)
    assert signed_by(m.cert, old_ca) and not signed_by(m.cert, new_ca)

    # 2: not before the bundle had time to reach the apiserver
    assert not plan(m, NAMES, at + dt.timedelta(minutes=30), policy).changes
    later = at + dt.timedelta(hours=2)
    p = plan(m, NAMES, later, policy)
    assert p.new_serving and not p.new_ca
    m = carry_out(m, p, NAMES, later, policy)
    assert signed_by(m.cert, new_ca) and m.trusted == (new_ca, old_ca)

    # 3: the old CA stays through ordinary renewals, and leaves the bundle once it has expired
    m = step(m, T0 + 262 * DAY, policy=policy)
    assert signed_by(m.cert, new_ca) and m.trusted == (new_ca, old_ca)
    assert not plan(m, NAMES, T0 + 299 * DAY, policy).changes
    gone = T0 + 301 * DAY
    p = plan(m, NAMES, gone, policy)
    assert p.drop == (old_ca,) and not p.new_serving and not p.new_ca
    assert carry_out(m, p, NAMES, gone, policy).trusted == (new_ca,)


def test_a_renewal_due_while_a_new_ca_propagates_waits_and_then_uses_the_new_ca() -> None:
    policy = CertPolicy(serving_lifetime=90 * DAY, ca_lifetime=300 * DAY, propagation=dt.timedelta(hours=1))
    # a serving certificate due for renewal 10 minutes after the CA's (day 201)
    m = step(fresh(policy=policy), T0 + 141 * DAY + dt.timedelta(minutes=10), policy=policy)
    at = T0 + 201 * DAY
    p = plan(m, NAMES, at, policy)
    assert p.new_ca and not p.new_serving
    m = carry_out(m, p, NAMES, at, policy)
    assert len(m.trusted) == 2, "the new CA joined"
    assert renewal_due(m.cert, at + dt.timedelta(minutes=30), policy.renew_before)
    assert not plan(m, NAMES, at + dt.timedelta(minutes=30), policy).changes, (
        "not signed by an unpropagated CA"
    )
    later = at + dt.timedelta(minutes=61)
    renewed = carry_out(m, plan(m, NAMES, later, policy), NAMES, later, policy)
    assert signed_by(renewed.cert, m.ca_cert) and renewed.cert.not_valid_after_utc == later + 90 * DAY


def test_an_expired_ca_starts_over() -> None:
    policy = CertPolicy(serving_lifetime=10 * DAY, ca_lifetime=30 * DAY)
    m = fresh(policy=policy)
    p = plan(m, NAMES, T0 + 40 * DAY, policy)
    assert p.fresh
    again = carry_out(m, p, NAMES, T0 + 40 * DAY, policy)
    assert again.trusted == (again.ca_cert,) and again.ca_cert != m.ca_cert


def test_the_secret_round_trips_and_junk_is_replaced() -> None:
    m = fresh()
    data = m.secret_data()
    assert set(data) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    back = material_from_data(data)
    assert back is not None
    assert (back.cert, back.ca_cert, back.trusted) == (m.cert, m.ca_cert, m.trusted)
    assert material_from_data(None) is None
    assert material_from_data({**data, "tls.crt": "bm90IGEgY2VydA=="}) is None
    other = fresh()
    assert material_from_data({**data, "tls.key": other.secret_data()["tls.key"]}) is None, "key mismatch"


# ---- a real TLS server on a ReloadableTLS context ----


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[ReloadableTLS, int]]:
    tls = ReloadableTLS(tmp_path / "certs")
    tls.load(fresh(dt.datetime.now(dt.UTC), names=serving_names("tg", None, ["https://127.0.0.1:1"])))
    ctx = tls.server_context()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            try:
                with ctx.wrap_socket(conn, server_side=True) as tls_conn:
                    tls_conn.sendall(b"ok")
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield tls, port
    stop.set()
    thread.join(timeout=5)
    listener.close()


def served(port: int, bundle: bytes, server_name: str | None) -> x509.Certificate:
    """Handshake verifying against `bundle`; no SNI when connecting to an IP, as Go's client does."""
    ctx = ssl.create_default_context(cadata=bundle.decode())
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname=server_name or "127.0.0.1") as conn,
    ):
        der = conn.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der)


@pytest.mark.parametrize("server_name", ["localhost", None])
def test_a_listening_server_presents_the_renewed_certificate_without_a_restart(
    server: tuple[ReloadableTLS, int], server_name: str | None
) -> None:
    tls, port = server
    names = serving_names("tg", None, ["https://127.0.0.1:1", "https://localhost:1"])
    now = dt.datetime.now(dt.UTC)  # the client checks validity against the real clock
    first = material_from_data(fresh(now, names=names).secret_data())
    assert first is not None
    tls.load(first)
    assert served(port, first.bundle(), server_name) == first.cert
    second = carry_out(first, Plan(new_serving=True), names, now, POLICY)
    assert second.cert != first.cert
    tls.load(second)
    assert served(port, second.bundle(), server_name) == second.cert
    assert tls.cert_file.read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")
    assert (tls.key_file.stat().st_mode & 0o077) == 0, "the key file is ours alone"
