"""`trainguard operator`: wire settings, handlers and the webhook server into kopf and run it."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import logging
import os
import random
import secrets
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import kopf
from prometheus_client import CollectorRegistry

from trainguard import IMAGE
from trainguard.catalog.severity import GRADE
from trainguard.certs.ca import WEBHOOK_CERT_SECRET, CertPolicy, serving_names
from trainguard.certs.secret import SelfManagedCerts
from trainguard.certs.tls import ReloadableTLS
from trainguard.clients.prometheus import prometheus_client
from trainguard.controller.diffbase import ObservedGenerationDiffBase, ProgressAnnotations
from trainguard.controller.handlers import (
    CHANGE_HANDLERS,
    LOCKS,
    MonitorSettings,
    announcer,
    reconcile,
    register,
    resync,
)
from trainguard.controller.heap import TRIM_EVERY_S, HeapTrim, glibc_trim
from trainguard.controller.in_place import InPlace
from trainguard.controller.injection import WEBHOOK_ID, AdmissionServer, SidecarInjection
from trainguard.controller.leadership import Leadership
from trainguard.controller.metrics import (
    DEFAULT_METRICS_ADDR,
    OperatorMetrics,
    RemediationFirstCollector,
    serve,
)
from trainguard.controller.namespace_labels import NamespaceLabels
from trainguard.controller.periodic import Loop, Periodic
from trainguard.controller.ready_generations import ReadyGenerations
from trainguard.controller.reconcile import ReceiverSettings
from trainguard.controller.reconciles_begun import ReconcilesBegun
from trainguard.controller.rule_settings import RuleSettingsCollector, from_cache
from trainguard.diagnosis.passes import DiagnosticReports, MorningReports
from trainguard.kube import ClusterCache, Kube, api_client, credentials, with_hash
from trainguard.kube.client import SECRET_REWRITE_S
from trainguard.remediation import lemon, tokens
from trainguard.remediation.alert_history import AlertHistory
from trainguard.remediation.breaker import RESET_CONFIGMAP, reset_time
from trainguard.remediation.cluster import Cluster
from trainguard.remediation.detect import NodeDownSettings
from trainguard.remediation.guardrails import Guardrails
from trainguard.remediation.lemon import LemonPolicy
from trainguard.remediation.lemon_labels import LemonLabels
from trainguard.remediation.loop import RemediationLoop
from trainguard.remediation.model import Signal
from trainguard.remediation.receiver import MonitorUids, Receiver, ReceiverConfig, SenderCheck
from trainguard.remediation.senders import Senders
from trainguard.remediation.urgency import HOLD_S, Urgency
from trainguard.render.kubernetes import KUBE_PROMETHEUS_STACK_LABELS, shared_prometheus_rule
from trainguard.render.shared import PER_MONITOR, SHARED, SHARED_RULE_NAME
from trainguard.render.sidecar import supports_native_sidecar
from trainguard.render.webhook import (
    EVICTION_CONFIG_NAME,
    WEBHOOK_CONFIG_NAME,
    eviction_webhook_configuration,
    excluded_namespaces,
    mutating_webhook_configuration,
)

log = logging.getLogger("trainguard.operator")

KEY_SECRET = "trainguard-receiver-key"
PROMETHEUS_URL_ENV = "TRAINGUARD_PROMETHEUS_URL"


def receiver_base(url: str) -> str:
    """The receiver's base URL; an older --receiver-url named the events path itself."""
    return url.rstrip("/").removesuffix("/v1/events")


@dataclass(frozen=True)
class OperatorOptions:
    kubeconfig: str | None = None
    context: str | None = None
    """The kubeconfig's context to use (--context), else its current-context."""
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
    receiver_url: str = "https://trainguard-operator.trainguard-system.svc:8443"
    """Base URL the sidecars (/v1/events) and Alertmanager (/v1/alerts) reach the receiver at."""
    sidecar_image: str = IMAGE
    """The image of the exporter sidecars the webhook injects (a monitor's spec.exporter.image overrides
    it); the chart passes its own image, so one upgrade moves the operator and the sidecars together."""
    receiver_addr: str = "0.0.0.0"
    receiver_port: int = 8443
    receiver_cert: str | None = None
    """TLS certificate of the receiver (default: the webhook's)."""
    receiver_key: str | None = None
    receiver_ca: str | None = None
    """The CA that signed it (default: the webhook's), handed to sidecars and Alertmanager."""
    key_file: str | None = None
    """The operator key (a mounted file); default: the Secret KEY_SECRET in `namespace`."""
    alertmanager_url: str | None = None
    """Alertmanager's base URL: the operator posts the faults it detects itself and its notices there."""
    prometheus_url: str | None = None
    """Prometheus's base URL, for the morning report's ALERTS history and as a GPU fault's second witness
    (the job's own rule fired there); default: $TRAINGUARD_PROMETHEUS_URL. Without it (or without
    alertmanager_url) no morning report is sent, and only the node's sidecar can confirm a GPU fault."""
    pod_logs: bool = True
    """Quote the job's pod logs in diagnostic reports (RBAC: get on pods/log, deploy/rbac-pod-logs.yaml)."""
    liveness: str | None = "http://0.0.0.0:8080/healthz"
    metrics_addr: str = DEFAULT_METRICS_ADDR
    """[host]:port of the operator's own /metrics; "" turns it off."""
    object_labels: dict[str, str] = field(default_factory=lambda: dict(KUBE_PROMETHEUS_STACK_LABELS))
    """Labels on every object applied for a monitor: what the platform's Prometheus selects rules and pod
    monitors by (a default kube-prometheus-stack release's `release: kube-prometheus-stack`)."""
    resync_seconds: float = 120.0
    """How often every monitor is compared with the watch caches and what differs applied (repairs hand
    edits of the objects it owns)."""
    secret_rewrite_seconds: float = SECRET_REWRITE_S
    """How often a monitor's Secrets are written again although unchanged (kube.client.SECRET_REWRITE_S)."""
    pods_seconds: float = 15.0
    detect_seconds: float = 3.0
    """How often the leader looks for the faults no exporter reports (remediation/passes.py's WatchPass)."""
    node_down: NodeDownSettings = field(default_factory=NodeDownSettings)
    self_managed_certs: bool = False
    """Keep the webhook's and receiver's certificates in a Secret of our own (certs/)
    instead of --webhook-cert/--webhook-key/--webhook-ca files."""
    cert_policy: CertPolicy = field(default_factory=CertPolicy)
    guardrails: Guardrails = field(default_factory=Guardrails)
    """The platform's limits on remediation and the operator-wide mode (--remediation-mode and the
    guardrail flags)."""
    lemons: LemonPolicy = field(default_factory=LemonPolicy)
    """The platform's lemon threshold (--lemon-faults in --lemon-window)."""
    severity_style: str = GRADE
    """The platform's style of the `severity` label of the rules rendered and the alerts posted
    (catalog/severity.py, --severity-style); the grade is in `priority` either way."""
    rule_form: str = PER_MONITOR
    """--rule-form: a rule group per monitor, or the shared group with the monitors' numbers published as
    series on the metrics port (render/shared.py, controller/rule_settings.py)."""
    shared_rule_groups: int = 1
    """--shared-rule-groups: the shared group's rules in at most this many groups (render/rule_split.py)."""
    shared_annotation_lookups: bool = False
    """--shared-annotation-lookups: the shared group's alerts look up their correlation annotations."""
    cert_dir: str | None = None
    """Where the self-managed certificate files are written for the servers (default: a private tmp dir)."""
    reconcile_workers: int | None = None
    """--reconcile-workers: the threads kopf runs the handlers on, so how many monitors reconcile at once;
    None: Python's default, min(32, the node's CPUs + 4), which counts the node's CPUs, not the pod's."""
    heap_trim_seconds: float = TRIM_EVERY_S
    """--heap-trim-seconds: how often each replica hands its C heap's free pages back to the kernel
    (controller/heap.py); 0 turns it off."""
    remediation_first_seconds: float = HOLD_S
    """--remediation-first-seconds: the longest a reconcile about to start waits while a signal that may
    cordon is on its way to the cordon (remediation/urgency.py); 0 turns it off."""


def connection_info(kubeconfig: str | None, context: str | None = None) -> kopf.ConnectionInfo:
    """What kopf.login_via_client returns, for an explicit kubeconfig too, read anew at each login (kopf
    logs in again after a 401): a rotated token or an exec plugin's new credential is what it gets."""
    c = credentials(kubeconfig, context)
    return kopf.ConnectionInfo(
        server=c.server,
        ca_path=c.ca_path,
        insecure=c.insecure,
        username=c.username,
        password=c.password,
        scheme=c.scheme,
        token=c.token,
        certificate_path=c.certificate_path,
        private_key_path=c.private_key_path,
        default_namespace=None,
    )


API_POOL = 32
"""Connections to the apiserver: six watches, the planner, four executors, the passes and the webhook."""


def run(opts: OperatorOptions) -> None:
    registry = kopf.OperatorRegistry()
    base = receiver_base(opts.receiver_url)
    register(registry)
    api = api_client(opts.kubeconfig, context=opts.context, pool=API_POOL, component="operator")
    # every replica keeps the watch caches (its webhook reads them; a standby must be warm when it leads)
    cache = ClusterCache(api).start()
    # an apply compares with the owned objects' cache instead of reading each object by name
    kube = Kube(api, live=cache.applied, secret_rewrite_s=opts.secret_rewrite_seconds)
    priority = opts.priority if opts.priority is not None else random.randint(1, 2**31 - 1)
    # our own identity in kopf's peering, so the operator's loops can tell which replica leads
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
    leader = Leadership(
        None if opts.standalone else (lambda: kube.get_peering(opts.peering)), identity, priority
    )
    cluster = Cluster(kube, cache, lemons=opts.lemons)
    metrics = OperatorMetrics(
        CollectorRegistry(),
        leader=leader,
        caches=cache.counts,
        node_faults=lambda: lemon.scores(cache.nodes(), time.time(), opts.lemons),
        monitors=lambda: cache.monitors(timeout=2.0),
    )
    if opts.rule_form == SHARED:
        metrics.registry.register(RuleSettingsCollector(from_cache(cache)))
    prometheus_url = opts.prometheus_url or os.environ.get(PROMETHEUS_URL_ENV) or None
    prometheus = prometheus_client(prometheus_url) if prometheus_url else None
    # a GPU fault's second witness: short, bounded queries (an executor waits on them)
    history = (
        AlertHistory(prometheus_client(prometheus_url, timeout=5, retries=1), prometheus_url)
        if prometheus_url
        else None
    )
    # the fast path first: reconciles about to start wait while a signal is on its way to its cordon
    urgency = Urgency(opts.remediation_first_seconds)
    metrics.registry.register(RemediationFirstCollector(urgency))
    remediation = RemediationLoop(
        kube,
        cache,
        cluster,
        key=lambda: receiver.key if (receiver := shared.get("receiver")) else None,
        leader=leader,
        lock=LOCKS,
        alertmanager_url=opts.alertmanager_url,
        on_step=metrics.step,
        guardrails=opts.guardrails,
        mode=lambda: opts.guardrails.mode,
        reset=lambda: reset_time(kube.read_config_map(opts.namespace, RESET_CONFIGMAP)),
        node_down=opts.node_down,
        history=history,
        severity_style=opts.severity_style,
        urgency=urgency,
    )

    reports = MorningReports(
        kube,
        cache,
        leader=leader,
        alertmanager_url=opts.alertmanager_url,
        prometheus=prometheus,
    )
    diagnostics = DiagnosticReports(kube, cache, leader=leader, prometheus=prometheus, pod_logs=opts.pod_logs)

    # five threads, so that none holds another back: the resync and pod counts, the P0 loop's passes,
    # its detection (at a shorter period: node down is timed by it), the lemon labels and the reports
    p0_loop = Loop("p0", opts.pods_seconds, remediation.passes, leader)
    detect_loop = Loop("detect", opts.detect_seconds, remediation.detect, leader)
    lemon_loop = Loop("lemons", opts.pods_seconds, LemonLabels(cache, kube, opts.lemons, leader).run, leader)
    report_loop = Loop(
        "reports", opts.pods_seconds, functools.partial(report_pass, reports, diagnostics), leader
    )
    # on every replica, not the leader alone: a standby's caches churn through the same watch events
    trim = glibc_trim() if opts.heap_trim_seconds > 0 else None
    heap_loop = (
        Loop("heap", opts.heap_trim_seconds, HeapTrim(trim).run, lambda: True, first_s=opts.heap_trim_seconds)
        if trim is not None
        else None
    )
    # the label that sends a namespace's pods to the webhook (render/webhook.py's namespaceSelector)
    namespaces = NamespaceLabels(kube, cache, frozenset(excluded_namespaces(opts.namespace)))
    # what every reconcile and resync is given: one object, for the kopf handlers (the memo) and the resync
    monitor_settings = MonitorSettings(
        metrics=metrics,
        label_namespace=namespaces.ensure,
        severity_style=opts.severity_style,
        object_labels=opts.object_labels,
        rule_form=opts.rule_form,
        urgency=urgency,
        begun=ReconcilesBegun(),
        ready=ReadyGenerations(),
    )
    in_place = InPlace()  # what the resync found in place: a steady pass renders nothing again
    periodic = Periodic(
        kube,
        cache,
        leader=leader,
        reconcile=lambda ns, name: reconcile(
            kube, cache, ns, name, receiver=shared.get("receiver"), settings=monitor_settings
        ),
        lock=LOCKS,
        resync=lambda body: resync(
            kube, cache, body, receiver=shared.get("receiver"), settings=monitor_settings, in_place=in_place
        ),
        resync_s=opts.resync_seconds,
        pods_s=opts.pods_seconds,
        label_namespaces=namespaces.sweep,
        announce=lambda body, reason, message: announcer(kube, body)(reason, message),
        # the shared group, repaired at each resync like a monitor's objects (in place: no request)
        operator_objects=(lambda: apply_shared_rules(kube, opts)) if opts.rule_form == SHARED else None,
    )

    shared: dict[str, Any] = {}
    certs = self_managed_certs(kube, opts, leader, shared) if opts.self_managed_certs else None

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        nonlocal opts
        memo["kube"] = kube
        memo["reads"] = cache
        memo["metrics"] = metrics
        memo["settings"] = monitor_settings  # not kopf's `settings`, this handler's argument
        memo["remediation_mode"] = opts.guardrails.mode  # the eviction gate holds nothing unless acting
        if opts.rule_form == SHARED:
            apply_shared_rules(kube, opts)
        shared["memo"] = memo
        if certs is not None:
            opts = start_self_managed_certs(certs, opts)
        memo["receiver"] = shared["receiver"] = receiver_settings(kube, opts, base)
        configure_kopf(settings, opts.reconcile_workers)
        if opts.webhook_cert and opts.webhook_key:
            injection = SidecarInjection(
                kube,
                cache,
                receiver_url=f"{base}/v1/events",
                sidecar_image=opts.sidecar_image,
                native_sidecar=native_sidecar(kube),
                metrics=metrics,
            )
            # kopf's server; the injection answered on its loop (controller/injection.py), the rest by kopf
            settings.admission.server = AdmissionServer(
                {WEBHOOK_ID: injection},
                addr=opts.webhook_addr,
                port=opts.webhook_port,
                certfile=opts.webhook_cert,
                pkeyfile=opts.webhook_key,
                cafile=opts.webhook_ca,
                # self-managed: the context follows each rotation itself (kopf's file watch would
                # close the listener and open a new one)
                context=certs.tls.server_context() if certs is not None else None,
                file_check_interval=86400.0 if certs is not None else 60.0,
            )
            settings.admission.managed = None  # we manage the configuration: Ignore, 5s, selectors
        if (
            certs is None
            and opts.manage_webhook
            and opts.webhook_ca
            and (opts.webhook_url or opts.webhook_service)
        ):
            ensure_webhook_configuration(kube, opts)
        shared["server"] = start_receiver(
            opts,
            shared.get("receiver"),
            remediation.receive,
            leader,
            metrics,
            tls=certs.tls if certs is not None else None,
            monitors=cache,
            senders=Senders(kube, cache, read_pod=kube.read_pod),
        )
        remediation.start()
        periodic.start()
        p0_loop.start()
        detect_loop.start()
        lemon_loop.start()
        report_loop.start()
        if heap_loop is not None:
            heap_loop.start()
        freeze_startup_objects()

    @kopf.on.cleanup(registry=registry)
    def stop_periodic(**_: Any) -> None:
        periodic.stop()
        p0_loop.stop()
        detect_loop.stop()
        lemon_loop.stop()
        report_loop.stop()
        if heap_loop is not None:
            heap_loop.stop()
        if certs is not None:
            certs.stop()
        remediation.stop()
        cache.stop()
        if shared.get("server") is not None:
            shared["server"].stop()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo | None:
        return connection_info(opts.kubeconfig, opts.context)

    log.info(
        "trainguard operator starting: peering %s, identity %s, priority %d", opts.peering, identity, priority
    )
    metrics_server = serve(opts.metrics_addr, metrics.registry)
    try:
        _run_kopf(registry, opts, identity, priority)
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()


def _run_kopf(registry: kopf.OperatorRegistry, opts: OperatorOptions, identity: str, priority: int) -> None:
    asyncio.run(
        kopf.operator(
            registry=registry,
            clusterwide=True,
            standalone=opts.standalone,
            peering_name=opts.peering,
            priority=priority,
            identity=cast(Any, identity),  # kopf's Identity is a NewType of str
            liveness_endpoint=opts.liveness,
        )
    )


class ObjectWriter(Protocol):
    def apply(self, obj: dict[str, Any]) -> bool | None: ...


def configure_kopf(settings: kopf.OperatorSettings, workers: int | None = None) -> None:
    """`workers`: the handlers' threads (kopf's executor; None keeps its default)."""
    if workers is not None:
        settings.execution.max_workers = workers
    progress = ProgressAnnotations(prefix="trainguard.io")
    settings.persistence.progress_storage = progress
    # what was handled is the status the handlers wrote: kopf writes no annotation of its own per change
    settings.persistence.diffbase_storage = ObservedGenerationDiffBase(progress, CHANGE_HANDLERS)
    settings.persistence.finalizer = "trainguard.io/finalizer"  # only to remove old ones
    # kopf's own Events only for its warnings and errors: its "Handler 'monitor' succeeded" and
    # "Creation is processed" would be two more writes per monitor change (trainguard posts Applied)
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60


def apply_shared_rules(kube: ObjectWriter, opts: OperatorOptions) -> bool:
    """The shared group's PrometheusRule, at startup and again at each resync (Periodic.operator_objects):
    its content depends on the catalogue and the severity style only, so monitors never change it, and an
    apply of it in place writes nothing (Kube.apply compares it with the watch cache); one deleted or
    edited by hand is put back. Stamped with its content hash, so that a restarted operator finds it in
    place too. A failure is logged: the monitors' own groups are then what Prometheus has, and
    TrainguardMonitorSettingsMissing cannot fire either, so say it loudly. Returns whether it wrote."""
    rule, _ = with_hash(
        shared_prometheus_rule(
            opts.namespace,
            opts.severity_style,
            opts.object_labels,
            parts=opts.shared_rule_groups,
            lookups=opts.shared_annotation_lookups,
        )
    )
    try:
        changed = bool(kube.apply(rule))
    except Exception:
        log.exception("could not apply the shared rule group (--rule-form shared): no shared alerts fire")
        return False
    if changed:
        log.info("applied PrometheusRule %s/%s (the shared rule group)", opts.namespace, SHARED_RULE_NAME)
    return changed


def freeze_startup_objects() -> None:
    """Move every object of the started operator (its modules, kopf's, the settings: about 80,000) out
    of the cycle collector's reach: a full collection walks all of them, about 25 ms during which no
    admission is answered, every few thousand requests (bench/admission.py). They live as long as the
    process; what is made later is collected as before."""
    gc.collect()
    gc.freeze()


def report_pass(reports: MorningReports, diagnostics: DiagnosticReports | None = None) -> None:
    """The morning reports, then the P2 diagnostic reports, which run even when a morning report
    failed (Alertmanager down, say: each report is retried on its own)."""
    try:
        reports.run()
    finally:
        if diagnostics is not None:
            diagnostics.run()


class _ReloadingReceiver(Receiver):
    """The receiver on self-managed certificates: its socket's context follows each rotation."""

    tls: ReloadableTLS

    def tls_context(self) -> Any:
        return self.tls.server_context()


def self_managed_certs(
    kube: Kube, opts: OperatorOptions, leader: Leadership, shared: dict[str, Any]
) -> SelfManagedCerts:
    """The Secret-backed certificates for the webhook Service's names and the receiver's host."""
    service = opts.webhook_service.partition(":")[0] if opts.webhook_service else None
    names = serving_names(opts.namespace, service, [opts.webhook_url, opts.receiver_url])
    directory = Path(opts.cert_dir) if opts.cert_dir else Path(tempfile.mkdtemp(prefix="trainguard-certs-"))

    def apply_bundle(bundle: bytes) -> None:
        ensure_webhook_configuration(kube, opts, ca=bundle)

    def on_bundle(bundle: bytes) -> None:
        # the sidecars and Alertmanager get the new bundle at the next reconcile of each monitor
        settings = shared.get("receiver")
        if settings is not None:
            shared["receiver"] = dataclasses.replace(settings, ca=bundle.decode())
            if shared.get("memo") is not None:
                shared["memo"]["receiver"] = shared["receiver"]

    return SelfManagedCerts(
        secrets=kube,
        namespace=opts.namespace,
        names=names,
        policy=opts.cert_policy,
        tls=ReloadableTLS(directory),
        leader=leader,
        apply_bundle=apply_bundle
        if opts.manage_webhook and (opts.webhook_url or opts.webhook_service)
        else None,
        on_bundle=on_bundle,
    )


def start_self_managed_certs(certs: SelfManagedCerts, opts: OperatorOptions) -> OperatorOptions:
    """First sync before the servers start (they need a certificate), then the rotation loop. The
    options returned point the servers and the receiver's CA at the files the certificates are in."""
    try:
        certs.sync()
    except Exception as exc:
        log.error("no self-managed certificates (%s): the webhook and the receiver stay off; grant get, create "
                  "and update on Secret %s/%s (deploy/rbac-webhook-tls.yaml)", exc, opts.namespace, WEBHOOK_CERT_SECRET)  # fmt: skip
        return opts
    log.info("self-managed certificates for %s (renewal checked every %.0fs)",
             ", ".join([*certs.names.dns, *map(str, certs.names.ips)]), certs.policy.check_interval)  # fmt: skip
    certs.start()
    tls = certs.tls
    return dataclasses.replace(
        opts,
        webhook_cert=str(tls.cert_file),
        webhook_key=str(tls.key_file),
        webhook_ca=str(tls.ca_file),
        receiver_cert=None,
        receiver_key=None,
        receiver_ca=None,
    )


def start_receiver(
    opts: OperatorOptions,
    settings: ReceiverSettings | None,
    on_signals: Callable[[list[Signal]], None],
    leader: Leadership,
    metrics: OperatorMetrics | None = None,
    *,
    tls: ReloadableTLS | None = None,
    monitors: MonitorUids,
    senders: SenderCheck | None = None,
) -> Receiver | None:
    """The remediation receiver (TLS, /v1/alerts and /v1/events); every replica serves it, a standby
    answers 503 so that Alertmanager and the sidecars retry until they reach the leader."""
    cert, key = opts.receiver_cert or opts.webhook_cert, opts.receiver_key or opts.webhook_key
    if settings is None or not cert or not key:
        log.error("the remediation receiver is off: %s", "no operator key" if settings is None else
                  "no TLS certificate (--receiver-cert/--receiver-key or the webhook's)")  # fmt: skip
        return None
    server = (Receiver if tls is None else _ReloadingReceiver)(
        ReceiverConfig(
            host=opts.receiver_addr, port=opts.receiver_port, certfile=cert, keyfile=key, key=settings.key
        ),
        on_signals=on_signals,
        accepting=leader,
        observe=metrics.signal if metrics is not None else lambda source, result: None,
        monitors=monitors,
        senders=senders,
    )
    if isinstance(server, _ReloadingReceiver) and tls is not None:
        server.tls = tls
    try:
        server.start()
    except OSError as exc:
        log.error(
            "the remediation receiver cannot listen on %s:%d: %s", opts.receiver_addr, opts.receiver_port, exc
        )
        return None
    return server


def receiver_settings(kube: Kube, opts: OperatorOptions, base: str) -> ReceiverSettings | None:
    """The operator key and where its receiver is. Without a key the monitors keep random tokens that
    nothing can check: say so loudly rather than stop reconciling."""
    try:
        key = (
            tokens.load_key(opts.key_file)
            if opts.key_file
            else kube.ensure_receiver_key(opts.namespace, KEY_SECRET, tokens.new_key())
        )
    except Exception as exc:
        log.error("no operator key (%s): the remediation receiver cannot check tokens and stays off; grant get "
                  "on Secret %s/%s (deploy/rbac.yaml) or pass --key-file", exc, opts.namespace, KEY_SECRET)  # fmt: skip
        return None
    ca_path = opts.receiver_ca or opts.webhook_ca
    ca = Path(ca_path).read_text() if ca_path else None
    return ReceiverSettings(key=key, url=base, ca=ca)


def native_sidecar(kube: Kube) -> bool:
    """Whether this apiserver keeps an init container's restartPolicy Always (Kubernetes 1.29+)."""
    try:
        major, minor = kube.server_version()
    except Exception as exc:
        log.warning("cannot read the server version (%s); assuming native sidecars are supported", exc)
        return True
    supported = supports_native_sidecar(major, minor)
    if not supported:
        log.warning("Kubernetes %s.%s has no native sidecars: the exporter is injected as a regular container "
                    "(a Job's pod then completes only when the exporter stops too)", major, minor)  # fmt: skip
    return supported


def ensure_webhook_configuration(kube: Kube, opts: OperatorOptions, ca: bytes | None = None) -> None:
    """Apply the MutatingWebhookConfiguration and the eviction gate's ValidatingWebhookConfiguration with
    `ca` (default: the --webhook-ca file) as their caBundle."""
    ca = ca if ca is not None else Path(opts.webhook_ca or "").read_bytes()
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
    gate = eviction_webhook_configuration(
        ca,
        url=opts.webhook_url if service is None else None,
        service=service,
        operator_namespace=opts.namespace,
    )
    kube.apply(gate)
    log.info("applied ValidatingWebhookConfiguration %s", EVICTION_CONFIG_NAME)
