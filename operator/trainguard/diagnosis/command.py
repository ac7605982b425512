"""`trainguard report`: a diagnostic report (HTML, Markdown) of a job around an alert or a time."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainguard.args import EXIT_USAGE, api_client, fail, kube_flags, monitor_ref, need, when
from trainguard.output import Deprecated, dump, out_dir_flag, output_flag

FILES = {"html": "trainguard-report.html", "markdown": "trainguard-report.md"}


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    rep = sub.add_parser("report", help="a diagnostic report (HTML, Markdown) of a job around an alert")
    rep.add_argument("--monitor", required=True, metavar="NS/NAME", help="the TrainingJobMonitor")
    rep.add_argument("--alert", help="the alert to report on (default: the job's most severe firing at --at)")
    rep.add_argument("--at", metavar="TIME", help="unix seconds or RFC 3339 (default: now)")
    output_flag(rep, ("html", "markdown"), None, "none: the files in --out-dir")
    out_dir_flag(rep, None, f"{FILES['html']} and {FILES['markdown']}", "the current directory, without -o")
    rep.add_argument(
        "--markdown", action=Deprecated, metavar="FILE.md", instead="use --out-dir DIR or -o markdown",
        help="deprecated: also write the Markdown version here",
    )  # fmt: skip
    rep.add_argument(
        "--prometheus", metavar="URL", help="Prometheus's base URL (default: $TRAINGUARD_PROMETHEUS_URL)"
    )
    kube_flags(rep)
    rep.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    """A diagnostic report of one monitor's job around an alert (or a time): causes, plots and logs."""
    need("operator", "kubernetes", "prometheus_api_client")
    import os
    import time

    from trainguard.clients.prometheus import prometheus_client
    from trainguard.diagnosis.fetch import build_report
    from trainguard.kube import Kube
    from trainguard.kube.reads import ApiReads

    namespace, name = monitor_ref(args.monitor)
    url = args.prometheus or os.environ.get("TRAINGUARD_PROMETHEUS_URL")
    if not url:
        fail("give Prometheus's URL with --prometheus URL (or $TRAINGUARD_PROMETHEUS_URL)", EXIT_USAGE)
    at = when(args.at)
    kube = Kube(api_client(args))
    try:
        report = build_report(
            kube,
            ApiReads(kube),
            prometheus_client(url),
            namespace,
            name,
            alert=args.alert,
            at=at,
            now=time.time(),
        )
    except LookupError as exc:
        fail(str(exc))
    except Exception as exc:
        fail(f"could not build the report: {exc}")
    forms = {"html": report.html, "markdown": report.markdown}
    if args.output:
        sys.stdout.write(forms[args.output] if args.output in forms else dump(report.data, args.output))
    out_dir = args.out_dir or (None if args.output else ".")
    files = [(Path(out_dir) / FILES[k], text) for k, text in forms.items()] if out_dir else []
    if args.markdown:
        files.append((Path(args.markdown), report.markdown))
    for path, text in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(path, file=sys.stderr if args.output else sys.stdout)
    return 0
