"""Each extra runs its own verbs with only its own packages installed. A subprocess hides the other
extras' packages from the import system (as a `pip install 'trainguard[exporter]'` on a GPU node has
them missing), so an import that reaches for the kubernetes client while the CLI builds its parser is
caught here. Found on a real GPU machine: `trainguard exporter` died importing `kubernetes`."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.processes import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]

OPERATOR_ONLY = ("kubernetes", "kopf", "pydantic", "yaml", "prometheus_api_client", "promql_parser")
EXPORTER_ONLY = ("prometheus_client", "pynvml", "opentelemetry")

HIDE = """
import importlib.abc, sys
HIDDEN = set(sys.argv[1].split(","))
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hide())
from trainguard.cli import main
sys.exit(main(sys.argv[2:]))
"""


def trainguard(hidden: tuple[str, ...], *argv: str) -> list[str]:
    return [sys.executable, "-c", HIDE, ",".join(hidden), *argv]


def run(hidden: tuple[str, ...], *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT / "operator"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        trainguard(hidden, *argv), check=False, capture_output=True, text=True, env=env, timeout=60
    )


def test_the_exporter_extra_alone_serves_metrics(tmp_path: Path) -> None:
    assert run(OPERATOR_ONLY, "exporter", "--help").returncode == 0
    port = free_port()
    log = tmp_path / "exporter.log"
    with log.open("w") as out:
        argv = (
            "exporter",
            "--backend",
            "simulated",
            "--gpus",
            "2",
            "--no-host",
            "--listen",
            f"127.0.0.1:{port}",
        )
        env = {"PYTHONPATH": str(ROOT / "operator")}
        proc = subprocess.Popen(
            trainguard(OPERATOR_ONLY, *argv), stdout=out, stderr=subprocess.STDOUT, env=env
        )

    def gpu_series() -> str | None:
        if proc.poll() is not None:
            raise AssertionError(f"the exporter exited:\n{log.read_text()}")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            body = resp.read().decode()
        return body if "DCGM_FI_DEV_GPU_UTIL{" in body else None

    try:
        body = wait_for("the exporter's GPU series", gpu_series, timeout=30, interval=0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert "DCGM_FI_DEV_GPU_UTIL{" in body, log.read_text()


def test_the_operators_verbs_need_no_exporter_packages() -> None:
    assert run(EXPORTER_ONLY, "--help").returncode == 0
    assert run(EXPORTER_ONLY, "operator", "--help").returncode == 0


def test_without_an_extra_its_verb_names_the_pip_command() -> None:
    done = run(OPERATOR_ONLY + EXPORTER_ONLY, "exporter", "--backend", "simulated")
    assert done.returncode != 0
    assert "pip install 'trainguard[exporter]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert run(OPERATOR_ONLY + EXPORTER_ONLY, "--help").returncode == 0
