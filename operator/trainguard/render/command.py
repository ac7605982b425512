"""`trainguard render` and `validate`, and the generated files' verbs (`crds`, `dashboards`,
`keep-list`, `docs`, `reference`): the renderers' only file I/O. Each generated file's verb writes into
its --out-dir or, with --check, fails when the committed file differs (CI's drift check); those verbs
are the project's developers' (docs/development.md), so they are left out of `trainguard --help`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from trainguard.args import (
    EXIT_USAGE,
    fail,
    need,
    refuse_shared_options_without_shared_form,
    shared_form_flags,
)
from trainguard.catalog.severity import GRADE, MAPPED_SEVERITY, STYLES
from trainguard.output import DATA_FORMATS, dump, out_dir_flag, output_flag, refuse_output_path


def _read_sources(files: Sequence[str]) -> list[tuple[str, str]]:
    sources = []
    for f in files:
        if f == "-":
            sources.append(("<stdin>", sys.stdin.read()))
            continue
        path = Path(f)
        paths = sorted(path.glob("*.y*ml")) if path.is_dir() else [path]
        for p in paths:
            try:
                sources.append((str(p), p.read_text(encoding="utf-8")))
            except OSError as exc:
                fail(f"cannot read {p}: {exc.strerror}")
    return sources


def _load(files: Sequence[str]):  # type: ignore[no-untyped-def]
    need("render")
    from trainguard.api import InvalidInput, load_documents

    try:
        docs = load_documents(_read_sources(files))
    except InvalidInput as exc:
        for p in exc.problems:
            print(f"error: {p}", file=sys.stderr)
        fail(f"{len(exc.problems)} problem(s) in the input; nothing was rendered")
    if not docs.monitors and not docs.policies:
        fail("no TrainingJobMonitor or AlertPolicy in the input (apiVersion trainguard.io/v1alpha1)")
    return docs


def cmd_render(args: argparse.Namespace) -> int:
    refuse_shared_options_without_shared_form(args)
    docs = _load(args.file)
    from trainguard.render import dump_stream, dump_yaml, render_kubernetes, render_prometheus

    if not docs.monitors:
        fail("no TrainingJobMonitor in the input: rules and routes are rendered per monitor")
    if args.format == "kubernetes":
        if args.rule_form != "per-monitor":
            fail(
                "--rule-form shared is for --format prometheus; the operator applies it (--rule-form)",
                EXIT_USAGE,
            )
        objs = render_kubernetes(docs, args.aggregate_interval, args.severity_style)
        if args.out_dir:
            out = Path(args.out_dir)
            out.mkdir(parents=True, exist_ok=True)
            (out / "trainguard.yaml").write_text(dump_stream(objs), encoding="utf-8")
            print(f"wrote {out / 'trainguard.yaml'}", file=sys.stderr)
        if args.output == "json":
            sys.stdout.write(dump({"apiVersion": "v1", "kind": "List", "items": objs}, "json"))
        elif args.output == "yaml" or not args.out_dir:
            sys.stdout.write(dump_stream(objs))
        return 0
    if args.output:
        fail(
            "-o prints the kubernetes stream: --format prometheus writes its files into --out-dir DIR",
            EXIT_USAGE,
        )
    files = render_prometheus(
        docs,
        args.aggregate_interval,
        args.remote_write_url,
        args.remote_write_events_url,
        severity_style=args.severity_style,
        rule_form=args.rule_form,
        shared_rule_groups=args.shared_rule_groups,
        shared_annotation_lookups=args.shared_annotation_lookups,
    )
    if not args.out_dir:
        fail("--format prometheus writes several files: give a directory with --out-dir DIR", EXIT_USAGE)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (out / name).write_text(content if isinstance(content, str) else dump_yaml(content), encoding="utf-8")
        print(f"wrote {out / name}", file=sys.stderr)
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    docs = _load(args.file)
    if args.output in DATA_FORMATS:
        data = {
            "monitors": [{"namespace": m.namespace, "name": m.name} for m in docs.monitors],
            "policies": [{"namespace": p.namespace, "name": p.name} for p in docs.policies],
            "skipped": list(docs.skipped),
        }
        sys.stdout.write(dump(data, args.output))
        return 0
    for m in docs.monitors:
        print(f"ok: TrainingJobMonitor {m.namespace}/{m.name}")
    for p in docs.policies:
        print(f"ok: AlertPolicy {p.namespace}/{p.name}")
    for s in docs.skipped:
        print(f"skipped (not a trainguard object): {s}")
    return 0


KEEP_LIST = "remote-write-keep.yaml"
ALERTS_PAGE = "alerts.md"


def _write_or_check(target: Path, text: str, check: bool, regenerate: str) -> None:
    """Write a generated file, or with `check` fail when the committed one differs."""
    if check:
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current != text:
            fail(f"{target} is out of date: run `{regenerate}` and commit the result")
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target}", file=sys.stderr)


def cmd_crds(args: argparse.Namespace) -> int:
    need("render")
    from trainguard.api.crd import crds
    from trainguard.render import dump_yaml

    for name, crd in crds().items():
        _write_or_check(Path(args.out_dir) / name, dump_yaml(crd), args.check, "make crds")
    return 0


def cmd_dashboards(args: argparse.Namespace) -> int:
    need("render", "pydantic", "promql_parser", "grafana_foundation_sdk")
    from trainguard.render.dashboards import render_dashboards

    for name, text in render_dashboards().items():
        _write_or_check(Path(args.out_dir) / name, text, args.check, "make dashboards")
    return 0


def cmd_keep_list(args: argparse.Namespace) -> int:
    """The chart's copy of the remote_write keep-list (files/remote-write-keep.yaml), so that the
    chart's longTermStorage.remoteWrite ships what render.longterm ships, without a hand copy."""
    need("render")
    from trainguard.render import dump_yaml
    from trainguard.render.longterm import ALERT_HISTORY, GOODPUT, aggregate_names

    header = "# generated from trainguard.render.longterm by `make chart`: do not edit\n"
    body = dump_yaml(
        {"aggregates": list(aggregate_names()), "goodput": list(GOODPUT), "alertHistory": list(ALERT_HISTORY)}
    )
    _write_or_check(Path(args.out_dir) / KEEP_LIST, header + body, args.check, "make chart")
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    from trainguard.catalog.markdown import alerts_markdown

    _write_or_check(Path(args.out_dir) / ALERTS_PAGE, alerts_markdown(), args.check, "make docs")
    return 0


def cmd_reference(args: argparse.Namespace) -> int:
    need("render")
    from trainguard.api.reference import reference_markdown

    regenerate = "trainguard reference --out-dir docs/reference"
    for name, text in reference_markdown().items():
        _write_or_check(Path(args.out_dir) / name, text, args.check, regenerate)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    render = sub.add_parser("render", help="render monitors and policies into rules and routes")
    render.add_argument(
        "-f",
        "--file",
        action="append",
        required=True,
        metavar="FILE",
        help="YAML file or directory with TrainingJobMonitors and AlertPolicies ('-' for stdin); repeatable",
    )
    render.add_argument(
        "--format",
        choices=["kubernetes", "prometheus"],
        default="kubernetes",
        help="kubernetes: a YAML stream for kubectl apply or Argo CD (default); "
        "prometheus: rules.yml and alertmanager.yml for a plain Prometheus and Alertmanager",
    )
    output_flag(render, (), None, "yaml, unless --out-dir is given")
    out_dir_flag(render, None, "trainguard.yaml (kubernetes), or rules.yml and alertmanager.yml (prometheus)")
    render.add_argument(
        "--aggregate-interval",
        default="5m",
        metavar="DURATION",
        help="how often the long-term aggregate groups are evaluated (default 5m; tests shorten it)",
    )
    render.add_argument(
        "--severity-style",
        choices=STYLES,
        default=GRADE,
        help="the alerts' severity label: grade (severity=P0..P3, the default) or mapped ("
        + ", ".join(f"{g}={w}" for g, w in MAPPED_SEVERITY.items())
        + ", for an Alertmanager that routes on those); the grade is in the priority label either way, "
        "and the rendered routes match it; use the operator's --severity-style (docs/severity.md)",
    )
    render.add_argument(
        "--rule-form",
        choices=("per-monitor", "shared"),
        default="per-monitor",
        help="--format prometheus: one rule group per monitor (default), or one shared group whose "
        "thresholds are series, written to monitor-settings.prom (docs/rendering.md)",
    )
    shared_form_flags(render, "the shared group")
    render.add_argument(
        "--remote-write-url",
        metavar="URL",
        help="--format prometheus: also write remote_write.yml, shipping only the aggregates and the "
        "alert history to this long-term store (docs/long-term-storage.md)",
    )
    render.add_argument(
        "--remote-write-events-url",
        metavar="URL",
        help="with --remote-write-url: send the alert history (ALERTS, ALERTS_FOR_STATE) here instead, "
        "to a store with a longer retention than the aggregates' 6 months",
    )
    render.set_defaults(func=cmd_render)

    validate = sub.add_parser(
        "validate", help="check monitors and policies; report every problem with its field"
    )
    validate.add_argument("-f", "--file", action="append", required=True, metavar="FILE")
    output_flag(validate, ("text",), "text")
    validate.set_defaults(func=cmd_validate)

    generated = (
        ("crds", cmd_crds, "crds", "the CustomResourceDefinitions generated from the models"),
        ("dashboards", cmd_dashboards, "charts/trainguard/dashboards",
         "the Grafana dashboards generated from the catalogue"),
        ("keep-list", cmd_keep_list, "charts/trainguard/files",
         f"the chart's remote_write keep-list ({KEEP_LIST}) from the aggregates"),
        ("docs", cmd_docs, "docs", f"{ALERTS_PAGE}, the alert catalogue's page"),
        ("reference", cmd_reference, "docs/reference", "the CR reference generated from the models"),
    )  # fmt: skip
    for name, func, default, what in generated:
        # no help=: a sub-parser without one is left out of `trainguard --help` (a developer's verb)
        dev = sub.add_parser(name, description=f"Write {what} (a developer's verb: docs/development.md).")
        out_dir_flag(dev, default, "the files")
        dev.add_argument(
            "--check", action="store_true", help="fail if the files in DIR differ from what is generated"
        )
        refuse_output_path(dev)
        dev.set_defaults(func=func)
