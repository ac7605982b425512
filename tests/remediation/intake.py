"""The operator's receiver in this process over real TLS, as the tests reach it: certificates made with the
openssl command line, an Intake holding the receiver and what it handed on, the operator key's tokens,
a sidecar's bound ServiceAccount token and the fake review and reads that know it, Alertmanager's
webhook payload and a POST by urllib, and the monitor cache the tokens are checked against
(tests/remediation/test_receiver.py, tests/controller/test_operator_metrics.py)."""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import Any

from tests.remediation.identities import FakeReads, FakeReviews, monitor_body, pod, review
from trainguard.remediation import tokens
from trainguard.remediation.model import Signal
from trainguard.remediation.receiver import Receiver
from trainguard.remediation.senders import Senders

KEY = tokens.new_key()
NOW = 1_700_000_100.0
IDENTITY = {"namespace": "ml", "pod": "llama-0", "node": "gpu-a", "training_job": "llama"}


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(d: Path) -> Path:
    """A CA (ca.crt) and the receiver's certificate for 127.0.0.1 and localhost it signed (tls.crt,
    tls.key), made with the openssl command line in `d`; returns `d`."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=d)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=receiver",
             "-keyout", "tls.key", "-out", "tls.csr", cwd=d)  # fmt: skip
    (d / "tls.ext").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )
    _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "tls.ext", "-out", "tls.crt", cwd=d)  # fmt: skip
    return d


@dataclass
class Intake:
    """A Receiver in this process and the CA its clients trust; `calls` are the signals it handed on."""

    receiver: Receiver
    ca: str
    calls: list[list[Signal]] = field(default_factory=list)
    fail: bool = False
    unrecorded: bool = False
    """on_signals raises pending.NotRecorded: the signals could not be written."""
    standby: bool = False

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.receiver.port}"

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca)


def alerts_token(ns: str = "ml", name: str = "llama", uid: str | None = None) -> str:
    """The monitor's Alertmanager token; `uid` defaults to the one monitor_body gives it."""
    return tokens.derive(KEY, tokens.ALERTS, ns, name, uid or f"uid-{name}")


def events_token(ns: str = "ml", name: str = "llama", uid: str | None = None) -> str:
    return tokens.derive(KEY, tokens.EVENTS, ns, name, uid or f"uid-{name}")


def monitors() -> FakeReads:
    """The monitor cache as the receiver reads it (kube.ClusterCache.monitor_uid): ml/llama, uid
    uid-llama (a table: the receiver's tests run without an apiserver; e2e/test_token_binding.py reads
    the real cache)."""
    return FakeReads(monitors={("ml", "llama"): monitor_body("llama")})


SENDER_TOKEN = "bound-serviceaccount-token-of-ml-llama-0"
"""What the fake TokenReview takes for pod ml/llama-0's projected token (on node gpu-a, as IDENTITY)."""


def senders() -> Senders:
    """The sender check over a fake review that knows SENDER_TOKEN and reads holding its pod and ml/llama."""
    reviews = FakeReviews({SENDER_TOKEN: review("llama-0", node=IDENTITY["node"])})
    reads = FakeReads({("ml", "llama-0"): pod("llama-0")}, {("ml", "llama"): monitor_body("llama")})
    return Senders(reviews, reads)


def am_payload(*labels: dict[str, str], status: str = "firing") -> dict[str, Any]:
    alerts = [
        {
            "status": status,
            "labels": lab,
            "annotations": {"summary": "s"},
            "startsAt": "2023-11-14T22:13:20.5Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph",
            "fingerprint": "c6eadffa33fcdf37",
        }
        for lab in labels
    ]
    return {"receiver": "trainguard", "status": status, "alerts": alerts, "groupLabels": {},
            "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://am:9093", "version": "4",
            "groupKey": "{}:{}", "truncatedAlerts": 0}  # fmt: skip


def xid(gpu: str = "3", **over: str) -> dict[str, str]:
    return (
        IDENTITY | {"alertname": "GPUCriticalXid", "severity": "P0", "gpu": gpu, "prometheus": "k8s"} | over
    )


def post(
    it: Intake, path: str, body: bytes | Any, token: str | None, method: str = "POST"
) -> tuple[int, dict[str, Any], Message]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(
        it.base + path, data=data if method == "POST" else None, headers=headers, method=method
    )
    try:
        with urllib.request.urlopen(req, timeout=10, context=it.context()) as resp:
            return resp.status, json.loads(resp.read()), resp.headers
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else {}, exc.headers
