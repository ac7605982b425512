"""`trainguard report` end to end through the real Kubernetes and Prometheus clients, against stand-ins
of both (a monitor, its policy, no pods, an empty history): the files in --out-dir by default, and
-o printing one form on stdout instead."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import MONITOR, POLICY
from tests.kube.apiserver import apiserver, kubeconfig
from trainguard.cli import main

CUSTOM = "/apis/trainguard.io/v1alpha1/namespaces/ml"
EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}


@pytest.fixture
def flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    answers = {
        f"{CUSTOM}/trainingjobmonitors/llama-pretrain": MONITOR,
        f"{CUSTOM}/alertpolicies/default": POLICY,
        "/api/v1/namespaces/ml/pods": {"kind": "PodList", "items": []},
        "/api/v1/query": EMPTY,
        "/api/v1/query_range": EMPTY | {"data": {"resultType": "matrix", "result": []}},
    }
    with apiserver(answers) as url:
        config = kubeconfig(tmp_path / "config", {"here": url}, current="here")
        yield ["report", "--monitor", "ml/llama-pretrain", "--at", "1760000000", "--prometheus", url,
               "--kubeconfig", str(config)]  # fmt: skip


def test_the_report_is_written_into_out_dir_as_html_and_markdown(
    flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main([*flags, "--out-dir", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["trainguard-report.html", "trainguard-report.md"]
    assert (out / "trainguard-report.md").read_text().startswith("#  on demand: diagnostic report")
    assert capsys.readouterr().out.split() == [
        str(out / "trainguard-report.html"),
        str(out / "trainguard-report.md"),
    ]


def test_o_prints_one_form_and_writes_nothing(
    flags: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*flags, "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["alert"]["namespace"], data["alert"]["job"], data["findings"]) == (
        "ml",
        "llama-pretrain",
        [],
    )
    assert main([*flags, "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == data
    assert main([*flags, "-o", "html"]) == 0
    assert capsys.readouterr().out.lstrip().startswith("<!DOCTYPE html>")
    assert not list(tmp_path.glob("trainguard-report.*"))
