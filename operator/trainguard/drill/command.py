"""`trainguard drill`: run a fault scenario against a live installation and report how fast it was seen,
notified and acted on. The parser is built with the standard library only (`trainguard --help` stays
instant); the Kubernetes client is imported when the command runs."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import uuid
from types import FrameType

from trainguard.args import kube_flags
from trainguard.catalog.severity import GRADE, STYLES
from trainguard.drill import SCENARIO_NAMES
from trainguard.output import Deprecated, output_flag

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--monitor", required=True, metavar="NS/NAME", help="the TrainingJobMonitor whose job to drill"
    )
    p.add_argument("--scenario", required=True, choices=SCENARIO_NAMES, help="the fault to play")
    p.add_argument("--dry-run", action="store_true", help="print the plan and touch nothing")
    p.add_argument(
        "--allow-actions", action="store_true",
        help="let remediation act for real (it may cordon nodes and restart the job); by default the drill "
        "sets spec.remediation.dryRun for its duration and restores it",
    )  # fmt: skip
    p.add_argument(
        "--target",
        default="30s",
        metavar="DURATION",
        help="alert, notification and action within this (default 30s)",
    )
    p.add_argument(
        "--resume-target", default="5m", metavar="DURATION", help="training resumed within this (default 5m)"
    )
    p.add_argument(
        "--timeout", default="3m", metavar="DURATION", help="how long to wait for the stages (default 3m)"
    )
    p.add_argument(
        "--settle", default="90s", metavar="DURATION",
        help="after cleanup, how long to wait for the drill's alerts to resolve before dry run is restored "
        "(those still active get a 10m guard silence; default 90s)",
    )  # fmt: skip
    p.add_argument(
        "--alertmanager", metavar="URL", help="Alertmanager's base URL (default: $TRAINGUARD_ALERTMANAGER)"
    )
    p.add_argument(
        "--severity-style", choices=STYLES, default=GRADE,
        help="the severity label of the synthetic alerts: the operator's --severity-style (default grade; "
        "docs/severity.md)",
    )  # fmt: skip
    p.add_argument(
        "--sidecar-access", choices=["auto", "proxy", "direct"], default="auto",
        help="reach sidecars through the apiserver's pod proxy or at the pod IP (in-cluster); auto (default): "
        "the proxy, else the pod IP",
    )  # fmt: skip
    output_flag(p, ("table",), "table")
    p.add_argument(
        "--json", action=Deprecated, nargs=0, dest="output", const="json", instead="use -o json",
        help="deprecated: -o json",
    )  # fmt: skip
    kube_flags(p)
    p.add_argument("--poll", type=float, default=0.5, help=argparse.SUPPRESS)


def _seconds(flag: str, text: str) -> float:
    from trainguard.api import duration_seconds

    try:
        return float(text)
    except ValueError:
        pass
    try:
        return duration_seconds(text)
    except ValueError as exc:
        raise SystemExit(_usage(f"{flag}: {exc}")) from None


def _usage(message: str) -> int:
    print(f"trainguard drill: {message}", file=sys.stderr)
    return EXIT_USAGE


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    namespace, _, name = str(args.monitor).partition("/")
    if not namespace or not name or "/" in name:
        return _usage(f"--monitor takes NAMESPACE/NAME, got {args.monitor!r}")
    base = args.alertmanager or os.environ.get("TRAINGUARD_ALERTMANAGER")
    if not base and not args.dry_run:
        return _usage("give Alertmanager's URL with --alertmanager URL (or $TRAINGUARD_ALERTMANAGER)")

    try:
        from trainguard.kube import ApiError, ConfigError, Kube, api_client
    except ImportError:
        return _usage("this command needs the 'operator' extra: pip install 'trainguard[operator]'")
    from trainguard.clients.alertmanager import AlertmanagerError
    from trainguard.drill.clients import AlertmanagerHTTP, KubeCluster, SidecarHTTP
    from trainguard.drill.results import render, render_plan
    from trainguard.drill.run import Drill, Options, make_plan
    from trainguard.drill.scenarios import DrillError, scenario

    o = Options(
        scenario(args.scenario), namespace, name, target_s=_seconds("--target", args.target),
        resume_target_s=_seconds("--resume-target", args.resume_target),
        timeout_s=_seconds("--timeout", args.timeout), settle_s=_seconds("--settle", args.settle),
        allow_actions=args.allow_actions, poll_s=args.poll, drill_id=f"{args.scenario}-{uuid.uuid4().hex[:8]}",
    )  # fmt: skip
    try:
        kube = Kube(api_client(args.kubeconfig, context=args.context), timeout=10.0)
    except (ConfigError, OSError) as exc:
        print(f"trainguard drill: no Kubernetes credentials: {exc}", file=sys.stderr)
        return EXIT_FAIL
    cluster = KubeCluster(kube, namespace, name)
    sidecars = SidecarHTTP(kube, namespace, args.sidecar_access)
    try:
        plan = make_plan(o, cluster, sidecars)
    except (DrillError, ValueError) as exc:
        print(f"trainguard drill: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except ApiError as exc:
        print(f"trainguard drill: the apiserver answered HTTP {exc.status} {exc.reason}", file=sys.stderr)
        return EXIT_FAIL
    if args.dry_run:
        sys.stdout.write(render_plan(args.scenario, f"{namespace}/{name}", plan.lines(o), args.output))
        return EXIT_PASS
    for line in plan.lines(o):
        print(f"drill plan: {line}", file=sys.stderr)
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _interrupt)  # a killed drill cleans up as on Ctrl-C
    try:
        drill = Drill(
            o,
            cluster,
            sidecars,
            AlertmanagerHTTP(str(base), args.severity_style),
            log=lambda m: print(m, file=sys.stderr, flush=True),
        )
        outcome = drill.run(plan)
    except (AlertmanagerError, ApiError, OSError) as exc:  # before anything changed
        print(f"trainguard drill: could not read the installation's state: {exc}", file=sys.stderr)
        return EXIT_FAIL
    finally:
        signal.signal(signal.SIGTERM, previous)
    sys.stdout.write(render(outcome, args.output))
    if outcome.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_PASS if outcome.passed else EXIT_FAIL
