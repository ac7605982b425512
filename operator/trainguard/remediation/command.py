"""`trainguard ack` (an Alertmanager silence, which also stops escalation) and `trainguard uncordon`
(return a node trainguard cordoned to service, a lemon only when forced) and `trainguard nodes` (the
nodes' fault histories and the lemons to repair)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trainguard.args import EXIT_USAGE, api_client, fail, kube_flags, monitor_ref, need, who
from trainguard.output import dump, output_flag
from trainguard.remediation.lemon import NodeFaults, fleet, when


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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
    kube_flags(unc)
    unc.add_argument("--by", metavar="WHO", help="who returns it (default: $USER@hostname)")
    unc.add_argument("--reason", metavar="TEXT", help="why, such as the repair done")
    unc.add_argument(
        "--force",
        action="store_true",
        help="return it even when it is a lemon (trainguard.io/lemon=true: its faults reached the platform's "
        "threshold); it stays labelled and out of the spare pool until its faults age out",
    )
    unc.set_defaults(func=cmd_uncordon)

    nodes = sub.add_parser("nodes", help="the nodes with a fault history, lemons first: the nodes to repair")
    kube_flags(nodes)
    nodes.add_argument(
        "--lemons", action="store_true", help="only the lemons (trainguard.io/lemon=true): the repair list"
    )
    output_flag(nodes, ("table",), "table")
    nodes.set_defaults(func=cmd_nodes)


def cmd_ack(args: argparse.Namespace) -> int:
    """Acknowledge an alert: an Alertmanager silence, so it stops notifying and is not escalated."""
    need("render", "pydantic")
    import os
    import time

    from trainguard.api.common import duration_seconds
    from trainguard.clients import alertmanager
    from trainguard.remediation.escalation import ack_comment, ack_matchers, format_time

    namespace, name = monitor_ref(args.monitor)
    base = args.alertmanager or os.environ.get("TRAINGUARD_ALERTMANAGER")
    if not base:
        fail("give the Alertmanager's URL with --alertmanager URL (or $TRAINGUARD_ALERTMANAGER)", EXIT_USAGE)
    try:
        for_s = duration_seconds(args.for_)
    except ValueError as exc:
        fail(f"--for: {exc}", EXIT_USAGE)
    if for_s <= 0:
        fail("--for must be longer than 0s", EXIT_USAGE)
    by, now = who(args.by), time.time()
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
            fail(f"could not reach Alertmanager at {exc.url}: {exc.detail}")
        fail(f"Alertmanager refused the silence: HTTP {exc.status} {exc.detail}")
    print(
        f"acknowledged {args.alert} of {namespace}/{name} until {format_time(now + for_s)} by {by}",
        file=sys.stderr,
    )
    print(silence_id)
    return 0


def cmd_uncordon(args: argparse.Namespace) -> int:
    """Return a node trainguard cordoned to service; a node a person cordoned is refused, and a lemon
    unless --force."""
    need("operator", "kubernetes")
    from trainguard.kube import ApiError, Kube
    from trainguard.remediation.uncordon import Refused, uncordon

    kube = Kube(api_client(args), timeout=10.0)
    try:
        result = uncordon(kube, args.node, who(args.by), reason=args.reason or "", force=args.force)
    except Refused as exc:
        fail(f"refused: {exc}")
    except ApiError as exc:
        fail(f"the apiserver answered HTTP {exc.status} {exc.reason}: {str(exc.body or '')[:300]}")
    except OSError as exc:
        fail(f"could not reach the apiserver: {exc}")
    print(result.message)
    if result.event_error:
        print(f"trainguard: warning: the Event was not recorded ({result.event_error})", file=sys.stderr)
    return 0


def nodes_table(rows: list[NodeFaults]) -> str:
    """The human form: one line per node, lemons first, then its faults, newest first."""
    if not rows:
        return "no node has a fault history\n"
    lines = []
    for row in sorted(rows, key=lambda r: (not r.lemon, r.node)):
        state = "cordoned" if row.cordoned else "schedulable"
        head = f"{row.node}  {'LEMON' if row.lemon else 'ok'}  {state}  {len(row.faults)} fault(s) recorded"
        lines.append(head + (f": {row.reason}" if row.reason else ""))
        lines.extend(f"  {when(f.ts)}  {f.cause or 'a fault'}  (record {f.record or '?'})"
                     for f in sorted(row.faults, key=lambda f: -f.ts))  # fmt: skip
    return "\n".join(lines) + "\n"


def nodes_data(rows: list[NodeFaults]) -> dict[str, Any]:
    return {
        "nodes": [
            {
                "node": r.node,
                "lemon": r.lemon,
                "reason": r.reason or None,
                "cordoned": r.cordoned,
                "faults": [{**f.as_json(), "time": when(f.ts)} for f in r.faults],
            }
            for r in sorted(rows, key=lambda r: (not r.lemon, r.node))
        ]
    }


def cmd_nodes(args: argparse.Namespace) -> int:
    """List the nodes with a fault history as their annotations say, and the leader's lemon verdict."""
    need("operator", "kubernetes")
    from trainguard.kube import ApiError, Kube

    kube = Kube(api_client(args), timeout=10.0)
    try:
        listed = kube.list_nodes()
    except ApiError as exc:
        fail(f"the apiserver answered HTTP {exc.status} {exc.reason}: {str(exc.body or '')[:300]}")
    except OSError as exc:
        fail(f"could not reach the apiserver: {exc}")
    rows = [r for r in fleet(listed) if r.lemon or not args.lemons]
    if args.output == "table":
        sys.stdout.write(nodes_table(rows) if rows or not args.lemons else "no lemon: no node to repair\n")
    else:
        sys.stdout.write(dump(nodes_data(rows), args.output))
    return 0
