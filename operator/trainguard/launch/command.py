"""`trainguard launch [options] -- <command...>`: the verb and its flags. Standard library only, like
the rest of the room, so that it runs in a training image with the bare `pip install trainguard`."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys

EXIT_USAGE = 2

DEFAULT_TERM_GRACE = "2s"
DEFAULT_WORD_TIMEOUT = "30s"
DEFAULT_POLL = "100ms"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")


def seconds(text: str) -> float:
    """A flag's duration: `2s`, `500ms`, `1m`, or plain seconds (`2.5`)."""
    match = _DURATION.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration; use seconds, or a number with ms, s or m"
        )
    value, unit = float(match.group(1)), match.group(2) or "s"
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0}[unit]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "launch",
        help="run the trainer under trainguard: restart it in place, in seconds, on the operator's word",
        description=(
            "Run COMMAND as the trainer, in its own process group, and restart it in place when the "
            "operator says so through the pod's trainguard sidecar (after a NaN loss, an OOM, a stall), "
            "from the checkpoint every rank has: TRAINGUARD_GENERATION and TRAINGUARD_RESUME_FROM are set for "
            "it. SIGTERM and SIGINT are forwarded. A trainer that fails with no word within --word-timeout "
            "ends the launcher with its status, so the owner's restart policy applies."
        ),
    )
    p.add_argument(
        "--endpoint",
        metavar="URL",
        help="the sidecar: unix:///PATH or http://HOST:PORT (default: $TRAINGUARD_ENDPOINT, else the injected "
        "sidecar's socket unix:///var/run/trainguard/sdk.sock)",
    )
    p.add_argument("--term-grace", type=seconds, default=seconds(DEFAULT_TERM_GRACE), metavar="DURATION",
                   help=f"SIGKILL a trainer this long after its SIGTERM (default {DEFAULT_TERM_GRACE})")  # fmt: skip
    p.add_argument("--word-timeout", type=seconds, default=seconds(DEFAULT_WORD_TIMEOUT), metavar="DURATION",
                   help="how long a trainer that failed by itself waits for the operator's word before the "
                   f"launcher exits with its status (default {DEFAULT_WORD_TIMEOUT})")  # fmt: skip
    p.add_argument("--poll-interval", type=seconds, default=seconds(DEFAULT_POLL), metavar="DURATION",
                   help=f"how often the sidecar's control is read for a word (default {DEFAULT_POLL})")  # fmt: skip
    p.add_argument("--preload", metavar="MODULES", default="",
                   help="comma-separated modules (such as torch) a warm trainer imports ahead of each in-place "
                   "restart, for a command `python SCRIPT ...` or `python -m MODULE ...`: the restart skips the "
                   "interpreter's start and those imports, for the memory of one parked interpreter")  # fmt: skip
    p.add_argument("command", nargs=argparse.REMAINDER, help="the trainer's command, after --")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trainguard.launch.decide import Settings
    from trainguard.launch.supervisor import Options, Supervisor
    from trainguard.sdk.reporter import DEFAULT_ENDPOINT

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        return _usage(
            "launch needs the trainer's command after --, such as: trainguard launch -- python train.py"
        )
    if args.poll_interval <= 0:
        return _usage("--poll-interval must be above 0")
    logging.basicConfig(level=logging.INFO, format="trainguard launch: %(message)s")
    endpoint = args.endpoint or os.environ.get("TRAINGUARD_ENDPOINT") or DEFAULT_ENDPOINT
    settings = Settings(term_grace_s=args.term_grace, word_timeout_s=args.word_timeout)
    try:
        preload = tuple(m.strip() for m in args.preload.split(",") if m.strip())
        supervisor = Supervisor(Options(command, endpoint, settings, args.poll_interval, preload))
    except ValueError as exc:  # the endpoint's form
        return _usage(str(exc))
    return supervisor.run()


def _usage(message: str) -> int:
    print(f"trainguard: {message}", file=sys.stderr)
    return EXIT_USAGE
