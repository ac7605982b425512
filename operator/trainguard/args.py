"""What every verb's command line shares: failing with a message and an exit code, naming the extra to
install when a dependency is missing, and the argument forms several verbs take (NS/NAME, durations,
times, who ran it). Standard library only, so `trainguard --help` stays instant."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

EXIT_INVALID = 1
EXIT_USAGE = 2


def fail(message: str, code: int = EXIT_INVALID) -> NoReturn:
    print(f"trainguard: {message}", file=sys.stderr)
    raise SystemExit(code)


def need(extra: str, *modules: str) -> None:
    """Fail with the pip command to run when a command's extra is not installed."""
    for module in modules or ("pydantic", "yaml", "promql_parser"):
        try:
            importlib.import_module(module)
        except ImportError:
            fail(
                f"this command needs the '{extra}' extra ({module} is missing): pip install 'trainguard[{extra}]'"
            )


def monitor_ref(text: str) -> tuple[str, str]:
    """--monitor NAMESPACE/NAME."""
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        fail(f"--monitor takes NAMESPACE/NAME, got {text!r}", EXIT_USAGE)
    return namespace, name


def who(by: str | None) -> str:
    """Who ran the command, for the record: --by, else $USER@hostname."""
    if by:
        return by
    import getpass
    import os
    import socket

    return f"{os.environ.get('USER') or getpass.getuser()}@{socket.gethostname()}"


def when(text: str | None) -> float:
    """--at: unix seconds or an RFC 3339 time; now when absent."""
    import time

    from trainguard.api.common import instant

    if not text:
        return time.time()
    try:
        return instant(text)
    except ValueError as exc:
        fail(f"--at {exc}", EXIT_USAGE)


def duration(text: str) -> float:
    """Seconds in a duration flag, refused at parse time (exit 2, naming the flag) rather than at start-up."""
    from trainguard.api.common import duration_seconds

    try:
        seconds = duration_seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be longer than zero")
    return seconds


def shared_rule_parts(text: str) -> int:
    """--shared-rule-groups: a whole number of groups, 1 to SHARED_GROUPS_MAX."""
    from trainguard.catalog.rule_forms import SHARED_GROUPS_MAX

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number (1 to {SHARED_GROUPS_MAX})"
        ) from None
    if not 1 <= value <= SHARED_GROUPS_MAX:
        raise argparse.ArgumentTypeError(f"{value} is out of range: give 1 to {SHARED_GROUPS_MAX}")
    return value


def refuse_shared_options_without_shared_form(args: argparse.Namespace) -> None:
    """--shared-rule-groups and --shared-annotation-lookups shape the shared group, so with any other
    --rule-form they are a usage error (a per-monitor group always looks its annotations up)."""
    from trainguard.catalog.rule_forms import SHARED

    if args.rule_form == SHARED:
        return
    if args.shared_rule_groups != 1:
        fail("--shared-rule-groups splits the shared group: give --rule-form shared too", EXIT_USAGE)
    if args.shared_annotation_lookups:
        fail(
            "--shared-annotation-lookups is of the shared group (a per-monitor group always looks its "
            "annotations up): give --rule-form shared too, or leave it out",
            EXIT_USAGE,
        )


LOOKUPS_HELP = (
    "with --rule-form shared: its alerts' annotations also look up the run's trace id, the job's pods "
    "and nodes and the +-30 s log window around the activation, as the per-monitor groups' do; "
    "Prometheus runs those queries for every active alert at every evaluation, 6 to 21 ms an alert, so "
    "in a storm of 1,000 alerts they cost more than the rules (default: off; `trainguard report` looks "
    "them up on demand; docs/rendering.md)"
)
"""The help of --shared-annotation-lookups."""


def shared_form_flags(parser: argparse.ArgumentParser, group: str) -> None:
    """--shared-rule-groups and --shared-annotation-lookups, alike on `render` and `operator`; `group`
    names the shared group as the verb writes it."""
    parser.add_argument(
        "--shared-rule-groups",
        type=shared_rule_parts,
        default=1,
        metavar="N",
        help=f"with --rule-form shared: {group}'s rules in at most N groups (1 to 16, default 1), which "
        "Prometheus evaluates in parallel, for a Prometheus 2 whose one group nears its interval (docs/rendering.md)",
    )
    parser.add_argument("--shared-annotation-lookups", action="store_true", help=LOOKUPS_HELP)


def kube_flags(parser: argparse.ArgumentParser) -> None:
    """`--kubeconfig` and `--context`, as kubectl has them, on every verb that talks to a cluster."""
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig (default: in-cluster, then KUBECONFIG / ~/.kube/config)",
    )
    parser.add_argument(
        "--context",
        metavar="NAME",
        help="the kubeconfig context to use (default: its current-context)",
    )


def api_client(args: argparse.Namespace, component: str = "cli"):  # type: ignore[no-untyped-def]
    """The Kubernetes client of a command (its --kubeconfig and --context), or a failure naming why
    there are no credentials."""
    from trainguard.kube import ConfigError
    from trainguard.kube import api_client as make

    try:
        return make(args.kubeconfig, context=args.context, component=component)
    except (ConfigError, OSError) as exc:
        fail(f"no Kubernetes credentials: {exc}")
