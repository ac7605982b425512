"""`trainguard operator`: its flags, and the start of the operator (controller/run.py) with them."""

from __future__ import annotations

import argparse

from trainguard.args import duration, need


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    op = sub.add_parser(
        "operator", help="run the operator (kopf): reconcile monitors and policies, inject sidecars"
    )
    op.add_argument("--kubeconfig", help="default: in-cluster config, then KUBECONFIG / ~/.kube/config")
    op.add_argument("--namespace", default="trainguard-system", help="the operator's own namespace")
    op.add_argument("--peering", default="trainguard", help="kopf peering object shared by the replicas")
    op.add_argument(
        "--priority", type=int, help="peering priority (default: random); the highest replica acts"
    )
    op.add_argument(
        "--standalone", action="store_true", help="no peering: for a single replica without the peering CRD"
    )
    op.add_argument("--webhook-port", type=int, default=9443)
    op.add_argument("--webhook-addr", default="0.0.0.0")
    op.add_argument(
        "--webhook-url",
        help="https://HOST:PORT the apiserver reaches the webhook at (operator outside the cluster)",
    )
    op.add_argument("--webhook-service", help="NAME:PORT of the operator's Service (operator in the cluster)")
    op.add_argument("--webhook-cert", help="TLS certificate of the webhook server (PEM)")
    op.add_argument("--webhook-key", help="its private key (PEM)")
    op.add_argument("--webhook-ca", help="the CA that signed it, for the webhook configuration's caBundle")
    op.add_argument(
        "--no-manage-webhook", action="store_true", help="do not apply the MutatingWebhookConfiguration"
    )
    op.add_argument(
        "--receiver-url",
        default="https://trainguard-operator.trainguard-system.svc:8443",
        help="base URL sidecars (/v1/events) and Alertmanager (/v1/alerts) reach the remediation receiver at",
    )
    op.add_argument("--receiver-addr", default="0.0.0.0", help="address the receiver listens on")
    op.add_argument("--receiver-port", type=int, default=8443, help="port the receiver listens on (TLS)")
    op.add_argument("--receiver-cert", help="the receiver's TLS certificate (default: --webhook-cert)")
    op.add_argument("--receiver-key", help="its private key (default: --webhook-key)")
    op.add_argument(
        "--receiver-ca",
        help="the CA that signed it, given to sidecars and Alertmanager (default: --webhook-ca)",
    )
    op.add_argument(
        "--self-managed-certs",
        action="store_true",
        help="no cert-manager: keep a CA and the serving certificate of the webhook and the receiver in "
        "Secret trainguard-operator-webhook-tls (created and rotated by the operator, reloaded without a "
        "restart), with the CA bundle in the webhook configuration; replaces --webhook-cert/-key/-ca",
    )
    op.add_argument(
        "--cert-duration", default="90d", type=duration, help="self-managed serving certificate's lifetime"
    )
    op.add_argument(
        "--cert-renew-before",
        default="30d",
        type=duration,
        help="renew it this long before it expires (at most a third of its lifetime)",
    )
    op.add_argument(
        "--ca-duration", default="3650d", type=duration, help="self-managed CA's lifetime (renewed at 2/3)"
    )
    op.add_argument(
        "--alertmanager-url",
        help="Alertmanager's base URL: the operator posts the faults it detects itself (OOMKilled or failed pods, "
        "nodes down) and its notices (an action withheld by the storm guard) there",
    )
    op.add_argument(
        "--prometheus-url",
        help="Prometheus's base URL, read for the morning report's ALERTS history (default: "
        "$TRAINGUARD_PROMETHEUS_URL; without either, no morning report)",
    )
    op.add_argument(
        "--key-file",
        help="the operator key every monitor's tokens derive from (default: Secret trainguard-receiver-key in --namespace, created when absent)",
    )
    op.add_argument(
        "--liveness", default="http://0.0.0.0:8080/healthz", help="liveness endpoint; empty to disable"
    )
    op.add_argument(
        "--metrics-addr",
        default=":8081",
        metavar="[HOST]:PORT",
        help="where the operator serves its own Prometheus metrics (/metrics); empty to disable",
    )
    op.add_argument(
        "--resync-seconds",
        type=float,
        default=120.0,
        help="re-apply every monitor's objects this often (repairs hand edits); the leader only",
    )
    op.add_argument(
        "--pods-seconds", type=float, default=15.0, help="refresh status.podsMonitored this often"
    )
    op.add_argument(
        "--detect-seconds",
        type=float,
        default=3.0,
        help="look for the faults no exporter reports (interrupted pods, failed Jobs, nodes down) this often",
    )
    op.add_argument(
        "--node-lease-grace-seconds",
        type=float,
        default=18.0,
        help="a node whose Lease the operator has seen unchanged this long is down",
    )
    op.add_argument(
        "--node-not-ready-seconds",
        type=float,
        default=12.0,
        help="a node whose Ready condition the operator has seen False or Unknown this long is down",
    )
    op.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    op.set_defaults(func=cmd_operator)


def cmd_operator(args: argparse.Namespace) -> int:
    need("operator", "kopf", "kubernetes", "pydantic", "yaml", "promql_parser", "cryptography")
    import datetime as dt
    import logging

    from trainguard.certs.ca import CertPolicy
    from trainguard.controller.run import OperatorOptions, run
    from trainguard.remediation.detect import NodeDownSettings

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    run(
        OperatorOptions(
            kubeconfig=args.kubeconfig,
            peering=args.peering,
            priority=args.priority,
            standalone=args.standalone,
            namespace=args.namespace,
            webhook_port=args.webhook_port,
            webhook_addr=args.webhook_addr,
            webhook_url=args.webhook_url,
            webhook_service=args.webhook_service,
            webhook_cert=args.webhook_cert,
            webhook_key=args.webhook_key,
            webhook_ca=args.webhook_ca,
            manage_webhook=not args.no_manage_webhook,
            receiver_url=args.receiver_url,
            receiver_addr=args.receiver_addr,
            receiver_port=args.receiver_port,
            receiver_cert=args.receiver_cert,
            receiver_key=args.receiver_key,
            receiver_ca=args.receiver_ca,
            key_file=args.key_file,
            alertmanager_url=args.alertmanager_url,
            prometheus_url=args.prometheus_url,
            liveness=args.liveness or None,
            metrics_addr=args.metrics_addr,
            resync_seconds=args.resync_seconds,
            pods_seconds=args.pods_seconds,
            detect_seconds=args.detect_seconds,
            node_down=NodeDownSettings(
                lease_grace_s=args.node_lease_grace_seconds, not_ready_min_s=args.node_not_ready_seconds
            ),
            self_managed_certs=args.self_managed_certs,
            cert_policy=CertPolicy(
                serving_lifetime=dt.timedelta(seconds=args.cert_duration),
                renew_before=dt.timedelta(seconds=args.cert_renew_before),
                ca_lifetime=dt.timedelta(seconds=args.ca_duration),
            ),
        )
    )
    return 0
