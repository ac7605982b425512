"""`trainguard review`'s `run`: the edge that reads Prometheus and the routing files, runs the pure
review (history.py, findings.py, routes.py) and writes Markdown and JSON. Its flags are in flags.py."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trainguard.api import InvalidInput, load_documents
from trainguard.api.common import duration_seconds, instant
from trainguard.api.monitor import Exporter
from trainguard.catalog.alerts import ALERT_NAMES, ALERTS
from trainguard.output import dump
from trainguard.render import render_prometheus
from trainguard.review import fetch, findings, history, report, routes

EXIT_FAILED = 1
EXIT_USAGE = 2


class UsageError(ValueError):
    """A flag's value is wrong: exit 2 with the message."""


def _seconds(flag: str, text: str) -> float:
    try:
        seconds = duration_seconds(text)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    if seconds <= 0:
        raise UsageError(f"{flag} must be longer than 0s, got {text!r}")
    return seconds


def _when(text: str | None) -> float:
    if text is None:
        return time.time()
    try:
        return instant(text)
    except ValueError as exc:
        raise UsageError(f"--until {exc}") from None


def _share(flag: str, value: float) -> float:
    if not 0 <= value < 1:
        raise UsageError(f"{flag} is a share between 0 and 1, got {value}")
    return value


def _read_sources(files: Sequence[str]) -> list[tuple[str, str]]:
    sources = []
    for f in files:
        path = Path(f)
        for p in sorted(path.glob("*.y*ml")) if path.is_dir() else [path]:
            try:
                sources.append((str(p), p.read_text(encoding="utf-8")))
            except OSError as exc:
                raise UsageError(f"cannot read {p}: {exc.strerror}") from None
    return sources


@dataclass(frozen=True)
class Monitors:
    """What the review takes from `-f` and `--alertmanager-config`."""

    config: dict[str, Any] | None
    """The alertmanager.yml to route with; None: no routing."""
    intervals: dict[tuple[str, str], float]
    """(namespace, training_job) -> its rule group's evaluation interval."""
    rules: tuple[str, ...] | None
    """The alerting rules rendered for the monitors; None without -f (then: the whole catalogue)."""


def read_monitors(args: argparse.Namespace) -> Monitors:
    if args.alertmanager_config:
        try:
            config = yaml.safe_load(Path(args.alertmanager_config).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise UsageError(f"cannot read --alertmanager-config {args.alertmanager_config}: {exc}") from None
        if not isinstance(config, dict) or not isinstance(config.get("route"), dict):
            raise UsageError(f"{args.alertmanager_config} has no top-level route: not an alertmanager.yml")
    else:
        config = None
    if not args.file:
        return Monitors(config, {}, None)
    try:
        docs = load_documents(_read_sources(args.file))
    except InvalidInput as exc:
        raise UsageError("; ".join(str(p) for p in exc.problems)) from None
    if not docs.monitors:
        raise UsageError("-f: no TrainingJobMonitor in the input, so no rules or routes to render")
    rendered = render_prometheus(docs)
    intervals = {
        (m.namespace, m.name): duration_seconds(m.spec.exporter.scrape_interval) for m in docs.monitors
    }
    rules = sorted(
        {str(r["alert"]) for g in rendered["rules.yml"]["groups"] for r in g["rules"] if "alert" in r}
    )
    return Monitors(config or rendered["alertmanager.yml"], intervals, tuple(rules))


def _rules(
    args: argparse.Namespace, url: str, rendered: Sequence[str] | None, notes: list[str]
) -> dict[str, tuple[str, ...]]:
    """Each rule to check for never fired, with where it is known from."""
    own = ("rendered", rendered) if rendered is not None else ("catalogue", ALERT_NAMES)
    sources: dict[str, list[str]] = {name: [own[0]] for name in own[1]}
    if not args.catalogue_only:
        try:
            for name in fetch.loaded_rules(url):
                sources.setdefault(name, []).append("prometheus")
        except (OSError, ValueError, KeyError) as exc:
            notes.append(f"Prometheus's rules (/api/v1/rules) could not be read, only trainguard's: {exc}")
    return {name: tuple(s) for name, s in sources.items()}


def _write(target: str, text: str) -> None:
    if target == "-":
        sys.stdout.write(text)
        return
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except UsageError as exc:
        print(f"trainguard: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _run(args: argparse.Namespace) -> int:
    since = _seconds("--since", args.since)
    quiet = _seconds("--never-fired", args.never_fired)
    chunk = _seconds("--chunk", args.chunk)
    default_interval = _seconds(
        "--eval-interval", args.eval_interval or str(Exporter.model_fields["scrape_interval"].default)
    )
    end = _when(args.until)
    thresholds = findings.Thresholds(
        co_firing=_share("--co-firing", args.co_firing),
        short=_share("--short", args.short),
        min_episodes=max(1, args.min_episodes),
        top=max(1, args.top),
    )
    url = args.prometheus or os.environ.get("TRAINGUARD_PROMETHEUS_URL")
    if not url:
        raise UsageError("give Prometheus's URL with --prometheus URL (or $TRAINGUARD_PROMETHEUS_URL)")
    monitors = read_monitors(args)
    config = monitors.config
    intervals = {} if args.eval_interval else monitors.intervals  # the flag wins
    notes: list[str] = []
    if quiet > since:
        notes.append(
            f"--never-fired {args.never_fired} is longer than --since {args.since}: the history is shorter"
        )

    prom = fetch.prometheus_client(url, timeout=args.timeout)
    start = end - since
    try:
        fetch.check(prom)
        total = len(fetch.chunks(start, end, chunk))

        def progress(done: int, of: int, samples: int) -> None:
            print(
                f"trainguard review: read {done}/{of} chunks of ALERTS ({samples} samples)", file=sys.stderr
            )

        series = fetch.firing_history(prom, start, end, chunk, progress if total > 1 else None)
    except fetch.Unreachable as exc:
        print(f"trainguard: Prometheus at {url} could not be read: {exc}", file=sys.stderr)
        return EXIT_FAILED
    rules = _rules(args, url, monitors.rules, notes)

    by_job: dict[tuple[str, str], list[history.Series]] = {}
    for s in series:
        by_job.setdefault((s.labels.get("namespace", ""), s.labels.get("training_job", "")), []).append(s)
    episodes = [
        e
        for job, own in by_job.items()
        for e in history.episodes(own, intervals.get(job, default_interval), end)
    ]
    router = (lambda labels: routes.receivers(config, labels)) if config is not None else None
    result = findings.review(
        episodes,
        rules,
        start=start,
        end=end,
        interval=default_interval,
        quiet_window=quiet,
        thresholds=thresholds,
        router=router,
        notes=notes,
        supersedes={a.name: a.supersedes for a in ALERTS if a.supersedes},
    )
    sys.stdout.write(report_text(result, args.output, bool(args.out_dir or args.markdown or args.json)))
    data = report.to_json(result)
    if args.out_dir:
        _write(str(Path(args.out_dir) / "review.md"), report.to_markdown(result))
        _write(str(Path(args.out_dir) / "review.json"), dump(data, "json"))
    if args.markdown:
        _write(args.markdown, report.to_markdown(result))
    if args.json:
        _write(args.json, dump(data, "json"))
    return 0


def report_text(result: findings.Findings, fmt: str | None, files: bool) -> str:
    """What goes to standard output: the `-o` format, else Markdown unless files were asked for."""
    if fmt is None:
        return "" if files else report.to_markdown(result)
    return report.to_markdown(result) if fmt == "markdown" else dump(report.to_json(result), fmt)
