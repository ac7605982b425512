"""The command line follows the conventions of kubectl, which its users know: --context beside every
--kubeconfig, -o/--output names a format (never a path: files go under --out-dir), a renamed flag keeps
working with a warning, and the developers' verbs stay out of the users' help."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from trainguard.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")
DEVELOPER_VERBS = ("crds", "dashboards", "keep-list", "docs", "reference")
DATA_VERBS = {
    "status": [],
    "drill": ["--monitor", "ml/llama", "--scenario", "nan"],
    "review": [],
    "report": ["--monitor", "ml/llama"],
    "render": ["-f", QUICKSTART],
    "validate": ["-f", QUICKSTART],
}


def verbs(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every runnable (sub)command's parser, nested ones (guardrails reset) included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from verbs(sub, (*path, name))


def flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def test_every_verb_with_a_kubeconfig_takes_a_context() -> None:
    with_kubeconfig = {path for path, p in verbs(build_parser()) if "--kubeconfig" in flags(p)}
    assert {
        ("status",),
        ("drill",),
        ("report",),
        ("uncordon",),
        ("operator",),
        ("guardrails", "reset"),
    } <= with_kubeconfig
    for path, p in verbs(build_parser()):
        if path in with_kubeconfig:
            assert "--context" in flags(p), path


@pytest.mark.parametrize("verb", sorted(DATA_VERBS))
def test_o_names_a_format_on_every_verb_whose_output_is_data(
    verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for fmt in ("json", "yaml"):
        assert build_parser().parse_args([verb, *DATA_VERBS[verb], "-o", fmt]).output == fmt
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([verb, *DATA_VERBS[verb], "-o", "out/"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "'out/' is not an output format" in err and "--out-dir DIR" in err


@pytest.mark.parametrize("verb", DEVELOPER_VERBS)
def test_a_developers_verb_writes_into_out_dir_and_refuses_o_naming_it(
    verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([verb, "--out-dir", str(tmp_path)]) == 0
    assert any(tmp_path.iterdir())
    assert main([verb, "--output-dir", str(tmp_path), "--check"]) == 0
    with pytest.raises(SystemExit) as exc:
        main([verb, "-o", str(tmp_path)])
    assert exc.value.code == 2
    assert "now goes to --out-dir DIR" in capsys.readouterr().err


def test_the_developers_verbs_are_left_out_of_the_help_but_run(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = capsys.readouterr().out
    listed = set(re.findall(r"^    (\S+)", shown, re.M))
    assert {"render", "validate", "status", "review", "drill", "report"} <= listed
    assert not listed & set(DEVELOPER_VERBS)
    assert "SUPPRESS" not in shown
    for verb in DEVELOPER_VERBS:
        assert build_parser().parse_args([verb]).func is not None


def test_json_and_yaml_of_validate_and_render_parse(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "-f", QUICKSTART, "-o", "json"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["monitors"] == [{"namespace": "ml", "name": "llama-pretrain"}]
    assert main(["validate", "-f", QUICKSTART, "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == checked
    assert main(["render", "-f", QUICKSTART, "-o", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["kind"] == "List"
    assert main(["render", "-f", QUICKSTART, "-o", "yaml"]) == 0
    assert list(yaml.safe_load_all(capsys.readouterr().out)) == listed["items"]


def test_the_drills_json_switch_is_a_deprecated_alias_of_o_json(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["drill", *DATA_VERBS["drill"], "--json"])
    assert args.output == "json"
    assert "--json is deprecated: use -o json" in capsys.readouterr().err
    assert build_parser().parse_args(["drill", *DATA_VERBS["drill"]]).output == "table"
