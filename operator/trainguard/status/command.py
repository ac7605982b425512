"""`trainguard status`: the verb, plain for pipes, live (rich, redrawn with --watch) on a terminal, and
data with -o json|yaml."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from trainguard.args import api_client, fail, kube_flags, need
from trainguard.output import output_flag

if TYPE_CHECKING:
    from rich.console import RenderableType

    from trainguard.status.model import JobStatus


Read = Callable[[], "tuple[float, list[JobStatus], list[str]]"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    st = sub.add_parser(
        "status", help="each monitored job's health, alerts, throughput, checkpoint and time lost"
    )
    st.add_argument("-n", "--namespace", help="only this namespace's monitors (default: all)")
    st.add_argument("--monitor", metavar="NAME", help="only this monitor (in -n, default 'default')")
    st.add_argument("--watch", action="store_true", help="redraw every --interval seconds until Ctrl-C")
    st.add_argument("--interval", type=float, default=5.0, metavar="SECONDS", help="with --watch (default 5)")
    output_flag(st, ("table",), "table", "table: live on a terminal, plain on a pipe")
    st.add_argument("--plain", action="store_true", help="the plain table even on a terminal")
    st.add_argument(
        "--prometheus", metavar="URL", help="Prometheus's base URL (default: $TRAINGUARD_PROMETHEUS_URL)"
    )
    st.add_argument(
        "--alertmanager",
        metavar="URL",
        help="read the active alerts from Alertmanager instead of ALERTS (default: $TRAINGUARD_ALERTMANAGER)",
    )
    kube_flags(st)
    st.set_defaults(func=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    """Each monitored job: health, alerts by severity, throughput against baseline, checkpoint, last
    remediation, training time lost. Plain for pipes, live on a terminal, data with -o json|yaml."""
    need("operator", "kubernetes", "prometheus_api_client", "rich")
    import os
    import time

    from trainguard.clients.prometheus import prometheus_client
    from trainguard.kube import Kube
    from trainguard.output import dump
    from trainguard.status.fetch import Sources, fetch
    from trainguard.status.render import render_plain, status_data

    url = args.prometheus or os.environ.get("TRAINGUARD_PROMETHEUS_URL")
    kube = Kube(api_client(args))
    am_url = args.alertmanager or os.environ.get("TRAINGUARD_ALERTMANAGER")
    sources = Sources(kube, prometheus_client(url) if url else None, am_url)

    def read() -> tuple[float, list[JobStatus], list[str]]:
        now = time.time()
        try:
            statuses = fetch(sources, args.namespace, args.monitor, now)
        except Exception as exc:
            if not args.watch:
                fail(f"could not read the monitors: {exc}")
            statuses, sources.errors[:] = [], [f"Kubernetes: {exc}"]
        return now, statuses, [*sources.errors, *status_notes(url, am_url)]

    if args.output == "table" and not args.plain and sys.stdout.isatty():
        return live(args, read)
    while True:
        now, statuses, notes = read()
        if args.output == "table":
            sys.stdout.write(render_plain(statuses) + "".join(f"trainguard: {n}\n" for n in notes))
        else:  # data on standard output, what it lacks on standard error; --watch: a document a time
            head = "---\n" if args.watch and args.output == "yaml" else ""
            sys.stdout.write(head + dump(status_data(statuses, now), args.output))
            sys.stderr.write("".join(f"trainguard: {n}\n" for n in notes))
        sys.stdout.flush()
        if not args.watch:
            return 0
        time.sleep(args.interval)


def live(args: argparse.Namespace, read: Read) -> int:
    """The terminal's screen, drawn by rich: once, or redrawn in place every --interval with --watch."""
    import os
    import time

    from rich.live import Live

    from trainguard.status.render import make_console, render_live

    console = make_console(sys.stdout, os.environ)

    def screen() -> RenderableType:
        now, statuses, notes = read()
        now_text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        return render_live(
            statuses, now_text=now_text, every_s=args.interval if args.watch else None, notes=notes
        )

    if not args.watch:
        console.print(screen())
        return 0
    console.clear()  # the screen is the status's, as `watch` has it; the last one stays after Ctrl-C
    with Live(console=console, auto_refresh=False, vertical_overflow="ellipsis") as shown:
        while True:
            shown.update(screen(), refresh=True)
            time.sleep(args.interval)


def status_notes(prometheus: str | None, alertmanager: str | None) -> list[str]:
    """What `trainguard status` could not show, so a blank column is not read as "nothing wrong"."""
    if alertmanager:
        return [] if prometheus else ["no --prometheus: throughput, checkpoint and time lost not shown"]
    if not prometheus:
        return ["no --prometheus or --alertmanager: alerts and series not shown"]
    return ["alerts from Prometheus' ALERTS: the faults the operator detects and the sidecars' fast-path "
            "pages are in Alertmanager only; give --alertmanager to see them"]  # fmt: skip
