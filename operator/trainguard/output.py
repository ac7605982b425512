"""How every verb prints, by the conventions its users know from kubectl: `-o/--output` names a format
(the verb's human form, `json` or `yaml`) and never a path, files go under `--out-dir`, a flag that is
renamed keeps working with a warning, and colour is for a terminal only and never under NO_COLOR
(https://no-color.org). Standard library only (YAML is imported when it is written), so `trainguard
--help` stays instant."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

DATA_FORMATS = ("json", "yaml")
OUT_DIR_HINT = "-o/--output names the output format; files are written with --out-dir DIR"


class FormatChoice:
    """The type of `-o`: one of the verb's formats, else a usage error that also says where a path
    goes now (`-o DIR` and `-o FILE` were paths before)."""

    def __init__(self, choices: Sequence[str]) -> None:
        self.choices = tuple(choices)

    def __call__(self, text: str) -> str:
        if text in self.choices:
            return text
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an output format ({', '.join(self.choices)}): {OUT_DIR_HINT}"
        )


def output_flag(
    parser: argparse.ArgumentParser, human: Sequence[str], default: str | None, default_text: str = ""
) -> None:
    """`-o/--output FORMAT`: the verb's human forms, then json and yaml."""
    choices = (*human, *DATA_FORMATS)
    parser.add_argument(
        "-o",
        "--output",
        type=FormatChoice(choices),
        default=default,
        metavar="FORMAT",
        help=f"output format: {', '.join(choices)} (default: {default_text or default})",
    )


def out_dir_flag(
    parser: argparse.ArgumentParser, default: str | None, what: str, default_text: str = ""
) -> None:
    """`--out-dir DIR` (alias `--output-dir`) for a verb that writes files; `-o DIR`, the path it took
    before, is refused naming the new flag."""
    parser.add_argument(
        "--out-dir",
        "--output-dir",
        dest="out_dir",
        default=default,
        metavar="DIR",
        help=f"write {what} into DIR"
        + (f" (default: {default_text or default})" if default_text or default else ""),
    )


class _MovedToOutDir(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        parser.error(f"the path once given to {self.option_strings[0]} now goes to --out-dir DIR")


def refuse_output_path(parser: argparse.ArgumentParser) -> None:
    """A verb whose `-o` was a path and that has no output format: `-o` is refused with the new flag
    (hidden from its help)."""
    parser.add_argument("-o", "--output", action=_MovedToOutDir, help=argparse.SUPPRESS)


class Deprecated(argparse.Action):
    """A deprecated flag that still works: it stores its value (or `const`, for a switch) and says on
    standard error what to use instead, as kubectl does for its renamed flags."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, instead: str, **kwargs: Any) -> None:
        self.instead = instead
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        print(f"trainguard: {option_string} is deprecated: {self.instead}", file=sys.stderr)
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def dump(data: Any, fmt: str) -> str:
    """Data as JSON (indented) or YAML (block style, in the data's own order)."""
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    if fmt == "yaml":
        import yaml

        # through JSON first, so enums, tuples and the like are the plain values JSON has
        plain = json.loads(json.dumps(data))
        return str(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True))
    raise ValueError(f"not a data format: {fmt!r} (one of {', '.join(DATA_FORMATS)})")


def no_colour(environ: Mapping[str, str]) -> bool:
    """NO_COLOR set to anything but the empty string turns colour off (https://no-color.org)."""
    return bool(environ.get("NO_COLOR"))


def colour(stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Colour only on a terminal, and not under NO_COLOR."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and not no_colour(environ)
