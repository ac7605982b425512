"""`trainguard`: the top-level parser and dispatch. Each room adds its own verbs and flags (its
`command.py`); heavy imports happen inside each command, so `trainguard --help` is instant and a
missing extra is reported as such, not as a traceback."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from trainguard.args import EXIT_USAGE, need


def cmd_exporter(args: argparse.Namespace) -> int:
    need("exporter", "prometheus_client")
    from trainguard.exporter.main import run

    return run(args)


def cmd_review(args: argparse.Namespace) -> int:
    need("operator", "prometheus_api_client", "pydantic", "yaml", "promql_parser")
    from trainguard.review.command import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    from trainguard import __version__
    from trainguard.controller import command as operator_command
    from trainguard.diagnosis import command as report_command
    from trainguard.drill import command as drill_command
    from trainguard.exporter import flags as exporter_flags
    from trainguard.launch import command as launch_command
    from trainguard.remediation import command as remediation_command
    from trainguard.render import command as render_command
    from trainguard.review import flags as review_flags
    from trainguard.status import command as status_command

    parser = argparse.ArgumentParser(
        prog="trainguard",
        description="Monitoring, alerting and automatic P0 response for large-model training on Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"trainguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    render_command.add_parsers(sub)
    operator_command.add_parser(sub)

    exp = sub.add_parser(
        "exporter", help="run the exporter sidecar: GPU, host and training metrics on /metrics"
    )
    exporter_flags.add_arguments(exp)
    exp.set_defaults(func=cmd_exporter)

    drill = sub.add_parser(
        "drill", help="play a fault scenario on a live installation: time to alert, notice, action, resume"
    )
    drill_command.add_arguments(drill)
    drill.set_defaults(func=drill_command.run)

    rev = sub.add_parser(
        "review", help="the two-weekly rule review: never fired, co-firing, flapping, alerts by receiver"
    )
    review_flags.add_arguments(rev)
    rev.set_defaults(func=cmd_review)

    launch_command.add_parser(sub)
    remediation_command.add_parsers(sub)
    report_command.add_parser(sub)
    status_command.add_parser(sub)
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
