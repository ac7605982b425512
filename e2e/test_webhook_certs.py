"""`trainguard operator --self-managed-certs` against the real apiserver, with no certificate flags
and under deploy/rbac.yaml's ServiceAccount: it creates its Secret, puts the CA in the webhook
configuration, the apiserver calls the webhook through that CA (a pod gets its sidecar), and a
rotation (a 30-second serving certificate) is served by the same process without a restart."""

from __future__ import annotations

import base64
import os
import signal
import socket
import ssl
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.cluster import OPERATOR_NS, Cluster, wait_for
from e2e.controlplane.local import free_port
from e2e.test_operator import quickstart, ready
from trainguard.controller.webhook_certs import WEBHOOK_CERT_SECRET
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


@pytest.fixture
def self_managed(cluster: Cluster) -> Iterator[dict[str, Any]]:
    """The operator in self-managed mode, leading the peering (so it may rotate); the session's
    webhook configuration and a fresh Secret restored afterwards."""
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
    webhook, receiver, health = free_port(), free_port(), free_port()
    log = (cluster.workdir / "operator-self-managed-certs.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainguard.cli", "operator",
         "--kubeconfig", str(cluster.operator_kubeconfig()), "--priority", "1000",
         "--webhook-addr", HOST, "--webhook-port", str(webhook), "--webhook-url", f"https://{HOST}:{webhook}",
         "--receiver-url", f"https://{HOST}:{receiver}", "--receiver-addr", HOST, "--receiver-port", str(receiver),
         "--liveness", f"http://{HOST}:{health}/healthz", "--metrics-addr", "",
         "--resync-seconds", "10", "--pods-seconds", "2",
         "--self-managed-certs", "--cert-duration", "30s"],
        stdout=log, stderr=subprocess.STDOUT, env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )  # fmt: skip

    def alive() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"operator exited with {proc.returncode}:\n{cluster.operator_logs()}")
        with urllib.request.urlopen(f"http://{HOST}:{health}/healthz", timeout=2) as resp:
            return bool(resp.status == 200)

    try:
        wait_for("the self-managed operator's liveness endpoint", alive, timeout=60)
        yield {"proc": proc, "webhook": webhook, "receiver": receiver}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if saved is not None:
            live: Any = admission.read_mutating_webhook_configuration(WEBHOOK_CONFIG_NAME)
            saved.metadata.resource_version = live.metadata.resource_version
            admission.replace_mutating_webhook_configuration(WEBHOOK_CONFIG_NAME, saved)
        else:
            admission.delete_mutating_webhook_configuration(WEBHOOK_CONFIG_NAME)
        cluster.core.delete_namespaced_secret(WEBHOOK_CERT_SECRET, OPERATOR_NS)


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
    cluster: Cluster, self_managed: dict[str, Any], ns: str
) -> None:
    data = wait_for("Secret " + WEBHOOK_CERT_SECRET, lambda: secret_data(cluster), timeout=30)
    assert set(data) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    bundle = data["ca.crt"]
    wait_for("the caBundle of the webhook configuration", lambda: ca_bundle(cluster) == bundle, timeout=30)

    # both servers present the Secret's certificate, and the caBundle verifies it
    first = served(self_managed["webhook"], bundle)
    assert first == x509.load_pem_x509_certificate(data["tls.crt"])
    assert served(self_managed["receiver"], bundle) == first

    # the apiserver calls the webhook through that caBundle: the pod gets its sidecar
    cluster.apply(quickstart(ns))
    wait_for("monitor Ready", lambda: ready(cluster, ns))
    assert wait_for(
        "sidecar injected", lambda: injected_pod(cluster, ns, "before-rotation") or None, timeout=30
    )

    # a 30-second certificate is renewed after about 19 s; the same process serves the new one
    def renewal() -> x509.Certificate | None:
        cert = served(self_managed["webhook"], bundle)
        return cert if cert != first else None

    renewed = wait_for("the renewed certificate served", renewal, timeout=90, interval=1)
    assert self_managed["proc"].poll() is None, "no restart"
    assert renewed.serial_number != first.serial_number
    assert served(self_managed["receiver"], bundle).serial_number != first.serial_number
    after = secret_data(cluster)
    assert after is not None and after["ca.crt"] == bundle, "the same CA: the bundle is unchanged"
    assert ca_bundle(cluster) == bundle
    assert injected_pod(cluster, ns, "after-rotation"), "the apiserver trusts the renewed certificate"
