"""`trainguard`: render, validate, crds, docs, and (as they land) operator, exporter and demo.

Heavy imports happen inside each command, so `trainguard --help` is instant and a missing extra is
reported as such, not as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

EXIT_INVALID = 1
EXIT_USAGE = 2


def _fail(message: str, code: int = EXIT_INVALID) -> NoReturn:
    print(f"trainguard: {message}", file=sys.stderr)
    raise SystemExit(code)


def _need(extra: str, *modules: str) -> None:
    """Fail with the pip command to run when a command's extra is not installed."""
    for module in modules or ("pydantic", "yaml", "promql_parser"):
        try:
            importlib.import_module(module)
        except ImportError:
            _fail(
                f"this command needs the '{extra}' extra ({module} is missing): pip install 'trainguard[{extra}]'"
            )


def _read_sources(files: Sequence[str]) -> list[tuple[str, str]]:
    sources = []
    for f in files:
        if f == "-":
            sources.append(("<stdin>", sys.stdin.read()))
            continue
        path = Path(f)
        paths = sorted(path.glob("*.y*ml")) if path.is_dir() else [path]
        for p in paths:
            try:
                sources.append((str(p), p.read_text(encoding="utf-8")))
            except OSError as exc:
                _fail(f"cannot read {p}: {exc.strerror}")
    return sources


def _load(files: Sequence[str]):  # type: ignore[no-untyped-def]
    _need("render")
    from trainguard.api import InvalidInput, load_documents

    try:
        docs = load_documents(_read_sources(files))
    except InvalidInput as exc:
        for p in exc.problems:
            print(f"error: {p}", file=sys.stderr)
        _fail(f"{len(exc.problems)} problem(s) in the input; nothing was rendered")
    if not docs.monitors and not docs.policies:
        _fail("no TrainingJobMonitor or AlertPolicy in the input (apiVersion trainguard.io/v1alpha1)")
    return docs


def cmd_render(args: argparse.Namespace) -> int:
    docs = _load(args.file)
    from trainguard.render import dump_stream, dump_yaml, render_kubernetes, render_prometheus

    if not docs.monitors:
        _fail("no TrainingJobMonitor in the input: rules and routes are rendered per monitor")
    if args.format == "kubernetes":
        text = dump_stream(render_kubernetes(docs, args.aggregate_interval))
        if args.output:
            out = Path(args.output)
            out.mkdir(parents=True, exist_ok=True)
            (out / "trainguard.yaml").write_text(text, encoding="utf-8")
            print(f"wrote {out / 'trainguard.yaml'}", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return 0
    files = render_prometheus(
        docs, args.aggregate_interval, args.remote_write_url, args.remote_write_events_url
    )
    if not args.output:
        _fail("--format prometheus writes several files: give a directory with -o DIR", EXIT_USAGE)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (out / name).write_text(dump_yaml(content), encoding="utf-8")
        print(f"wrote {out / name}", file=sys.stderr)
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    docs = _load(args.file)
    for m in docs.monitors:
        print(f"ok: TrainingJobMonitor {m.namespace}/{m.name}")
    for p in docs.policies:
        print(f"ok: AlertPolicy {p.namespace}/{p.name}")
    for s in docs.skipped:
        print(f"skipped (not a trainguard object): {s}")
    return 0


def _write_or_check(target: Path, text: str, check: bool, regenerate: str) -> None:
    """Write a generated file, or with `check` fail when the committed one differs."""
    if check:
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current != text:
            _fail(f"{target} is out of date: run `{regenerate}` and commit the result")
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target}", file=sys.stderr)


def cmd_crds(args: argparse.Namespace) -> int:
    _need("render")
    from trainguard.api.crd import crds
    from trainguard.render import dump_yaml

    for name, crd in crds().items():
        _write_or_check(Path(args.output) / name, dump_yaml(crd), args.check, "make crds")
    return 0


def cmd_dashboards(args: argparse.Namespace) -> int:
    _need("render", "pydantic", "promql_parser", "grafana_foundation_sdk")
    from trainguard.render.dashboards import render_dashboards

    for name, text in render_dashboards().items():
        _write_or_check(Path(args.output) / name, text, args.check, "make dashboards")
    return 0


def cmd_keep_list(args: argparse.Namespace) -> int:
    """The chart's copy of the remote_write keep-list (files/remote-write-keep.yaml), so that the
    chart's longTermStorage.remoteWrite ships what render.longterm ships, without a hand copy."""
    _need("render")
    from trainguard.render import dump_yaml
    from trainguard.render.longterm import ALERT_HISTORY, aggregate_names

    header = "# generated from trainguard.render.longterm by `make chart`: do not edit\n"
    body = dump_yaml({"aggregates": list(aggregate_names()), "alertHistory": list(ALERT_HISTORY)})
    _write_or_check(Path(args.output), header + body, args.check, "make chart")
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    from trainguard.catalog.markdown import alerts_markdown

    _write_or_check(Path(args.output), alerts_markdown(), args.check, "make docs")
    return 0


def cmd_reference(args: argparse.Namespace) -> int:
    _need("render")
    from trainguard.api.reference import reference_markdown

    regenerate = "trainguard reference -o docs/reference"
    for name, text in reference_markdown().items():
        _write_or_check(Path(args.output) / name, text, args.check, regenerate)
    return 0


def cmd_operator(args: argparse.Namespace) -> int:
    _need("operator", "kopf", "kubernetes", "pydantic", "yaml", "promql_parser", "cryptography")
    import datetime as dt
    import logging

    from trainguard.controller.run import OperatorOptions, run
    from trainguard.controller.webhook_certs import CertPolicy

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
            self_managed_certs=args.self_managed_certs,
            cert_policy=CertPolicy(
                serving_lifetime=dt.timedelta(seconds=args.cert_duration),
                renew_before=dt.timedelta(seconds=args.cert_renew_before),
                ca_lifetime=dt.timedelta(seconds=args.ca_duration),
            ),
        )
    )
    return 0


def cmd_exporter(args: argparse.Namespace) -> int:
    _need("exporter", "prometheus_client")
    from trainguard.exporter.main import run

    return run(args)


def cmd_review(args: argparse.Namespace) -> int:
    _need("operator", "prometheus_api_client", "pydantic", "yaml", "promql_parser")
    from trainguard.review.command import run

    return run(args)


def _who(by: str | None) -> str:
    """Who ran the command, for the record: --by, else $USER@hostname."""
    if by:
        return by
    import getpass
    import os
    import socket

    return f"{os.environ.get('USER') or getpass.getuser()}@{socket.gethostname()}"


def _monitor_ref(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        _fail(f"--monitor takes NAMESPACE/NAME, got {text!r}", EXIT_USAGE)
    return namespace, name


def cmd_ack(args: argparse.Namespace) -> int:
    """Acknowledge an alert: an Alertmanager silence, so it stops notifying and is not escalated."""
    _need("render", "pydantic")
    import os
    import time

    from trainguard.api.common import duration_seconds
    from trainguard.remediation import alertmanager
    from trainguard.remediation.escalation import ack_comment, ack_matchers, format_time

    namespace, name = _monitor_ref(args.monitor)
    base = args.alertmanager or os.environ.get("TRAINGUARD_ALERTMANAGER")
    if not base:
        _fail("give the Alertmanager's URL with --alertmanager URL (or $TRAINGUARD_ALERTMANAGER)", EXIT_USAGE)
    try:
        for_s = duration_seconds(args.for_)
    except ValueError as exc:
        _fail(f"--for: {exc}", EXIT_USAGE)
    if for_s <= 0:
        _fail("--for must be longer than 0s", EXIT_USAGE)
    by, now = _who(args.by), time.time()
    try:
        silence_id = alertmanager.create_silence(
            base,
            ack_matchers(args.alert, namespace, name),
            now,
            now + for_s,
            created_by=by,
            comment=ack_comment(by, now, args.comment or ""),
            timeout=args.timeout,
        )
    except alertmanager.AlertmanagerError as exc:
        if exc.status is None:
            _fail(f"could not reach Alertmanager at {exc.url}: {exc.detail}")
        _fail(f"Alertmanager refused the silence: HTTP {exc.status} {exc.detail}")
    print(
        f"acknowledged {args.alert} of {namespace}/{name} until {format_time(now + for_s)} by {by}",
        file=sys.stderr,
    )
    print(silence_id)
    return 0


def cmd_uncordon(args: argparse.Namespace) -> int:
    """Return a node trainguard cordoned to service; a node a person cordoned is refused."""
    _need("operator", "kopf", "kubernetes")
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    from trainguard.controller.run import client_configuration
    from trainguard.remediation.uncordon import Refused, uncordon

    try:
        api = client.ApiClient(client_configuration(args.kubeconfig))
    except (config.ConfigException, OSError) as exc:
        _fail(f"no Kubernetes credentials: {exc}")
    by = _who(args.by)
    try:
        result = uncordon(api, args.node, by, reason=args.reason or "")
    except Refused as exc:
        _fail(f"refused: {exc}")
    except ApiException as exc:
        _fail(f"the apiserver answered HTTP {exc.status} {exc.reason}: {str(exc.body or '')[:300]}")
    except OSError as exc:
        _fail(f"could not reach the apiserver: {exc}")
    print(result.message)
    if result.event_error:
        print(f"trainguard: warning: the Event was not recorded ({result.event_error})", file=sys.stderr)
    return 0


def _when(text: str | None) -> float:
    """--at: unix seconds or an RFC 3339 time; now when absent."""
    import time

    from trainguard.api.common import instant

    if not text:
        return time.time()
    try:
        return instant(text)
    except ValueError as exc:
        _fail(f"--at {exc}", EXIT_USAGE)


def cmd_report(args: argparse.Namespace) -> int:
    """A diagnostic report of one monitor's job around an alert (or a time): causes, plots and logs."""
    _need("operator", "kubernetes", "prometheus_api_client")
    import os
    import time

    from kubernetes import client, config

    from trainguard.controller.report import build_report, prometheus_client
    from trainguard.controller.run import client_configuration

    namespace, name = _monitor_ref(args.monitor)
    url = args.prometheus or os.environ.get("TRAINGUARD_PROMETHEUS_URL")
    if not url:
        _fail("give Prometheus's URL with --prometheus URL (or $TRAINGUARD_PROMETHEUS_URL)", EXIT_USAGE)
    at = _when(args.at)
    try:
        api = client.ApiClient(client_configuration(args.kubeconfig))
    except (config.ConfigException, OSError) as exc:
        _fail(f"no Kubernetes credentials: {exc}")
    from trainguard.controller.kube import Kube

    try:
        report = build_report(
            Kube(api), prometheus_client(url), namespace, name, alert=args.alert, at=at, now=time.time()
        )
    except LookupError as exc:
        _fail(str(exc))
    except Exception as exc:
        _fail(f"could not build the report: {exc}")
    Path(args.output).write_text(report.html, encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(report.markdown, encoding="utf-8")
    print(args.output)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Each monitored job: health, alerts by severity, throughput against baseline, checkpoint, last
    remediation, training time lost. Plain for pipes, live (ANSI, redrawn with --watch) on a terminal."""
    _need("operator", "kubernetes", "prometheus_api_client")
    import os
    import time

    from kubernetes import client, config

    from trainguard.controller.job_status import Sources, fetch, render_live, render_plain
    from trainguard.controller.kube import Kube
    from trainguard.controller.report import prometheus_client
    from trainguard.controller.run import client_configuration

    url = args.prometheus or os.environ.get("TRAINGUARD_PROMETHEUS_URL")
    try:
        api = client.ApiClient(client_configuration(args.kubeconfig))
    except (config.ConfigException, OSError) as exc:
        _fail(f"no Kubernetes credentials: {exc}")
    am_url = args.alertmanager or os.environ.get("TRAINGUARD_ALERTMANAGER")
    sources = Sources(Kube(api), prometheus_client(url) if url else None, am_url)
    live = sys.stdout.isatty() and not args.plain
    while True:
        now = time.time()
        try:
            statuses = fetch(sources, args.namespace, args.monitor, now)
        except Exception as exc:
            if not args.watch:
                _fail(f"could not read the monitors: {exc}")
            statuses, sources.errors[:] = [], [f"Kubernetes: {exc}"]
        if live:
            text = render_live(statuses, now_text=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)),
                               every_s=args.interval if args.watch else None)  # fmt: skip
        else:
            text = render_plain(statuses)
        notes = [*sources.errors, *status_notes(url, am_url)]
        sys.stdout.write(text + "".join(f"trainguard: {n}\n" for n in notes))
        sys.stdout.flush()
        if not args.watch:
            return 0
        time.sleep(args.interval)


def status_notes(prometheus: str | None, alertmanager: str | None) -> list[str]:
    """What `trainguard status` could not show, so a blank column is not read as "nothing wrong"."""
    if alertmanager:
        return [] if prometheus else ["no --prometheus: throughput, checkpoint and time lost not shown"]
    if not prometheus:
        return ["no --prometheus or --alertmanager: alerts and series not shown"]
    return ["alerts from Prometheus' ALERTS: the faults the operator detects and the sidecars' fast-path "
            "pages are in Alertmanager only; give --alertmanager to see them"]  # fmt: skip


def _duration(text: str) -> float:
    """Seconds in a duration flag, refused at parse time (exit 2, naming the flag) rather than at start-up."""
    from trainguard.api.common import duration_seconds

    try:
        seconds = duration_seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be longer than zero")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    from trainguard import __version__

    parser = argparse.ArgumentParser(
        prog="trainguard",
        description="Monitoring, alerting and automatic P0 response for large-model training on Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"trainguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    render = sub.add_parser("render", help="render monitors and policies into rules and routes")
    render.add_argument(
        "-f",
        "--file",
        action="append",
        required=True,
        metavar="FILE",
        help="YAML file or directory with TrainingJobMonitors and AlertPolicies ('-' for stdin); repeatable",
    )
    render.add_argument(
        "--format",
        choices=["kubernetes", "prometheus"],
        default="kubernetes",
        help="kubernetes: a YAML stream for kubectl apply or Argo CD (default); "
        "prometheus: rules.yml and alertmanager.yml for a plain Prometheus and Alertmanager",
    )
    render.add_argument(
        "-o", "--output", metavar="DIR", help="write files into DIR instead of standard output"
    )
    render.add_argument(
        "--aggregate-interval",
        default="5m",
        metavar="DURATION",
        help="how often the long-term aggregate groups are evaluated (default 5m; tests shorten it)",
    )
    render.add_argument(
        "--remote-write-url",
        metavar="URL",
        help="--format prometheus: also write remote_write.yml, shipping only the aggregates and the "
        "alert history to this long-term store (docs/long-term-storage.md)",
    )
    render.add_argument(
        "--remote-write-events-url",
        metavar="URL",
        help="with --remote-write-url: send the alert history (ALERTS, ALERTS_FOR_STATE) here instead, "
        "to a store with a longer retention than the aggregates' 6 months",
    )
    render.set_defaults(func=cmd_render)

    validate = sub.add_parser(
        "validate", help="check monitors and policies; report every problem with its field"
    )
    validate.add_argument("-f", "--file", action="append", required=True, metavar="FILE")
    validate.set_defaults(func=cmd_validate)

    crds = sub.add_parser("crds", help="write the CustomResourceDefinitions generated from the models")
    crds.add_argument("-o", "--output", default="crds", metavar="DIR")
    crds.add_argument("--check", action="store_true", help="fail if the files in DIR differ from the models")
    crds.set_defaults(func=cmd_crds)

    boards = sub.add_parser("dashboards", help="write the Grafana dashboards generated from the catalogue")
    boards.add_argument("-o", "--output", default="charts/trainguard/dashboards", metavar="DIR")
    boards.add_argument(
        "--check", action="store_true", help="fail if the files in DIR differ from the catalogue"
    )
    boards.set_defaults(func=cmd_dashboards)

    keep = sub.add_parser("keep-list", help="write the chart's remote_write keep-list from the aggregates")
    keep.add_argument(
        "-o", "--output", default="charts/trainguard/files/remote-write-keep.yaml", metavar="FILE"
    )
    keep.add_argument("--check", action="store_true", help="fail if FILE differs from the aggregates")
    keep.set_defaults(func=cmd_keep_list)

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
        "--cert-duration", default="90d", type=_duration, help="self-managed serving certificate's lifetime"
    )
    op.add_argument(
        "--cert-renew-before",
        default="30d",
        type=_duration,
        help="renew it this long before it expires (at most a third of its lifetime)",
    )
    op.add_argument(
        "--ca-duration", default="3650d", type=_duration, help="self-managed CA's lifetime (renewed at 2/3)"
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
    op.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    op.set_defaults(func=cmd_operator)

    exp = sub.add_parser(
        "exporter", help="run the exporter sidecar: GPU, host and training metrics on /metrics"
    )
    from trainguard.exporter.flags import add_arguments

    add_arguments(exp)
    exp.set_defaults(func=cmd_exporter)

    drill = sub.add_parser(
        "drill", help="play a fault scenario on a live installation: time to alert, notice, action, resume"
    )
    from trainguard.drill.command import add_arguments as add_drill_arguments
    from trainguard.drill.command import run as run_drill

    add_drill_arguments(drill)
    drill.set_defaults(func=run_drill)

    rev = sub.add_parser(
        "review", help="the two-weekly rule review: never fired, co-firing, flapping, alerts by receiver"
    )
    from trainguard.review.flags import add_arguments as review_arguments

    review_arguments(rev)
    rev.set_defaults(func=cmd_review)

    ack = sub.add_parser(
        "ack", help="acknowledge an alert: an Alertmanager silence that also stops its escalation"
    )
    ack.add_argument("alert", metavar="ALERT", help="the alert's name, such as GPUThermalThrottling")
    ack.add_argument("--monitor", required=True, metavar="NS/NAME", help="the TrainingJobMonitor it is of")
    ack.add_argument(
        "--alertmanager",
        metavar="URL",
        help="Alertmanager's base URL (default: $TRAINGUARD_ALERTMANAGER)",
    )
    ack.add_argument("--for", dest="for_", default="4h", metavar="DURATION", help="how long (default 4h)")
    ack.add_argument("--comment", metavar="TEXT", help="why, for the silence's comment")
    ack.add_argument("--by", metavar="WHO", help="who acknowledges (default: $USER@hostname)")
    ack.add_argument("--timeout", type=float, default=10.0, help=argparse.SUPPRESS)
    ack.set_defaults(func=cmd_ack)

    unc = sub.add_parser(
        "uncordon", help="return a node trainguard cordoned to service (refuses a node a person cordoned)"
    )
    unc.add_argument("node", metavar="NODE")
    unc.add_argument("--kubeconfig", help="default: in-cluster config, then KUBECONFIG / ~/.kube/config")
    unc.add_argument("--by", metavar="WHO", help="who returns it (default: $USER@hostname)")
    unc.add_argument("--reason", metavar="TEXT", help="why, such as the repair done")
    unc.set_defaults(func=cmd_uncordon)

    docs = sub.add_parser("docs", help="write docs/alerts.md from the alert catalogue")
    docs.add_argument("-o", "--output", default="docs/alerts.md", metavar="FILE")
    docs.add_argument("--check", action="store_true", help="fail if FILE differs from the catalogue")
    docs.set_defaults(func=cmd_docs)

    ref = sub.add_parser("reference", help="write docs/reference/, the CR reference, from the models")
    ref.add_argument("-o", "--output", default="docs/reference", metavar="DIR")
    ref.add_argument("--check", action="store_true", help="fail if DIR differs from the models")
    ref.set_defaults(func=cmd_reference)

    rep = sub.add_parser("report", help="a diagnostic report (HTML, Markdown) of a job around an alert")
    rep.add_argument("--monitor", required=True, metavar="NS/NAME", help="the TrainingJobMonitor")
    rep.add_argument("--alert", help="the alert to report on (default: the job's most severe firing at --at)")
    rep.add_argument("--at", metavar="TIME", help="unix seconds or RFC 3339 (default: now)")
    rep.add_argument("-o", "--output", default="trainguard-report.html", metavar="FILE.html")
    rep.add_argument("--markdown", metavar="FILE.md", help="also write the Markdown version")
    rep.add_argument(
        "--prometheus", metavar="URL", help="Prometheus's base URL (default: $TRAINGUARD_PROMETHEUS_URL)"
    )
    rep.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    rep.set_defaults(func=cmd_report)

    st = sub.add_parser(
        "status", help="each monitored job's health, alerts, throughput, checkpoint and time lost"
    )
    st.add_argument("-n", "--namespace", help="only this namespace's monitors (default: all)")
    st.add_argument("--monitor", metavar="NAME", help="only this monitor (in -n, default 'default')")
    st.add_argument("--watch", action="store_true", help="redraw every --interval seconds until Ctrl-C")
    st.add_argument("--interval", type=float, default=5.0, metavar="SECONDS", help="with --watch (default 5)")
    st.add_argument("--plain", action="store_true", help="the plain layout even on a terminal")
    st.add_argument(
        "--prometheus", metavar="URL", help="Prometheus's base URL (default: $TRAINGUARD_PROMETHEUS_URL)"
    )
    st.add_argument(
        "--alertmanager",
        metavar="URL",
        help="read the active alerts from Alertmanager instead of ALERTS (default: $TRAINGUARD_ALERTMANAGER)",
    )
    st.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    st.set_defaults(func=cmd_status)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
