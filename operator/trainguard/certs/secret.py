"""The edge of the self-managed certificates (`trainguard operator --self-managed-certs`): the Secret
WEBHOOK_CERT_SECRET in the operator's namespace is the source of truth, a private CA (`ca.key`, and
`ca.crt`, the bundle of every CA still trusted, the signing one first) and the serving certificate
(`tls.crt`, `tls.key`) for the webhook Service's DNS names and the receiver's host. Every replica reads
it, serves what it holds and reloads it without a restart (all replicas must present a certificate the
webhook configuration's caBundle trusts); whoever starts first creates it (a lost create race reads
the winner's); only the leader rotates it, by an update that carries the resourceVersion it read, so
two writers cannot both win. The decisions are certs/ca.py's.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainguard.catalog.kubernetes import MANAGED_LABELS
from trainguard.certs.ca import (
    WEBHOOK_CERT_SECRET,
    CertPolicy,
    Material,
    Names,
    carry_out,
    material_from_data,
    plan,
    utcnow,
)
from trainguard.certs.tls import ReloadableTLS

log = logging.getLogger("trainguard.certs")


class SecretStore(Protocol):
    """kube.Kube's Secret calls."""

    def read_secret(self, namespace: str, name: str) -> tuple[dict[str, str], str] | None: ...

    def write_secret(self, body: dict[str, Any]) -> bool: ...


@dataclass
class SelfManagedCerts:
    """The edge: the Secret (read, created, updated), the files and contexts the servers use, and
    the webhook configuration's caBundle. `sync` once before the servers start, then `start`."""

    secrets: SecretStore
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
    material: Material | None = None
    _version: str | None = None
    _applied: bytes | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _read(self) -> tuple[Material | None, str | None, bool]:
        """(material, resourceVersion, exists)."""
        found = self.secrets.read_secret(self.namespace, WEBHOOK_CERT_SECRET)
        if found is None:
            return None, None, False
        data, version = found
        return material_from_data(data), version, True

    def _body(self, material: Material, version: str | None) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": WEBHOOK_CERT_SECRET,
            "namespace": self.namespace,
            "labels": dict(MANAGED_LABELS),
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
                if not self.secrets.write_secret(self._body(new, version if exists else None)):
                    continue  # another replica wrote first: read its Secret
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
