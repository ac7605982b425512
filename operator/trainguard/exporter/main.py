"""`trainguard exporter`: build the exporter from flags and serve until stopped."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import urllib.parse
from types import ModuleType
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from trainguard.exporter.app import Exporter, ExporterConfig, GPUBackend
from trainguard.exporter.fastpath import FastPathSender
from trainguard.exporter.faults import Faults
from trainguard.exporter.host import HostReader
from trainguard.exporter.server import serve
from trainguard.exporter.simulated import SimulatedBackend
from trainguard.exporter.training import TrainingState

if TYPE_CHECKING:
    from trainguard.exporter.otlp import OTLPPusher

log = logging.getLogger("trainguard.exporter")


def build(args: argparse.Namespace, registry: CollectorRegistry | None = None) -> Exporter:
    backend: GPUBackend | None
    if args.backend == "simulated":
        backend = SimulatedBackend(gpus=args.gpus, seed=args.seed)
    elif args.backend == "nvml":
        from trainguard.exporter.nvml import NVMLBackend  # noqa: PLC0415 - pynvml only when used

        backend = NVMLBackend()
    else:
        backend = None
    identity = {
        "namespace": args.namespace,
        "pod": args.pod,
        "node": args.node,
        "training_job": args.training_job,
    }
    faults = Faults()
    sender = None
    if args.fastpath_url:
        sender = FastPathSender(args.fastpath_url, args.fastpath_identity_file, ca_file=args.fastpath_ca_file)
        sender.start()
    # until the pod's GPUs are known (NVML), tokens/s is per pod; then per GPU of the pod
    gpus_per_pod = args.gpus_per_pod or (args.gpus if args.backend == "simulated" else 1)
    return Exporter(
        config=ExporterConfig(
            identity=identity,
            backend_name=args.backend,
            poll_interval_s=args.poll_interval,
            render_interval_s=args.render_interval,
            stall_after_s=args.stall_after,
            gpu_ids=args.gpu_ids,
            gpus_per_pod=args.gpus_per_pod,
            filter_gpus=args.backend == "nvml",
            trace_id=args.trace_id,
        ),
        backend=backend,
        host=None if args.no_host else HostReader(args.host_root),
        training=TrainingState(gpus_per_pod=gpus_per_pod, faults=faults, resume_from=args.resume_from),
        faults=faults,
        registry=registry or CollectorRegistry(),
        fastpath=sender,
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    host, _, port = args.listen.rpartition(":")
    otlp = otlp_module() if args.otlp_endpoint else None  # before anything starts: a missing extra stops it
    exporter = build(args)
    exporter.start()
    pusher = start_otlp(otlp, args, exporter) if otlp is not None else None
    servers = serve(exporter, host or "0.0.0.0", int(port), socket_path=args.sdk_socket,
                    fault_injection=args.enable_fault_injection, token_file=args.fastpath_token_file,
                    sdk_tcp=args.sdk_tcp)  # fmt: skip
    if args.enable_fault_injection:
        log.warning(
            "fault injection is ON: POST /v1/faults changes the metrics (never use this in production)"
        )
    sdk = [f"unix://{args.sdk_socket}"] if args.sdk_socket else []
    sdk += [f"tcp {args.listen}"] if args.sdk_tcp else []
    log.info("serving /metrics on %s (backend %s); SDK on %s", args.listen, args.backend,
             " and ".join(sdk) or "nothing (no --sdk-socket, no --sdk-tcp)")  # fmt: skip
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    if args.exit_after_bye:
        wait_for_trainers(exporter, done, args.exit_grace_seconds)
    else:
        done.wait()
    for s in servers:
        s.shutdown()
        s.server_close()
    if pusher is not None:
        pusher.stop()
    exporter.stop()
    return 0


def otlp_module() -> ModuleType:
    """trainguard.exporter.otlp, or a clear exit when the otlp extra is not installed."""
    try:
        from trainguard.exporter import otlp  # noqa: PLC0415 - the SDK only when --otlp-endpoint is set
    except ImportError as exc:
        raise SystemExit(
            f"--otlp-endpoint needs the otlp extra, which is not installed ({exc.name or exc} is missing): "
            "pip install 'trainguard[exporter,otlp]'"
        ) from None
    return otlp


def start_otlp(otlp: ModuleType, args: argparse.Namespace, exporter: Exporter) -> OTLPPusher:
    """Push the exporter's registry over OTLP as well. The log names the endpoint without its
    credentials, and the headers by key only: their values are often tokens."""
    headers = dict(args.otlp_header) if args.otlp_header else None
    settings = otlp.OTLPSettings(args.otlp_endpoint, args.otlp_interval, headers)
    pusher: OTLPPusher = otlp.start_pusher(exporter.registry, exporter.config.identity, settings)
    url = urllib.parse.urlsplit(args.otlp_endpoint)
    shown = url._replace(
        netloc=(url.hostname or "") + (f":{url.port}" if url.port else ""), query=""
    ).geturl()
    keys = ", ".join(sorted(headers)) if headers else "none"
    log.info(
        "pushing metrics over OTLP to %s every %gs (--otlp-header keys: %s)", shown, args.otlp_interval, keys
    )
    return pusher


def wait_for_trainers(
    exporter: Exporter, done: threading.Event, grace_s: float, check_s: float = 0.5
) -> bool:
    """--exit-after-bye: return once every trainer that said hello has said bye, after one last
    render and `grace_s` in which Prometheus can scrape the final values (True), or when `done` is
    set first (False). A sidecar run as a regular container must end by itself, or the Job's pod
    never completes; a trainer that says hello during the grace keeps it running."""
    while not done.wait(check_s):
        if not exporter.training.trainers_done():
            continue
        log.info("every training process said bye; exiting in %gs (--exit-after-bye)", grace_s)
        try:
            exporter.render()  # the final values, fresh for the scrapes of the grace
        except Exception:
            log.exception("rendering the exposition failed")
        if done.wait(grace_s):
            return False
        if exporter.training.trainers_done():
            return True
        log.info("a training process said hello during the grace; staying up")
    return False
