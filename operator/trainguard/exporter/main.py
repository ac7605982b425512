"""`trainguard exporter`: build the exporter from flags and serve until stopped."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading

from prometheus_client import CollectorRegistry

from trainguard.exporter.app import Exporter, ExporterConfig, GPUBackend
from trainguard.exporter.fastpath import FastPathSender
from trainguard.exporter.faults import Faults
from trainguard.exporter.host import HostReader
from trainguard.exporter.server import serve
from trainguard.exporter.simulated import SimulatedBackend
from trainguard.exporter.training import TrainingState

log = logging.getLogger("trainguard.exporter")


def add_arguments(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    p.add_argument(
        "--backend",
        choices=["nvml", "simulated", "none"],
        default="nvml",
        help="nvml: read the GPUs; simulated: seeded fake GPUs; none: no GPU metrics (dcgm-exporter has them)",
    )
    p.add_argument("--gpus", type=int, default=8, help="simulated GPUs (simulated backend)")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated noise")
    p.add_argument("--listen", default="0.0.0.0:9400", metavar="HOST:PORT")
    p.add_argument(
        "--sdk-socket", default=env("TRAINGUARD_SDK_SOCKET"), help="also serve the SDK on this unix socket"
    )
    p.add_argument("--namespace", default=env("TRAINGUARD_NAMESPACE", ""))
    p.add_argument("--pod", default=env("TRAINGUARD_POD", ""))
    p.add_argument("--node", default=env("TRAINGUARD_NODE", ""))
    p.add_argument("--training-job", default=env("TRAINGUARD_TRAINING_JOB", ""))
    p.add_argument(
        "--gpus-per-pod", type=int, help="divides tokens/s into per-GPU throughput (default: --gpus)"
    )
    p.add_argument(
        "--poll-interval", type=float, default=1.0, help="seconds between hardware polls (fast-path latency)"
    )
    p.add_argument(
        "--render-interval", type=float, default=1.0, help="seconds between expositions (training freshness)"
    )
    p.add_argument("--host-root", default="/", help="where /proc and /sys are (a host mount in a container)")
    p.add_argument("--no-host", action="store_true", help="do not collect host metrics")
    p.add_argument(
        "--stall-after",
        type=float,
        default=300.0,
        help="seconds without a step before a fast-path stall event",
    )
    p.add_argument(
        "--fastpath-url", default=env("TRAINGUARD_FASTPATH_URL"), help="the operator's event receiver"
    )
    p.add_argument("--fastpath-token-file", default=env("TRAINGUARD_FASTPATH_TOKEN_FILE"))
    p.add_argument("--fastpath-ca-file", default=env("TRAINGUARD_FASTPATH_CA_FILE"))
    p.add_argument("--enable-fault-injection", action="store_true",
                   help="serve POST/DELETE /v1/faults (never in production)")  # fmt: skip
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


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
        sender = FastPathSender(args.fastpath_url, args.fastpath_token_file, ca_file=args.fastpath_ca_file)
        sender.start()
    gpus_per_pod = args.gpus_per_pod or (
        args.gpus if args.backend == "simulated" else max(1, len(getattr(backend, "handles", [])) or 1)
    )
    return Exporter(
        config=ExporterConfig(
            identity=identity,
            backend_name=args.backend,
            poll_interval_s=args.poll_interval,
            render_interval_s=args.render_interval,
            stall_after_s=args.stall_after,
        ),
        backend=backend,
        host=None if args.no_host else HostReader(args.host_root),
        training=TrainingState(gpus_per_pod=gpus_per_pod, faults=faults),
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
    exporter = build(args)
    exporter.start()
    servers = serve(exporter, host or "0.0.0.0", int(port), socket_path=args.sdk_socket,
                    fault_injection=args.enable_fault_injection, token_file=args.fastpath_token_file)  # fmt: skip
    if args.enable_fault_injection:
        log.warning(
            "fault injection is ON: POST /v1/faults changes the metrics (never use this in production)"
        )
    log.info("serving /metrics on %s (backend %s)%s", args.listen, args.backend,
             f", SDK on unix://{args.sdk_socket}" if args.sdk_socket else "")  # fmt: skip
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    for s in servers:
        s.shutdown()
    exporter.stop()
    return 0
