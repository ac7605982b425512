#!/usr/bin/env python3
"""Scrape cost of the trainguard exporter next to node_exporter and a bare prometheus_client
registry, measured side by side in one run (scrapes interleaved round by round), plus resident
memory and the SDK's log_step cost. Prints a table and the conditions it was taken under.

    python bench/exporter.py [--scrapes 500]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "operator")]

from e2e.controlplane.cache import cache_dir  # noqa: E402
from tests.processes import free_port  # noqa: E402
from trainguard.sdk import Reporter  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wait_up(url: str, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(200):
        if proc.poll() is not None:
            raise SystemExit(f"{url}: process exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{url} did not come up")


def timed_scrape(url: str) -> tuple[float, int]:
    """One scrape, read whole: how long it took (seconds) and its size (bytes)."""
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = resp.read()
    return time.perf_counter() - t0, len(body)


def log_step_cost(endpoint: str, calls: int) -> float:
    tg = Reporter(endpoint, queue_size=4096, flush_interval_s=0.2)
    for step in range(1000):  # warm up
        tg.log_step(step, loss=1.0, grad_norm=0.5, tokens=4096, step_time_s=0.1)
    t0 = time.perf_counter()
    for step in range(calls):
        tg.log_step(step, loss=1.0, grad_norm=0.5, tokens=4096, step_time_s=0.1)
    per_call = (time.perf_counter() - t0) / calls
    tg.close()
    return per_call * 1e6


def find_node_exporter() -> str | None:
    """The one `make node-exporter` builds into the e2e cache (e2e/controlplane/build.sh), else Debian's or
    one on PATH."""
    built = cache_dir() / "bin" / "current" / "node_exporter"
    if built.exists():
        return str(built)
    return shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")


def version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], check=False, capture_output=True, text=True, timeout=10)
    first = (out.stdout or out.stderr).splitlines()[:1]
    return f"{binary} ({first[0].strip() if first else 'version unknown'})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scrapes", type=int, default=500)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--log-step-calls", type=int, default=200_000)
    args = p.parse_args()

    node_exporter = find_node_exporter()
    work = Path(tempfile.mkdtemp(prefix="trainguard-bench-"))
    ports = {"trainguard": free_port(), "node_exporter": free_port(), "client_default": free_port()}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    procs["trainguard"] = subprocess.Popen(
        [sys.executable, "-m", "trainguard.cli", "exporter", "--backend", "simulated", "--gpus", str(args.gpus),
         "--listen", f"127.0.0.1:{ports['trainguard']}", "--sdk-tcp", "--namespace", "ml", "--pod", "bench-0",
         "--node", "gpu-node-1", "--training-job", "bench"],
        stdout=(work / "exporter.log").open("wb"), stderr=subprocess.STDOUT, cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT / "operator")},
    )  # fmt: skip
    if node_exporter:
        procs["node_exporter"] = subprocess.Popen(
            [node_exporter, f"--web.listen-address=127.0.0.1:{ports['node_exporter']}"],
            stdout=(work / "node_exporter.log").open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
    procs["client_default"] = subprocess.Popen(
        [sys.executable, "-c", f"import time, prometheus_client as p; p.start_http_server({ports['client_default']}, "
         "addr='127.0.0.1'); time.sleep(86400)"],
    )  # fmt: skip
    try:
        for name, proc in procs.items():
            wait_up(f"http://127.0.0.1:{ports[name]}/metrics", proc)
        endpoint = f"http://127.0.0.1:{ports['trainguard']}"
        # a trainer's worth of state, so the exposition carries training series too
        tg = Reporter(endpoint)
        for step in range(50):
            tg.log_step(step, loss=2.0, grad_norm=1.0, tokens=65536, loss_scale=1024, dataloader_wait_s=0.01,
                        allreduce_s=0.05, step_time_s=0.5)  # fmt: skip
        tg.checkpoint_saved(49, "full", "/ckpt")
        tg.close()
        time.sleep(2.5)  # two host polls, so rates exist
        for name in procs:  # warm up
            for _ in range(20):
                timed_scrape(f"http://127.0.0.1:{ports[name]}/metrics")
        lat: dict[str, list[float]] = {n: [] for n in procs}
        size: dict[str, int] = {}
        cpu0 = {n: cpu_seconds(p.pid) for n, p in procs.items()}
        wall0 = time.monotonic()
        for _ in range(args.scrapes):
            for name in procs:  # interleaved: every target sees the same machine load
                seconds, nbytes = timed_scrape(f"http://127.0.0.1:{ports[name]}/metrics")
                lat[name].append(seconds)
                size[name] = nbytes
        wall = time.monotonic() - wall0
        cpu = {n: (cpu_seconds(p.pid) - cpu0[n]) / args.scrapes for n, p in procs.items()}
        rss = {n: rss_mib(p.pid) for n, p in procs.items()}
        log_step_us = log_step_cost(endpoint, args.log_step_calls)
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)

    def ms(x: float) -> str:
        return f"{x * 1000:8.3f}"

    print(f"conditions: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"{args.scrapes} interleaved scrapes per target over {wall:.1f}s, trainguard with {args.gpus} simulated GPUs, "
          f"host and training collectors on; node_exporter {version(node_exporter) if node_exporter else 'NOT FOUND (make node-exporter builds it)'}")  # fmt: skip
    print()
    print(
        f"{'target':<16} {'median ms':>10} {'p99 ms':>10} {'CPU ms/scrape':>14} {'RSS MiB':>9} {'bytes':>8}"
    )
    for name in procs:
        xs = sorted(lat[name])
        p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))]
        print(
            f"{name:<16} {ms(statistics.median(xs)):>10} {ms(p99):>10} {ms(cpu[name]):>14} {rss[name]:9.1f} {size[name]:8d}"
        )
    print()
    if "node_exporter" in procs:
        ratio = statistics.median(lat["trainguard"]) / statistics.median(lat["node_exporter"])
        print(f"median scrape, trainguard / node_exporter: {ratio:.2f}x (target: <= 1)")
        print(f"resident memory, trainguard / node_exporter: {rss['trainguard'] / rss['node_exporter']:.2f}x "
              f"(target: trainguard under 60 MiB)")  # fmt: skip
    print(f"SDK log_step: {log_step_us:.2f} us per call (target: under 20 us)")
    print(
        "CPU per scrape is the process's CPU time over the run divided by the scrapes; for trainguard it includes "
        "the background polling and rendering (once a second), which is where its work happens."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
