"""SelfManagedCerts against an in-memory Secret store: who may create and who may rotate, optimistic
concurrency between replicas, and when the webhook configuration's caBundle is written.

The store is a fake (it keeps resourceVersion and answers 404/409 as the apiserver does) so that the
races can be staged exactly; e2e/test_webhook_certs.py runs the same code against a real apiserver."""

from __future__ import annotations

import datetime as dt
import types
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from trainguard.catalog.kubernetes import MANAGED_BY, MANAGED_BY_VALUE
from trainguard.certs.ca import WEBHOOK_CERT_SECRET, CertPolicy, serving_names
from trainguard.certs.secret import SelfManagedCerts
from trainguard.certs.tls import ReloadableTLS
from trainguard.kube import Kube

NS = "tg"
NAMES = serving_names(NS, "trainguard-operator", [])
POLICY = CertPolicy(serving_lifetime=dt.timedelta(days=90))


class Secrets:
    """read/create/replace of CoreV1Api for Secrets, with resourceVersion checks, under the real
    kube.Kube's Secret calls."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] | None = None
        self.version = 0
        self.writes = 0
        self.before_replace: Any = None

    def read_namespaced_secret(self, name: str, namespace: str, **_: Any) -> Any:
        assert (name, namespace) == (WEBHOOK_CERT_SECRET, NS)
        if self.obj is None:
            raise ApiException(status=404)
        return types.SimpleNamespace(
            data=dict(self.obj["data"]), metadata=types.SimpleNamespace(resource_version=str(self.version))
        )

    def create_namespaced_secret(self, namespace: str, body: dict[str, Any], **_: Any) -> None:
        if self.obj is not None:
            raise ApiException(status=409)
        assert body["type"] == "kubernetes.io/tls"
        self.obj, self.version, self.writes = body, self.version + 1, self.writes + 1

    def replace_namespaced_secret(self, name: str, namespace: str, body: dict[str, Any], **_: Any) -> None:
        if self.before_replace is not None:
            hook, self.before_replace = self.before_replace, None
            hook()
        if body["metadata"].get("resourceVersion") != str(self.version):
            raise ApiException(status=409)
        self.obj, self.version, self.writes = body, self.version + 1, self.writes + 1


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime.now(dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


def replica(
    tmp: Path, name: str, store: Secrets, clock: Clock, *, leader: bool, applied: list[bytes]
) -> SelfManagedCerts:
    kube = Kube(api=None)  # type: ignore[arg-type]
    kube.core = store  # type: ignore[assignment]
    return SelfManagedCerts(
        secrets=kube,
        namespace=NS,
        names=NAMES,
        policy=POLICY,
        tls=ReloadableTLS(tmp / name),
        leader=lambda: leader,
        apply_bundle=applied.append,
        clock=clock,
    )


@pytest.fixture
def store() -> Secrets:
    return Secrets()


def test_whoever_starts_first_creates_and_the_others_serve_the_same(tmp_path: Path, store: Secrets) -> None:
    clock, applied = Clock(), list[bytes]()
    standby = replica(tmp_path, "a", store, clock, leader=False, applied=applied)
    leader = replica(tmp_path, "b", store, clock, leader=True, applied=applied)
    first = standby.sync()  # a standby may create: the servers need a certificate before any leader exists
    assert store.writes == 1
    assert leader.sync().cert == first.cert
    assert store.writes == 1
    assert (tmp_path / "a" / "tls.crt").read_bytes() == (tmp_path / "b" / "tls.crt").read_bytes()
    assert applied == [first.bundle(), first.bundle()]


def test_only_the_leader_rotates_and_the_standby_follows(tmp_path: Path, store: Secrets) -> None:
    clock, applied = Clock(), list[bytes]()
    standby = replica(tmp_path, "a", store, clock, leader=False, applied=applied)
    leader = replica(tmp_path, "b", store, clock, leader=True, applied=applied)
    first = leader.sync()
    standby.sync()
    clock.now += dt.timedelta(days=61)
    assert standby.sync().cert == first.cert, "a standby never writes"
    assert store.writes == 1
    renewed = leader.sync()
    assert renewed.cert != first.cert and store.writes == 2
    assert standby.sync().cert == renewed.cert
    assert (tmp_path / "a" / "tls.crt").read_bytes() == (tmp_path / "b" / "tls.crt").read_bytes()
    # the same CA: the caBundle is not written again
    assert applied == [first.bundle(), first.bundle()]


def test_a_write_that_loses_the_race_takes_the_winners_secret(tmp_path: Path, store: Secrets) -> None:
    clock, applied = Clock(), list[bytes]()
    a = replica(tmp_path, "a", store, clock, leader=True, applied=applied)
    b = replica(
        tmp_path, "b", store, clock, leader=True, applied=applied
    )  # two replicas that both think they lead
    a.sync()
    b.sync()
    clock.now += dt.timedelta(days=61)
    store.before_replace = b.sync  # b rotates between a's read and a's write
    winner = a.sync()
    assert store.writes == 2, "one rotation, not two"
    assert b.material is not None and winner.cert == b.material.cert


def test_a_new_ca_reaches_the_webhook_configuration(tmp_path: Path, store: Secrets) -> None:
    clock, applied = Clock(), list[bytes]()
    leader = replica(tmp_path, "a", store, clock, leader=True, applied=applied)
    first = leader.sync()
    clock.now += dt.timedelta(days=2440)  # two thirds of ten years
    rotated = leader.sync()
    assert rotated.trusted[1:] == first.trusted and rotated.ca_cert != first.ca_cert
    assert applied == [first.bundle(), rotated.bundle()]


def test_the_secret_is_labelled_managed_by_trainguard(tmp_path: Path, store: Secrets) -> None:
    """deploy/secret-write-policy.yaml lets the operator write no Secret without the label."""
    replica(tmp_path, "a", store, Clock(), leader=True, applied=[]).sync()
    assert store.obj is not None
    assert store.obj["metadata"]["labels"][MANAGED_BY] == MANAGED_BY_VALUE
