"""The exporter's flags; standard library only, so `trainguard --help` works without the extra."""

from __future__ import annotations

import argparse
import os
import urllib.parse
from typing import Any

from trainguard.exporter.checkpoints import RESUME_FROM_ENV, resume_pointer


def _resume_pointer(text: str) -> dict[str, Any] | None:
    try:
        return resume_pointer(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{exc} (--resume-from or {RESUME_FROM_ENV}: {text[:200]!r})"
        ) from None


def otlp_header(text: str) -> tuple[str, str]:
    """--otlp-header KEY=VALUE. The message never repeats the text: a header is often a token."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(
            "--otlp-header wants KEY=VALUE (the value is not shown: it may be a token)"
        )
    return key.strip(), value


def otlp_endpoint(text: str) -> str:
    url = urllib.parse.urlsplit(text)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise argparse.ArgumentTypeError(
            "--otlp-endpoint wants the full http:// or https:// URL of an OTLP/HTTP metrics endpoint, e.g. "
            "http://victoria-metrics:8428/opentelemetry/v1/metrics"
        )
    return text


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0 seconds: {text!r}")
    return value


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
        "--sdk-socket", default=env("TRAINGUARD_SDK_SOCKET"), help="serve the SDK on this unix socket"
    )
    p.add_argument(
        "--sdk-tcp",
        action="store_true",
        help="also serve the SDK's /v1/report and unauthenticated GET /v1/control on --listen (local "
        "development only: any pod that reaches the port could post a NaN loss or fake steps)",
    )
    p.add_argument("--namespace", default=env("TRAINGUARD_NAMESPACE", ""))
    p.add_argument("--pod", default=env("TRAINGUARD_POD", ""))
    p.add_argument("--node", default=env("TRAINGUARD_NODE", ""))
    p.add_argument("--training-job", default=env("TRAINGUARD_TRAINING_JOB", ""))
    p.add_argument(
        "--trace-id",
        default=env("TRAINGUARD_TRACE_ID", ""),
        help="the run's trace id (the operator sets it per Job); exported on trainguard_exporter_info",
    )
    p.add_argument(
        "--gpus-per-pod",
        type=int,
        help="divides tokens/s into per-GPU throughput (default: the pod's GPUs); equal to the node's GPU "
        "count, the pod owns every GPU of the node",
    )
    p.add_argument(
        "--gpu-ids",
        default=env("TRAINGUARD_GPU_IDS"),
        help="this pod's GPUs, comma-separated UUIDs or NVML indices (default: the training container's "
        "NVIDIA_VISIBLE_DEVICES, reported by the SDK)",
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
    p.add_argument(
        "--fastpath-token-file",
        default=env("TRAINGUARD_FASTPATH_TOKEN_FILE"),
        help="the monitor's token the operator's control calls must carry",
    )
    p.add_argument(
        "--fastpath-identity-file",
        default=env("TRAINGUARD_FASTPATH_IDENTITY_FILE"),
        help="the pod's projected ServiceAccount token (audience trainguard.io/events) fast-path events "
        "are posted with; read again for every post, as the kubelet rotates it",
    )
    p.add_argument("--fastpath-ca-file", default=env("TRAINGUARD_FASTPATH_CA_FILE"))
    p.add_argument(
        "--exit-after-bye",
        action="store_true",
        help="exit (status 0) once every training process that said hello has said bye: for a sidecar "
        "run as a regular container (Kubernetes < 1.29), which would otherwise keep a finished Job's pod "
        "running",
    )
    p.add_argument(
        "--exit-grace-seconds",
        type=float,
        default=10.0,
        help="with --exit-after-bye: how long the last values stay scrapeable before the exporter exits",
    )
    p.add_argument(
        "--resume-from",
        type=_resume_pointer,
        default=env(RESUME_FROM_ENV, ""),
        metavar="JSON",
        help="the checkpoint this pod resumes from, as the operator wrote it on the workload after a gang "
        "restart (trainguard.io/resume-from: {step, path, kind?, ts?}): the SDK's resume_from() answers "
        "it, pinned, until a trainer saves past it; an invalid pointer stops the exporter",
    )
    otlp = p.add_argument_group(
        "OTLP export (optional, needs the otlp extra: pip install 'trainguard[exporter,otlp]')"
    )
    otlp.add_argument(
        "--otlp-endpoint",
        type=otlp_endpoint,
        default=env("TRAINGUARD_OTLP_ENDPOINT"),
        metavar="URL",
        help="also push every metric over OTLP/HTTP (protobuf) to this full metrics URL, e.g. "
        "http://victoria-metrics:8428/opentelemetry/v1/metrics; /metrics keeps serving (default: off)",
    )
    otlp.add_argument(
        "--otlp-interval",
        type=positive_seconds,
        default=15.0,
        metavar="SECONDS",
        help="seconds between pushes",
    )
    otlp.add_argument(
        "--otlp-header",
        type=otlp_header,
        action="append",
        metavar="KEY=VALUE",
        help="a header on every push (repeatable; values are never logged). A token is better given as "
        "OTEL_EXPORTER_OTLP_HEADERS from a Secret, which the SDK adds to these (a flag wins on the same "
        "key): the command line shows in the pod spec",
    )
    p.add_argument("--enable-fault-injection", action="store_true",
                   help="serve POST/DELETE /v1/faults (never in production)")  # fmt: skip
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
