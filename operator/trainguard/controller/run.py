"""`trainguard operator`: wire settings, handlers and the webhook server into kopf and run it."""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf
from kubernetes import client, config

from trainguard.controller.handlers import register
from trainguard.controller.kube import Kube
from trainguard.render.webhook import WEBHOOK_CONFIG_NAME, mutating_webhook_configuration

log = logging.getLogger("trainguard.operator")


@dataclass(frozen=True)
class OperatorOptions:
    kubeconfig: str | None = None
    peering: str = "trainguard"
    priority: int | None = None
    standalone: bool = False
    namespace: str = "trainguard-system"
    webhook_port: int = 9443
    webhook_addr: str = "0.0.0.0"
    webhook_url: str | None = None
    """https://host:port the apiserver reaches the webhook at, when the operator runs outside."""
    webhook_service: str | None = None
    """name:port of the operator's Service in `namespace`, when it runs in the cluster."""
    webhook_cert: str | None = None
    webhook_key: str | None = None
    webhook_ca: str | None = None
    manage_webhook: bool = True
    receiver_url: str = "https://trainguard-operator.trainguard-system.svc:8443/v1/events"
    liveness: str | None = "http://0.0.0.0:8080/healthz"


def _api_client(opts: OperatorOptions) -> client.ApiClient:
    if opts.kubeconfig:
        return config.new_client_from_config(opts.kubeconfig)
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


def run(opts: OperatorOptions) -> None:
    registry = kopf.OperatorRegistry()
    register(registry, receiver_url=opts.receiver_url)
    api = _api_client(opts)
    kube = Kube(api)
    priority = opts.priority if opts.priority is not None else random.randint(1, 2**31 - 1)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        memo["kube"] = kube
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="trainguard.io")
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix="trainguard.io", key="last-handled-configuration"
        )
        settings.persistence.finalizer = "trainguard.io/finalizer"
        settings.posting.level = logging.INFO
        settings.watching.server_timeout = 300
        settings.networking.request_timeout = 60
        if opts.webhook_cert and opts.webhook_key:
            settings.admission.server = kopf.WebhookServer(
                addr=opts.webhook_addr,
                port=opts.webhook_port,
                certfile=opts.webhook_cert,
                pkeyfile=opts.webhook_key,
                cafile=opts.webhook_ca,
            )
            settings.admission.managed = None  # we manage the configuration: Ignore, 5s, selectors
        if opts.manage_webhook and opts.webhook_ca and (opts.webhook_url or opts.webhook_service):
            ensure_webhook_configuration(kube, opts)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo | None:
        cfg = api.configuration
        token = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
        return kopf.ConnectionInfo(
            server=cfg.host,
            ca_path=cfg.ssl_ca_cert,
            insecure=not cfg.verify_ssl,
            scheme="Bearer" if token else None,
            token=token.removeprefix("Bearer ").strip() if token else None,
            certificate_path=cfg.cert_file,
            private_key_path=cfg.key_file,
            default_namespace=None,
        )

    log.info("trainguard operator starting: peering %s, priority %d", opts.peering, priority)
    asyncio.run(
        kopf.operator(
            registry=registry,
            clusterwide=True,
            standalone=opts.standalone,
            peering_name=opts.peering,
            priority=priority,
            liveness_endpoint=opts.liveness,
        )
    )


def ensure_webhook_configuration(kube: Kube, opts: OperatorOptions) -> None:
    ca = Path(opts.webhook_ca or "").read_bytes()
    service = None
    if opts.webhook_service:
        name, _, port = opts.webhook_service.partition(":")
        service = (opts.namespace, name, int(port or 443))
    obj = mutating_webhook_configuration(
        ca,
        url=opts.webhook_url if service is None else None,
        service=service,
        operator_namespace=opts.namespace,
    )
    kube.apply(obj)
    log.info("applied MutatingWebhookConfiguration %s", WEBHOOK_CONFIG_NAME)
