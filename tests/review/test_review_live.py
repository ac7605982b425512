"""`trainguard review` on a live Prometheus evaluating rules of its own every second: the rules it
reports loaded (/api/v1/rules) are reviewed along with trainguard's, and ALERTS as the rule manager
writes it (not backfilled) reads as one ongoing episode."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import free_port, http_json, start, stop, wait_http
from trainguard.cli import main

pytestmark = pytest.mark.tools

RULES = """groups:
- name: site
  rules:
  - alert: SiteAlwaysFiring
    expr: vector(1)
    labels: {severity: P3}
  - alert: SiteNeverFires
    expr: vector(1) > 2
    labels: {severity: P2}
"""


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("Prometheus is not installed (.ci/run installs prometheus)")
    (tmp_path / "rules.yml").write_text(RULES)
    (tmp_path / "prometheus.yml").write_text(
        f"global: {{evaluation_interval: 1s}}\nrule_files: [{tmp_path / 'rules.yml'}]\n"
    )
    port = free_port()
    proc = start([binary, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
                  f"--web.listen-address=127.0.0.1:{port}"], tmp_path / "prometheus.log")  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/-/ready", proc=proc)
        yield url
    finally:
        stop([proc])


def test_prometheus_rules_are_reviewed_with_the_catalogue(
    prometheus: str, capsys: pytest.CaptureFixture[str]
) -> None:
    deadline = time.monotonic() + 30
    query = f"{prometheus}/api/v1/query?query=count_over_time(ALERTS%7Balertstate%3D%22firing%22%7D%5B1m%5D)"
    while not (got := http_json(query)["data"]["result"]) or float(got[0]["value"][1]) < 3:
        assert time.monotonic() < deadline, "SiteAlwaysFiring did not fire 3 times within 30 s"
        time.sleep(0.5)
    flags = ["--since", "5m", "--never-fired", "5m", "--eval-interval", "1s", "-o", "json"]
    assert main(["review", "--prometheus", prometheus, *flags]) == 0
    data = json.loads(capsys.readouterr().out)
    never = {n["alertname"]: n["sources"] for n in data["never_fired"]}
    assert never["SiteNeverFires"] == ["prometheus"]
    assert never["GPUNodeDown"] == ["catalogue"]
    assert "SiteAlwaysFiring" not in never
    (alert,) = data["alerts"]
    assert (alert["alertname"], alert["episodes"], alert["short"]) == ("SiteAlwaysFiring", 1, 0)
    assert data["flapping"] == [] and data["notes"] == []
