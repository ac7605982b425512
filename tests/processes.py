"""Starting real Prometheus-family processes on loopback for integration tests, and stopping them; a
free loopback port for them, and waiting for one to answer or for any condition to hold (the tests,
e2e and the benchmarks share these)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest

from e2e.controlplane.cache import cache_dir

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


def start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    """A process from the repository root, its output in `log`."""
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=ROOT)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Terminate them all, then wait; kill what does not exit within 10 s."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


@contextlib.contextmanager
def serve_text(text: str) -> Iterator[str]:
    """A fixed /metrics exposition on a free loopback port (a stand-in for kube-state-metrics, which needs
    an apiserver); yields its host:port."""
    body = text.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    """A loopback port free now (the kernel's pick), for a process or server about to listen on it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))  # every address, as a server listening on all of them
        except OSError:
            return False
        return True


LASTING_LOW = 10_000
"""Where lasting ports start: above the well-known and registered ports most services take."""

_next_lasting: dict[tuple[int, int], int] = {}


def _worker_slice(low: int, high: int, env: Mapping[str, str]) -> tuple[int, int]:
    """This pytest-xdist worker's share [start, end) of the ports [low, high): gwN of M takes the Nth of M
    equal slices, a run without xdist takes them all."""
    worker = env.get("PYTEST_XDIST_WORKER", "")
    try:
        count = int(env.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        index = int(worker.removeprefix("gw")) if worker.startswith("gw") else 0
    except ValueError:
        return low, high
    if count <= 1 or not 0 <= index < count:
        return low, high
    width = (high - low) // count
    return low + index * width, low + (index + 1) * width


def lasting_port(span: int = 1) -> int:
    """A port whose `span` ports from it are free now and below the kernel's ephemeral range
    (ip_local_port_range): for a server that listens on it later or again (a gang's later generation, an
    operator restarted where it was). A port of that range (free_port's) is the kernel's to hand out
    meanwhile to any other process's port-0 bind or outgoing connection: an operator restarted on its old
    receiver port once found another test's HTTP server there, and Alertmanager's posts went to it.

    Free now is not enough for a span: a gang binds only MASTER_PORT + generation, so the rest of its span
    looks free to a pick in another test running beside it. Two gangs given overlapping spans in two
    xdist workers met at one port (one's generation 1 store took the port of the other's replacement rank
    0, which failed with EADDRINUSE, and the first gang's healthy rank joined the wrong store). So each
    worker picks in a slice of its own, and within it moves on past every span it gave out."""
    low, high = _worker_slice(LASTING_LOW, _ephemeral_low(), os.environ)
    if high - low < span:
        raise RuntimeError(f"no {span} ports in a row between {low} and {high}")
    cursor = _next_lasting.get((low, high))
    if cursor is None:  # a random start: a worker of an earlier run may have left a process behind
        cursor = random.randrange(low, high - span + 1)
    for _ in range(200):
        port = cursor if cursor + span <= high else low
        cursor = port + span
        if all(_free(p) for p in range(port, port + span)):
            _next_lasting[(low, high)] = cursor
            return port
    raise RuntimeError(f"no {span} free ports in a row between {low} and {high}")


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 60, interval: float = 0.5) -> T:
    """Poll until fn returns something truthy, and return that; an exception raised by fn counts as not
    yet. On timeout, fail with `what` and the last exception."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = fn()
            if value:
                return value
        except Exception as exc:
            last = exc
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last})" if last else "")
    )


def wait_http(url: str, timeout: float = 20.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def http_json(url: str, body: Any = None, method: str | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


@contextlib.contextmanager
def backfilled_prometheus(openmetrics: str, workdir: Path, *flags: str) -> Iterator[str]:
    """A real Prometheus over a history written with `promtool tsdb create-blocks-from openmetrics` (how
    a test gets hours of past samples, alert history included); yields its base URL. Skips without the
    binaries."""
    import pytest  # noqa: PLC0415 - this module is imported by benchmarks too, which need no pytest

    binary, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if binary is None or promtool is None:
        pytest.skip("Prometheus is not installed (.ci/run installs prometheus)")
    (workdir / "history.om").write_text(openmetrics)
    backfill = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(workdir / "history.om"),
                               str(workdir / "data")], capture_output=True, text=True, check=False)  # fmt: skip
    assert backfill.returncode == 0, backfill.stdout + backfill.stderr
    (workdir / "prometheus.yml").write_text("global: {}\n")
    port = free_port()
    proc = start([binary, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
                  f"--web.listen-address=127.0.0.1:{port}", *flags], workdir / "prometheus.log")  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/-/ready", proc=proc)
        yield url
    finally:
        stop([proc])


@contextlib.contextmanager
def alertmanager(binary: str, config: Path, workdir: Path) -> Iterator[str]:
    """A real Alertmanager on a free loopback port, clustering off; yields its base URL."""
    port = free_port()
    log = (workdir / "alertmanager.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.path={workdir / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/-/ready", proc=proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def victoria_metrics() -> str:
    """The VictoriaMetrics binary e2e/controlplane/build.sh builds into the e2e cache, else one on PATH;
    skips the test without one, or fails it where CI requires the tools (TRAINGUARD_REQUIRE_TOOLS)."""
    built = cache_dir() / "bin" / "current" / "victoria-metrics"
    found = str(built) if built.exists() else shutil.which("victoria-metrics")
    if found is None:
        if os.environ.get("TRAINGUARD_REQUIRE_TOOLS"):
            pytest.fail("victoria-metrics is required (TRAINGUARD_REQUIRE_TOOLS is set) but not built")
        pytest.skip("victoria-metrics is not built: `make victoria-metrics` builds it from its Go module")
    return found
