"""docs/long-term-storage.md shows keep-lists to paste: each must be one the renderer produces."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from trainguard.render.longterm import (
    aggregate_names,
    remote_write,
    remote_write_kube_prometheus_stack,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "long-term-storage.md"


def yaml_blocks() -> list[Any]:
    return [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)]


def test_the_plain_prometheus_snippet_is_what_render_writes() -> None:
    (block,) = [b for b in yaml_blocks() if "remote_write" in b]
    assert block == remote_write(block["remote_write"][0]["url"])


def test_the_kube_prometheus_stack_values_carry_the_rendered_keep_list() -> None:
    (block,) = [b for b in yaml_blocks() if "prometheus" in b]
    spec = block["prometheus"]["prometheusSpec"]
    assert spec["retention"] == "7d"
    url = spec["remoteWrite"][0]["url"]
    rendered = remote_write_kube_prometheus_stack(url)["prometheus"]["prometheusSpec"]
    assert spec["remoteWrite"] == rendered["remoteWrite"]


def test_every_aggregate_is_listed_in_the_table() -> None:
    text = DOC.read_text()
    for name in aggregate_names():
        assert f"| `{name}` |" in text, name
