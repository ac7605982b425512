"""`trainguard operator`: its flags, and the start of the operator (controller/run.py) with them."""

from __future__ import annotations

import argparse
import os

from trainguard import IMAGE
from trainguard.args import (
    api_client,
    duration,
    fail,
    kube_flags,
    need,
    refuse_shared_options_without_shared_form,
    shared_form_flags,
    who,
)
from trainguard.catalog.kubernetes import LEMON_LABEL
from trainguard.catalog.severity import GRADE, MAPPED_SEVERITY, STYLES
from trainguard.controller.heap import TRIM_EVERY_S
from trainguard.remediation import guardrails as guard
from trainguard.remediation.lemon import HISTORY_MAX, LemonPolicy
from trainguard.remediation.urgency import HOLD_S

SIDECAR_IMAGE_ENV = "TRAINGUARD_SIDECAR_IMAGE"

BREAKER_RESET_HELP = (
    "re-arm the circuit breaker now (ConfigMap trainguard-guardrails, read by the leader each pass)"
)


def limit(text: str) -> guard.Limit:
    """A count of nodes or a percentage, refused at parse time (exit 2, naming the flag)."""
    try:
        return guard.limit(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def share(text: str) -> float:
    try:
        return guard.share(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def workers(text: str) -> int:
    """A count of threads: a whole number from 1 to 256."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (1 to 256)") from None
    if not 1 <= value <= 256:
        raise argparse.ArgumentTypeError(f"{value} is out of range: give 1 to 256")
    return value


def seconds_or_off(text: str) -> float:
    """Seconds, 0 or more (0 turns the setting off), refused at parse time naming the flag."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds, 0 or more (0 turns it off)")
    return value


def at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of nodes, 1 or more")
    return value


def object_labels(text: str) -> dict[str, str]:
    """--object-labels KEY=VALUE[,KEY=VALUE...]; empty for none."""
    from trainguard.api.common import label_key_problem, label_value_problem

    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        problem = (
            f"{item!r} is not KEY=VALUE" if not sep
            else label_key_problem(key) or label_value_problem(value)
            or (f"{key!r} is trainguard's own label" if key.startswith("trainguard.io/") or key.startswith("app.kubernetes.io/") else None)
        )  # fmt: skip
        if problem:
            raise argparse.ArgumentTypeError(
                f"{problem}; give the labels your Prometheus selects rules and pod monitors by, such as "
                "release=kube-prometheus-stack (or an empty value for none)"
            )
        labels[key] = value
    return labels


def add_guardrails(op: argparse.ArgumentParser) -> None:
    """The guardrails the platform owns (remediation/guardrails.py): a monitor may lower them, never raise them."""
    g = op.add_argument_group(
        "guardrails",
        "the platform's limits on remediation; a monitor's spec.remediation may lower them, never raise them",
    )
    g.add_argument(
        "--remediation-mode",
        default=guard.ACT,
        choices=guard.MODES,
        help="act: carry plans out; dry-run: every plan is a dry run (recorded, announced, nothing done) whatever "
        "the monitor says; off: nothing is planned (default: act)",
    )
    g.add_argument(
        "--max-cordoned-nodes",
        type=limit,
        default=guard.limit("10%"),
        metavar="N|P%",
        help="the ceiling: GPU nodes trainguard holds cordoned at once (its annotation, still unschedulable), a "
        "count or a percentage of the GPU nodes (at least 1); at it a node fault notifies instead (default: 10%%)",
    )
    g.add_argument(
        "--max-cordons-per-window",
        type=limit,
        default=guard.limit("10%"),
        metavar="N|P%",
        help="the rate: new cordons per --cordon-window, cluster-wide (default: 10%% of the GPU nodes)",
    )
    g.add_argument(
        "--cordon-window",
        type=duration,
        default=600.0,
        help="the window --max-cordons-per-window counts over (default: 10m)",
    )
    g.add_argument(
        "--pool-label",
        default="",
        metavar="LABEL",
        help="the node label that groups GPU nodes into pools (such as nvidia.com/gpu.product or a rack label) for "
        "the pool budgets and the circuit breaker; empty: one pool of every GPU node",
    )
    g.add_argument(
        "--pool-max-cordoned",
        type=limit,
        metavar="N|P%",
        help="each pool's budget: its nodes trainguard holds cordoned at once, a count or a percentage of the pool "
        "(at least 1) (default: none)",
    )
    g.add_argument(
        "--breaker-threshold",
        type=share,
        default=0.3,
        metavar="P%",
        help="open a pool's circuit breaker (no cordon there, a P0 page) when this share of its GPU nodes looks "
        "down at once (Ready False or Unknown); 0 turns it off (default: 30%%)",
    )
    g.add_argument(
        "--breaker-min-down",
        type=at_least_one,
        default=3,
        metavar="N",
        help="and at least this many nodes (one node of three is not a storm) (default: 3)",
    )
    g.add_argument(
        "--breaker-rearm",
        type=duration,
        default=600.0,
        help="re-arm a breaker once its pool has looked up this long; `trainguard guardrails reset` re-arms at "
        "once (default: 10m)",
    )
    g.add_argument(
        "--lemon-faults",
        type=lemon_faults,
        default=3,
        metavar="N",
        help="a node with this many faults trainguard acted on within --lemon-window is a lemon: labelled "
        f"{LEMON_LABEL}=true, never a spare, refused by `trainguard uncordon` without --force, listed for "
        f"repair; 0 turns it off (default: 3, at most {HISTORY_MAX})",
    )
    g.add_argument(
        "--lemon-window",
        type=duration,
        default=30 * 86400.0,
        help="the window --lemon-faults counts over (default: 30d)",
    )


def lemon_faults(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= HISTORY_MAX:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of faults from 0 (off) to {HISTORY_MAX} (the faults a node's history keeps)"
        )
    return value


def lemons_of(args: argparse.Namespace) -> LemonPolicy:
    return LemonPolicy(faults=args.lemon_faults, window_s=args.lemon_window)


def guardrails_of(args: argparse.Namespace) -> guard.Guardrails:
    return guard.Guardrails(
        mode=args.remediation_mode,
        max_cordoned=args.max_cordoned_nodes,
        max_cordons=args.max_cordons_per_window,
        cordon_window_s=args.cordon_window,
        pool_label=args.pool_label,
        pool_max_cordoned=args.pool_max_cordoned,
        breaker=guard.BreakerConfig(
            share=args.breaker_threshold, min_down=args.breaker_min_down, rearm_s=args.breaker_rearm
        ),
    )


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    op = sub.add_parser(
        "operator", help="run the operator (kopf): reconcile monitors and policies, inject sidecars"
    )
    kube_flags(op)
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
    op.add_argument(
        "--sidecar-image",
        default=os.environ.get(SIDECAR_IMAGE_ENV) or IMAGE,
        metavar="IMAGE",
        help="the exporter sidecar's image, where a monitor's spec.exporter.image does not override it; the "
        "chart passes the operator's own image, so an upgrade moves both "
        f"(default: ${SIDECAR_IMAGE_ENV}, else {IMAGE})",
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
        "--no-pod-logs",
        action="store_true",
        help="diagnostic reports quote no pod logs and say so (for RBAC without get on pods/log)",
    )
    op.add_argument(
        "--prometheus-url",
        help="Prometheus's base URL, read for the morning report's ALERTS history and to confirm a GPU fault "
        "the job's own rule saw (default: $TRAINGUARD_PROMETHEUS_URL; without either, no morning report, and "
        "only the node's sidecar confirms a GPU fault: with gpuBackend dcgm none is then acted on)",
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
        "--object-labels",
        type=object_labels,
        default="release=kube-prometheus-stack",
        metavar="KEY=VALUE[,...]",
        help="labels on every PrometheusRule, PodMonitor, AlertmanagerConfig and Secret applied for a monitor: "
        "what your Prometheus's ruleSelector and podMonitorSelector match (default: what a kube-prometheus-stack "
        "release named kube-prometheus-stack selects; empty for none)",
    )
    op.add_argument(
        "--resync-seconds",
        type=float,
        default=120.0,
        help="compare every monitor's objects with the watch caches this often and apply what differs "
        "(repairs hand edits); the leader only",
    )
    op.add_argument(
        "--secret-rewrite-seconds",
        type=float,
        help="write each monitor's token Secrets again this often although unchanged: the operator cannot read "
        "Secrets, so this is what repairs a hand edit of one (default 3600: kube/client.py SECRET_REWRITE_S)",
    )
    op.add_argument(
        "--reconcile-workers",
        type=workers,
        metavar="N",
        help="threads the kopf handlers run on, so how many monitors reconcile at once (default: Python's, "
        "min(32, the node's CPUs + 4)); a reconcile mostly waits on the API",
    )
    op.add_argument(
        "--heap-trim-seconds",
        type=seconds_or_off,
        default=TRIM_EVERY_S,
        metavar="S",
        help="hand the C heap's free pages back to the kernel this often, on every replica: after a burst of "
        f"reconciles glibc keeps them resident otherwise (default {TRIM_EVERY_S:g}; 0 turns it off)",
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
    op.add_argument(
        "--severity-style",
        choices=STYLES,
        default=GRADE,
        help="the severity label of every rule the operator renders and every alert it posts: grade "
        "(severity=P0..P3, the default) or mapped ("
        + ", ".join(f"{g}={w}" for g, w in MAPPED_SEVERITY.items())
        + ") for an Alertmanager that routes on those; the grade is in the priority label either way, "
        "which trainguard's own routes match (docs/severity.md)",
    )
    op.add_argument(
        "--rule-form",
        choices=("per-monitor", "shared"),  # render/shared.py's RULE_FORMS: --help loads no renderer
        default="per-monitor",
        help="per-monitor: a rule group per monitor (default); shared: one PrometheusRule for every job, "
        "with each monitor's thresholds served as series on the metrics port (docs/rendering.md)",
    )
    shared_form_flags(op, "the shared PrometheusRule")
    op.add_argument(
        "--remediation-first-seconds",
        type=seconds_or_off,
        default=HOLD_S,
        metavar="S",
        help="while a signal that may cordon is on its way to the cordon, reconciles about to start wait, "
        f"at most this long (default {HOLD_S:g}; 0 turns it off): on a busy operator the fast path "
        "otherwise queues for the process behind every monitor being rendered (docs/p0-response.md)",
    )
    op.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    add_guardrails(op)
    op.set_defaults(func=cmd_operator)

    gr = sub.add_parser(
        "guardrails", help="the platform's remediation guardrails: re-arm the circuit breaker"
    )
    verbs = gr.add_subparsers(dest="guardrails_command", metavar="VERB", required=True)
    reset = verbs.add_parser("reset", help=BREAKER_RESET_HELP)
    kube_flags(reset)
    reset.add_argument("--namespace", default="trainguard-system", help="the operator's own namespace")
    reset.add_argument("--by", help="who resets (default: $USER@hostname), kept in the ConfigMap")
    reset.set_defaults(func=cmd_guardrails_reset)


def cmd_operator(args: argparse.Namespace) -> int:
    need("operator", "kopf", "kubernetes", "pydantic", "yaml", "promql_parser", "cryptography")
    refuse_shared_options_without_shared_form(args)
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
            context=args.context,
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
            pod_logs=not args.no_pod_logs,
            receiver_url=args.receiver_url,
            sidecar_image=args.sidecar_image,
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
            object_labels=args.object_labels,
            resync_seconds=args.resync_seconds,
            heap_trim_seconds=args.heap_trim_seconds,
            reconcile_workers=args.reconcile_workers,
            **(
                {"secret_rewrite_seconds": args.secret_rewrite_seconds} if args.secret_rewrite_seconds else {}
            ),
            pods_seconds=args.pods_seconds,
            detect_seconds=args.detect_seconds,
            node_down=NodeDownSettings(
                lease_grace_s=args.node_lease_grace_seconds, not_ready_min_s=args.node_not_ready_seconds
            ),
            self_managed_certs=args.self_managed_certs,
            guardrails=guardrails_of(args),
            lemons=lemons_of(args),
            severity_style=args.severity_style,
            rule_form=args.rule_form,
            shared_rule_groups=args.shared_rule_groups,
            shared_annotation_lookups=args.shared_annotation_lookups,
            remediation_first_seconds=args.remediation_first_seconds,
            cert_policy=CertPolicy(
                serving_lifetime=dt.timedelta(seconds=args.cert_duration),
                renew_before=dt.timedelta(seconds=args.cert_renew_before),
                ca_lifetime=dt.timedelta(seconds=args.ca_duration),
            ),
        )
    )
    return 0


def cmd_guardrails_reset(args: argparse.Namespace) -> int:
    """Write the reset time into the ConfigMap trainguard-guardrails: the leader re-arms every breaker
    opened before it on its next pass (one whose pool still looks down opens again at once)."""
    need("operator", "kubernetes")
    import time

    from trainguard.kube import Kube
    from trainguard.remediation.breaker import RESET_CONFIGMAP, RESET_KEY

    now = int(time.time())
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": RESET_CONFIGMAP,
            "namespace": args.namespace,
            "labels": {"app.kubernetes.io/part-of": "trainguard"},
        },
        "data": {RESET_KEY: str(now), "reset-by": who(args.by)},
    }
    api = api_client(args, component="guardrails")
    try:
        Kube(api).apply(config_map)
    except Exception as exc:
        fail(f"could not write ConfigMap {args.namespace}/{RESET_CONFIGMAP}: {exc}")
    print(f"circuit breakers opened before {now} re-arm on the leader's next pass (ConfigMap "
          f"{args.namespace}/{RESET_CONFIGMAP}); a pool that still looks down opens again")  # fmt: skip
    return 0
