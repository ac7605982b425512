"""The SDK's integrations on the real frameworks (torch, transformers, accelerate, lightning), on CPU,
reporting through a real exporter process: each test reads what arrived on /metrics.

The frameworks come with the `frameworks-test` extra (scripts/bootstrap.sh installs it). Without
them these tests skip and say so; with TRAINGUARD_REQUIRE_FRAMEWORKS set (.ci/run sets it) a missing
framework fails the run instead.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.exposition import Samples, scrape, value
from tests.processes import free_port, wait_for, wait_http
from trainguard.remediation.sidecars import SidecarControl

TOKEN = "operator-t0k3n"
REPO = Path(__file__).resolve().parents[2]


def require(module: str) -> ModuleType:
    """Import a framework, or skip the calling test module (fail it under TRAINGUARD_REQUIRE_FRAMEWORKS)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        why = f"{module} is not installed ({exc}); pip install -e '.[frameworks-test]' (scripts/bootstrap.sh does)"
        if os.environ.get("TRAINGUARD_REQUIRE_FRAMEWORKS"):
            pytest.fail(f"TRAINGUARD_REQUIRE_FRAMEWORKS is set but {why}", pytrace=False)
        pytest.skip(why, allow_module_level=True)


@dataclass
class Sidecar:
    """A real `trainguard exporter` process: the SDK on its unix socket (as in a pod), /metrics and the
    operator's authenticated control on TCP."""

    proc: subprocess.Popen[bytes]
    url: str
    socket: str
    log: Path

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    def metrics(self) -> Samples:
        return scrape(self.url)

    def value(self, name: str, **labels: str) -> float | None:
        return value(self.metrics(), name, **labels)

    def settled(
        self, name: str, expected: Callable[[float | None], bool], timeout: float = 10.0
    ) -> float | None:
        """The value of `name` once `expected` holds (the exporter renders every 0.1 s here)."""
        got: list[float | None] = []

        def check() -> bool:
            got.append(self.value(name))
            return expected(got[-1])

        try:
            wait_for(name, check, timeout, interval=0.05)
        except AssertionError as exc:
            seen = repr(got[-1]) if got else f"never read ({exc})"
            raise AssertionError(f"{name} is {seen} after {timeout}s\n{self.tail()}") from None
        return got[-1]

    def operator(self, body: dict[str, Any]) -> dict[str, Any]:
        """What the operator does (remediation/sidecars.py): POST /v1/control, signed with its token."""
        return SidecarControl().control(self.url, TOKEN, body)

    def control_view(self) -> dict[str, Any]:
        return SidecarControl().read_control(self.url, TOKEN)

    def tail(self) -> str:
        return self.log.read_text()[-3000:] if self.log.exists() else ""


@contextlib.contextmanager
def sidecar_process(workdir: Path, *flags: str) -> Iterator[Sidecar]:
    port = free_port()
    sock = f"{workdir}/sdk.sock"
    (workdir / "token").write_text(TOKEN)
    log = workdir / "exporter.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainguard.cli", "exporter", "--backend", "none", "--no-host",
             "--listen", f"127.0.0.1:{port}", "--sdk-socket", sock, "--fastpath-token-file",
             str(workdir / "token"), "--render-interval", "0.1", "--namespace", "ml", "--pod", "train-0",
             "--node", "cpu-node", "--training-job", "tiny", *flags],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip
        try:
            try:
                wait_http(f"http://127.0.0.1:{port}/healthz", timeout=30, proc=proc)
            except (RuntimeError, TimeoutError) as exc:
                raise AssertionError(f"{exc}:\n{log.read_text()}") from None
            yield Sidecar(proc, f"http://127.0.0.1:{port}", sock, log)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def sidecar() -> Iterator[Sidecar]:
    """One pod's sidecar, a real exporter process; a short directory (unix socket paths are ~100 bytes)."""
    with tempfile.TemporaryDirectory(prefix="tgfw") as tmp, sidecar_process(Path(tmp)) as s:
        yield s
