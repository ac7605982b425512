"""`trainguard operator --self-managed-certs` against the real apiserver, with no certificate flags
and under deploy/rbac.yaml's ServiceAccount, two replicas: the first creates its Secret and puts the
CA in the webhook configuration, the apiserver calls the webhook through that CA (a pod gets its
sidecar), both replicas serve the same certificate, and a rotation (a 30-second serving
certificate), written by the leader alone, is served by the same processes without a restart."""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.cluster import OPERATOR_NS, Cluster
from e2e.monitors import quickstart, ready
from tests.processes import free_port, wait_for
from trainguard.certs.ca import WEBHOOK_CERT_SECRET
from trainguard.render.webhook import WEBHOOK_CONFIG_NAME

pytestmark = pytest.mark.e2e

HOST = "127.0.0.1"


def served(port: int, bundle: bytes) -> x509.Certificate:
    """A real handshake, trusting only `bundle` and checking the certificate is for HOST (an IP SAN:
    the apiserver calls the webhook at https://127.0.0.1:port)."""
    ctx = ssl.create_default_context(cadata=bundle.decode())
    with (
        socket.create_connection((HOST, port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname=HOST) as conn,
    ):
        der = conn.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der)


def secret_data(cluster: Cluster) -> dict[str, bytes] | None:
    try:
        secret = cluster.core.read_namespaced_secret(WEBHOOK_CERT_SECRET, OPERATOR_NS)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    assert secret.type == "kubernetes.io/tls"
    return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}


def ca_bundle(cluster: Cluster) -> bytes:
    mwc: Any = client.AdmissionregistrationV1Api(cluster.api).read_mutating_webhook_configuration(
        WEBHOOK_CONFIG_NAME
    )
    return base64.b64decode(mwc.webhooks[0].client_config.ca_bundle)


@dataclass
class Replica:
    proc: subprocess.Popen[bytes]
    webhook: int
    receiver: int


def start_replica(cluster: Cluster, name: str, priority: int, *extra: str) -> Replica:
    webhook, receiver, health = free_port(), free_port(), free_port()
    log = (cluster.workdir / f"operator-{name}.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainguard.cli", "operator",
         "--kubeconfig", str(cluster.operator_kubeconfig()), "--priority", str(priority),
         "--webhook-addr", HOST, "--webhook-port", str(webhook), "--webhook-url", f"https://{HOST}:{webhook}",
         "--receiver-url", f"https://{HOST}:{receiver}", "--receiver-addr", HOST, "--receiver-port", str(receiver),
         "--liveness", f"http://{HOST}:{health}/healthz", "--metrics-addr", "",
         "--resync-seconds", "10", "--pods-seconds", "2",
         "--self-managed-certs", "--cert-duration", "30s", *extra],
        stdout=log, stderr=subprocess.STDOUT, env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )  # fmt: skip

    def alive() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"operator exited with {proc.returncode}:\n{cluster.operator_logs()}")
        with urllib.request.urlopen(f"http://{HOST}:{health}/healthz", timeout=2) as resp:
            return bool(resp.status == 200)

    try:
        wait_for(f"{name}'s liveness endpoint", alive, timeout=60)
    except BaseException:
        stop(proc)
        raise
    return Replica(proc, webhook, receiver)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def self_managed_pair(cluster: Cluster, *extra: str) -> Iterator[tuple[Replica, Replica]]:
    """Two self-managed replicas: one leading the peering (so it may rotate), started first, and a
    standby (which leaves the webhook configuration to the leader, as a second e2e replica on
    another port must). The session's webhook configuration is restored and the Secret deleted
    afterwards."""
    admission = client.AdmissionregistrationV1Api(cluster.api)
    try:
        saved: Any = admission.read_mutating_webhook_configuration(WEBHOOK_CONFIG_NAME)
    except ApiException as exc:
        if exc.status != 404:
            raise
        saved = None
    try:
        cluster.core.delete_namespaced_secret(WEBHOOK_CERT_SECRET, OPERATOR_NS)
    except ApiException as exc:
        if exc.status != 404:
            raise
    started: list[Replica] = []
    try:
        started.append(start_replica(cluster, "certs-leader", 1000, *extra))
        wait_for("Secret " + WEBHOOK_CERT_SECRET, lambda: secret_data(cluster), timeout=30)
        started.append(start_replica(cluster, "certs-standby", 999, "--no-manage-webhook", *extra))
        yield started[0], started[1]
    finally:
        for replica in started:
            stop(replica.proc)
        if saved is not None:
            live: Any = admission.read_mutating_webhook_configuration(WEBHOOK_CONFIG_NAME)
            saved.metadata.resource_version = live.metadata.resource_version
            admission.replace_mutating_webhook_configuration(WEBHOOK_CONFIG_NAME, saved)
        else:
            admission.delete_mutating_webhook_configuration(WEBHOOK_CONFIG_NAME)
        cluster.core.delete_namespaced_secret(WEBHOOK_CERT_SECRET, OPERATOR_NS)


@pytest.fixture
def replicas(cluster: Cluster) -> Iterator[tuple[Replica, Replica]]:
    with self_managed_pair(cluster) as pair:
        yield pair


def injected_pod(cluster: Cluster, ns: str, prefix: str) -> bool:
    """Create a pod the monitor selects (a new name each time) and say whether it got the sidecar."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, "labels": {"app": "llama-pretrain"}},
           "spec": {"containers": [{"name": "trainer", "image": "registry.invalid/llama:1"}]}}  # fmt: skip
    cluster.apply([pod])
    created: Any = cluster.core.read_namespaced_pod(name, ns)
    return any(c.name == "trainguard-exporter" for c in created.spec.init_containers or [])


def test_self_managed_certificates_are_created_trusted_and_rotated_without_restart(
    cluster: Cluster, replicas: tuple[Replica, Replica], ns: str
) -> None:
    leader, standby = replicas
    data = secret_data(cluster)
    assert data is not None and set(data) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    bundle = data["ca.crt"]
    wait_for("the caBundle of the webhook configuration", lambda: ca_bundle(cluster) == bundle, timeout=30)

    # every server of both replicas presents the Secret's certificate, and the caBundle verifies it. The
    # certificate lives 30 s and is renewed after about 19, which a slow start of the standby can reach:
    # the Secret and the four servers are compared as one reading, taken again while a renewal is halfway
    def one_certificate() -> x509.Certificate | None:
        current = secret_data(cluster)
        cert = x509.load_pem_x509_certificate(current["tls.crt"]) if current else None
        ports = (leader.webhook, leader.receiver, standby.webhook, standby.receiver)
        return cert if cert is not None and all(served(port, bundle) == cert for port in ports) else None

    first = wait_for("every server presenting the Secret's certificate", one_certificate, timeout=30)

    # the apiserver calls the webhook through that caBundle: the pod gets its sidecar
    cluster.apply(quickstart(ns))
    wait_for("monitor Ready", lambda: ready(cluster, ns))
    assert wait_for(
        "sidecar injected", lambda: injected_pod(cluster, ns, "before-rotation") or None, timeout=30
    )

    # a 30-second certificate is renewed after about 19 s (by the leader); every replica serves the
    # new one from the same process, without a restart
    def renewed_on(port: int) -> x509.Certificate | None:
        cert = served(port, bundle)
        return cert if cert != first else None

    renewed = wait_for(
        "the renewed certificate served", lambda: renewed_on(leader.webhook), timeout=90, interval=1
    )
    assert leader.proc.poll() is None and standby.proc.poll() is None, "no restart"
    after = secret_data(cluster)
    assert after is not None and x509.load_pem_x509_certificate(after["tls.crt"]) == renewed
    assert after["ca.crt"] == bundle, "the same CA: the bundle is unchanged"
    for port in (leader.receiver, standby.webhook, standby.receiver):
        # renewed, and trusted through the bundle (a further rotation may have come since)
        wait_for("every server on a renewed certificate", functools.partial(renewed_on, port), timeout=30)
    assert ca_bundle(cluster) == bundle
    assert injected_pod(cluster, ns, "after-rotation"), "the apiserver trusts the renewed certificate"
    standby_log = (cluster.workdir / "operator-certs-standby.log").read_text()
    assert f"Secret {OPERATOR_NS}/{WEBHOOK_CERT_SECRET} updated" not in standby_log, "only the leader rotates"
    assert (
        f"Secret {OPERATOR_NS}/{WEBHOOK_CERT_SECRET} updated"
        in (cluster.workdir / "operator-certs-leader.log").read_text()
    )


def cas(bundle: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(bundle)


def test_a_ca_rotation_keeps_the_webhook_trusted_throughout(cluster: Cluster, ns: str) -> None:
    """The CA itself renews (a 60-second CA, renewed with 20 s left): the new CA joins the caBundle,
    the serving certificate moves to it a propagation delay later (3 s here), and the old CA leaves
    the bundle when it expires. Pods created all along get their sidecar: at no moment does the
    apiserver call a webhook whose certificate its caBundle does not trust."""
    with self_managed_pair(cluster, "--ca-duration", "60s") as (leader, standby):
        cluster.apply(quickstart(ns))
        wait_for("monitor Ready", lambda: ready(cluster, ns))
        data = secret_data(cluster)
        assert data is not None
        (first_ca,) = cas(data["ca.crt"])
        renewal_at = first_ca.not_valid_after_utc.timestamp() - 20

        def bundle_cas() -> list[x509.Certificate]:
            return cas(ca_bundle(cluster))

        created = injected = 0
        two: list[x509.Certificate] = []
        moved: x509.Certificate | None = None
        deadline = first_ca.not_valid_after_utc.timestamp() + 45
        # from before the renewal until the old CA has left the bundle, a pod every ~2 s
        while time.time() < deadline:
            created += 1
            injected += injected_pod(cluster, ns, "rotating")
            now_cas = bundle_cas()
            if len(now_cas) == 2 and not two:
                two = now_cas
                assert time.time() >= renewal_at - 5, "the CA renewed early"
                assert now_cas[1] == first_ca and now_cas[0] != first_ca, (
                    "the new CA signs; the old one stays"
                )
            if two and moved is None:
                # a handshake that trusts the new CA alone
                with contextlib.suppress(ssl.SSLCertVerificationError):
                    moved = served(leader.webhook, two[0].public_bytes(serialization.Encoding.PEM))
            if moved is not None and now_cas == [two[0]]:
                break
            time.sleep(2)
        assert two, "the CA was never renewed"
        assert moved is not None, "the serving certificate never moved to the new CA"
        assert bundle_cas() == [two[0]], "the expired CA did not leave the bundle"
        assert injected == created, (
            f"{created - injected} of {created} pods created during the rotation missed the sidecar"
        )
        only_new = two[0].public_bytes(serialization.Encoding.PEM)
        for port in (leader.webhook, leader.receiver, standby.webhook, standby.receiver):
            wait_for(
                "every server on the new CA's certificate", lambda p=port: served(p, only_new), timeout=30
            )
        assert leader.proc.poll() is None and standby.proc.poll() is None, "no restart"
        print(f"\n{created} pods created through the CA rotation, all injected")
