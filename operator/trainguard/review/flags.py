"""`trainguard review`'s flags. Imported by the CLI to build its parser, so only argparse here: the
command itself (command.py) imports Prometheus's client and the renderer when it runs."""

from __future__ import annotations

import argparse

from trainguard.output import Deprecated, out_dir_flag, output_flag


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prometheus", metavar="URL", help="Prometheus's base URL (default: $TRAINGUARD_PROMETHEUS_URL)"
    )
    parser.add_argument(
        "--since", default="14d", metavar="DURATION", help="how much ALERTS history to read (default 14d)"
    )
    parser.add_argument(
        "--until", metavar="TIME", help="the end of the history: unix seconds or RFC 3339 (default: now)"
    )
    parser.add_argument(
        "--never-fired",
        default="7d",
        metavar="DURATION",
        help="a rule with no firing in this last stretch is reported as never fired (default 7d)",
    )
    parser.add_argument(
        "--eval-interval",
        metavar="DURATION",
        help="the rules' evaluation interval: samples further apart than 1.5 of them are two episodes, an "
        "episode of one sample is resolved within one evaluation (default: each job's monitor's "
        "spec.exporter.scrapeInterval with -f, the rendered rule group's interval; else 15s, its default)",
    )
    parser.add_argument(
        "--co-firing",
        type=float,
        default=0.5,
        metavar="SHARE",
        help="report pairs whose episodes overlap on the same job more than this share (default 0.5)",
    )
    parser.add_argument(
        "--short",
        type=float,
        default=0.3,
        metavar="SHARE",
        help="report alerts resolved within one evaluation more than this share of the time (default 0.3)",
    )
    parser.add_argument(
        "--min-episodes",
        type=int,
        default=2,
        metavar="N",
        help="judge co-firing and flapping only for alerts with at least N episodes (default 2)",
    )
    parser.add_argument(
        "--top", type=int, default=10, metavar="N", help="alerts listed per receiver (default 10)"
    )
    parser.add_argument(
        "-f",
        "--file",
        action="append",
        default=[],
        metavar="FILE",
        help="TrainingJobMonitors and AlertPolicies (file or directory; repeatable): the rules checked for "
        "never fired are those rendered for them (else the whole catalogue), and receivers come from the "
        "alertmanager.yml rendered for them",
    )
    parser.add_argument(
        "--alertmanager-config",
        metavar="FILE",
        help="an alertmanager.yml to route with instead (such as `trainguard render --format prometheus`'s)",
    )
    parser.add_argument(
        "--catalogue-only",
        action="store_true",
        help="check trainguard's rules only for never fired (the catalogue, or those rendered for -f), "
        "not also those Prometheus has loaded (/api/v1/rules)",
    )
    parser.add_argument(
        "--chunk", default="1d", metavar="DURATION", help="history read per query (default 1d)"
    )
    output_flag(parser, ("markdown",), None, "markdown, unless --out-dir is given")
    out_dir_flag(parser, None, "review.md and review.json")
    parser.add_argument(
        "--markdown", action=Deprecated, metavar="FILE", instead="use -o markdown (> FILE) or --out-dir DIR",
        help="deprecated: write the Markdown here ('-': standard output)",
    )  # fmt: skip
    parser.add_argument(
        "--json", action=Deprecated, metavar="FILE", instead="use -o json (> FILE) or --out-dir DIR",
        help="deprecated: write the JSON here ('-': standard output)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=int, default=60, help=argparse.SUPPRESS)
