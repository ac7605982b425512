#!/usr/bin/env python3
"""The NVML backend on a real NVIDIA GPU, the one path the tests can only drive through a fake NVML.

What it reads and prints (and writes as JSON with -o):
  1. the driver and every GPU the backend enumerates, and whether the XID event set registered;
  2. each field of one idle reading next to what `nvidia-smi` reports for the same GPU, with the
     verdict per field (equal, within tolerance, differs, or one side has no value);
  3. the cost of one poll (`NVMLBackend.read()` of every GPU), paced as the exporter's 1 s polls, and
     the time each NVML function took per poll; NVML's PCIe byte counters probed beside it;
  4. the readings once a second while the GPU does bf16 matrix work and host-to-device copies
     (torch, when installed), so utilization, power, clock and PCIe traffic are seen to move, with
     the bytes the load copied set against what the PCIe byte counters counted;
  5. the exporter itself (`trainguard exporter --backend nvml`) started as a process, and its
     /metrics scraped: which DCGM-named series it serves and its collector_up.

Needs the NVIDIA driver and pynvml (nvidia-ml-py); exits 2, saying why, where NVML does not start.

    python bench/nvml_real.py [-o nvml_real.json] [--load-seconds 20] [--polls 200]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "operator")]

from trainguard.exporter.nvml import NVMLBackend, field_value  # noqa: E402
from trainguard.exporter.readings import GPUReading  # noqa: E402

SMI_FIELDS: tuple[tuple[str, str, float], ...] = (
    # (nvidia-smi query field, GPUReading attribute, tolerance: 0 = equal; <1 = relative; >=1 absolute)
    ("uuid", "uuid", 0),
    ("name", "model", 0),
    ("temperature.gpu", "temp_c", 3),
    ("temperature.memory", "mem_temp_c", 3),
    ("power.draw", "power_w", 0.15),
    ("enforced.power.limit", "power_limit_w", 1),
    ("memory.used", "fb_used_mib", 64),
    ("memory.free", "fb_free_mib", 64),
    ("utilization.gpu", "util", 15),
    ("utilization.memory", "mem_copy_util", 15),
    ("clocks.sm", "sm_clock_mhz", 0.1),
    ("clocks.max.sm", "sm_clock_max_mhz", 0),
    ("pcie.link.gen.current", "pcie_link_gen", 0),
    ("pcie.link.width.current", "pcie_link_width", 0),
    ("pcie.link.gen.max", "pcie_max_link_gen", 0),
    ("pcie.link.width.max", "pcie_max_link_width", 0),
    ("ecc.errors.corrected.volatile.total", "ecc_sbe_total", 0),
    ("ecc.errors.uncorrected.volatile.total", "ecc_dbe_total", 0),
    ("clocks_event_reasons.active", "throttle_reasons", 0),
)


REFUSED = "(refused)"


def smi(field: str) -> list[str] | None:
    """One nvidia-smi query field for every GPU, or None where nvidia-smi refuses the field."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True)  # fmt: skip
    except (subprocess.SubprocessError, OSError):
        return None
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def smi_number(text: str) -> float | None:
    try:
        return float(int(text, 16)) if text.startswith("0x") else float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def verdict(smi_text: str, ours: Any, tolerance: float) -> str:
    if smi_text == REFUSED:
        return "smi refused the field"
    if ours is None:
        return "smi only" if smi_number(smi_text) is not None or (tolerance == 0 and smi_text) else "neither"
    if isinstance(ours, str):
        return "equal" if ours == smi_text else "differs"
    theirs = smi_number(smi_text)
    if theirs is None:
        return "ours only"
    gap = abs(float(ours) - theirs)
    allowed = tolerance * max(abs(theirs), 1.0) if 0 < tolerance < 1 else tolerance
    return "equal" if gap == 0 else "within" if gap <= allowed else "differs"


def compare(readings: list[GPUReading]) -> list[dict[str, Any]]:
    rows = []
    columns = {field: smi(field) for field, _, _ in SMI_FIELDS}
    for r in readings:
        for field, attr, tolerance in SMI_FIELDS:
            column = columns[field]
            theirs = column[r.index] if column is not None and r.index < len(column) else REFUSED
            ours = getattr(r, attr)
            rows.append({"gpu": r.index, "smi": field, "ours": attr, "smi_value": theirs,
                         "our_value": ours, "verdict": verdict(theirs, ours, tolerance)})  # fmt: skip
    return rows


class TimedNVML:
    """pynvml with the time of each nvml* call added up by name: which call a poll's time goes to."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.spent: dict[str, list[float]] = {}

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.module, name)
        if not (name.startswith("nvml") and callable(value)):
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                self.spent.setdefault(name, []).append((time.perf_counter() - start) * 1000)

        return timed


class PacedClock:
    """The backend's clock, one second further at each poll: polls taken back to back are paced as the
    exporter's (--poll-interval 1), so the sampling that is due every few seconds is counted as often."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


PACE = PacedClock()


def poll_cost(backend: NVMLBackend, polls: int) -> dict[str, Any]:
    took = []
    for _ in range(polls):
        PACE.now += 1.0
        start = time.perf_counter()
        backend.read()
        took.append((time.perf_counter() - start) * 1000)
    took.sort()
    return {"polls": polls, "mean_ms": statistics.fmean(took), "median_ms": statistics.median(took),
            "p99_ms": took[int(0.99 * (len(took) - 1))],
            "max_ms": took[-1]}  # fmt: skip


def per_call(timed: TimedNVML, polls: int) -> list[dict[str, Any]]:
    """Milliseconds per poll that each NVML function took, most first."""
    rows = [{"call": name, "calls_per_poll": len(ms) / polls, "ms_per_poll": sum(ms) / polls,
             "median_ms": statistics.median(ms)} for name, ms in timed.spent.items()]  # fmt: skip
    return sorted(rows, key=lambda r: -r["ms_per_poll"])


def pcie_counters(backend: NVMLBackend) -> dict[str, Any]:
    """NVML's PCIe byte counters (field values 197 and 198, newer drivers) read 1 s apart, next to the
    20 ms sampled nvmlDeviceGetPcieThroughput: whether the counters answer and what one read costs."""
    n = backend.nvml
    h = next((h for h in backend.handles if h is not None), None)
    tx_id = getattr(n, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", 197)
    rx_id = getattr(n, "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", 198)
    out: dict[str, Any] = {}
    try:
        start = time.perf_counter()
        first = n.nvmlDeviceGetFieldValues(h, [tx_id, rx_id])
        out["field_values_ms"] = (time.perf_counter() - start) * 1000
        t0 = time.monotonic()
        time.sleep(1.0)
        second = n.nvmlDeviceGetFieldValues(h, [tx_id, rx_id])
        dt = time.monotonic() - t0
        out["returns"] = [int(v.nvmlReturn) for v in second]
        a = [field_value(v) for v in first]
        b = [field_value(v) for v in second]
        out["values"] = b
        if None not in a and None not in b:
            out["rates_bytes_per_s"] = [((y or 0.0) - (x or 0.0)) / dt for x, y in zip(a, b, strict=True)]
    except Exception as exc:  # a probe: whatever NVML answers is the finding
        out["error"] = repr(exc)
    start = time.perf_counter()
    try:
        n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES)
    except Exception as exc:
        out["throughput_error"] = repr(exc)
    out["throughput_call_ms"] = (time.perf_counter() - start) * 1000
    return out


LOAD = """
import sys, time, torch
end = time.time() + float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
host = torch.empty(256 * 2**20, dtype=torch.uint8).pin_memory()
dev = torch.empty_like(host, device="cuda")
copied, start = 0, time.time()
while time.time() < end:
    for _ in range(50):
        c = a @ b
    dev.copy_(host, non_blocking=True)
    copied += host.numel()
    torch.cuda.synchronize()
print("load done", float(c[0, 0]))
print(f"copied {copied} {time.time() - start}")
"""


def under_load(backend: NVMLBackend, seconds: float) -> dict[str, Any]:
    try:
        import torch  # noqa: F401, PLC0415 - only for the load
    except ImportError:
        return {"skipped": "torch is not installed: no load"}
    before = raw_pcie_counters(backend)
    proc = subprocess.Popen([sys.executable, "-c", LOAD, str(seconds)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    samples = []
    deadline = time.time() + seconds + 60
    while proc.poll() is None and time.time() < deadline:
        PACE.now += 1.0
        for r in backend.read():
            if r.index == 0:
                samples.append({k: getattr(r, k) for k in ("util", "power_w", "sm_clock_mhz", "temp_c",
                                "mem_temp_c", "fb_used_mib", "throttle_reasons", "pcie_rx_bytes_per_s",
                                "pcie_tx_bytes_per_s", "mem_copy_util")})  # fmt: skip
                samples[-1].update(sampled_pcie(backend))
        time.sleep(1.0)
    if proc.poll() is None:
        proc.kill()
    out = (proc.communicate()[0] or "").strip().splitlines()
    after = raw_pcie_counters(backend)
    truth: dict[str, Any] = {}
    copied = [line.split() for line in out if line.startswith("copied ")]
    if copied:
        truth = {"host_to_device_bytes": int(copied[-1][1]), "load_seconds": float(copied[-1][2])}
        if before is not None and after is not None:
            truth["rx_counter_bytes"] = after[1] - before[1]
            truth["tx_counter_bytes"] = after[0] - before[0]
            truth["rx_counter_over_copied"] = truth["rx_counter_bytes"] / max(
                truth["host_to_device_bytes"], 1
            )
    peak = (
        {k: max((s[k] for s in samples if s[k] is not None), default=None) for k in samples[0]}
        if samples
        else {}
    )
    mean = {k: statistics.fmean(s[k] for s in samples if s[k] is not None) for k in samples[0]
            if any(s[k] is not None for s in samples)} if samples else {}  # fmt: skip
    return {"seconds": seconds, "samples": samples, "peak": peak, "mean": mean, "truth": truth,
            "load_rc": proc.returncode,
            "load_tail": out[-3:]}  # fmt: skip


def raw_pcie_counters(backend: NVMLBackend) -> tuple[float, float] | None:
    """GPU 0's PCIe byte counters (tx, rx) as NVML has them now, or None where it has none."""
    n = backend.nvml
    try:
        values = n.nvmlDeviceGetFieldValues(backend.handles[0], [197, 198])
    except n.NVMLError:
        return None
    tx, rx = (field_value(v) for v in values)
    return None if tx is None or rx is None else (tx, rx)


def sampled_pcie(backend: NVMLBackend) -> dict[str, float | None]:
    """GPU 0's PCIe traffic from the 20 ms sampling call, beside the backend's counter rates."""
    n = backend.nvml
    h = backend.handles[0]
    out: dict[str, float | None] = {}
    for key, counter in (
        ("sampled_tx", n.NVML_PCIE_UTIL_TX_BYTES),
        ("sampled_rx", n.NVML_PCIE_UTIL_RX_BYTES),
    ):
        try:
            out[key] = n.nvmlDeviceGetPcieThroughput(h, counter) * 1024.0
        except n.NVMLError:
            out[key] = None
    return out


def exporter_scrape(backend: str) -> dict[str, Any]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}
    cmd = [sys.executable, "-c", "import sys; from trainguard.cli import main; sys.exit(main())", "exporter",
           "--backend", backend, "--listen", f"127.0.0.1:{port}", "--no-host", "--poll-interval", "1",
           "--namespace", "bench", "--pod", "bench-0", "--node", socket.gethostname(),
           "--training-job", "bench", "--gpu-ids", "0"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    body = ""
    try:
        deadline = time.time() + 30
        while time.time() < deadline and "DCGM_FI_DEV_GPU_UTIL{" not in body:
            time.sleep(1.0)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                    body = resp.read().decode()
            except OSError:
                continue
    finally:
        proc.terminate()
        try:
            log = proc.communicate(timeout=10)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            log = proc.communicate()[0]
    series = [line for line in body.splitlines() if line and not line.startswith("#")]
    names = sorted({line.split("{")[0].split(" ")[0] for line in series})
    up = [line for line in series if line.startswith("trainguard_exporter_collector_up")]
    return {"series": len(series), "names": names, "collector_up": up, "metrics": body,
            "log_tail": log.strip().splitlines()[-10:]}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", type=Path)
    ap.add_argument("--load-seconds", type=float, default=20.0)
    ap.add_argument("--polls", type=int, default=200)
    ap.add_argument("--exporter-backend", default="nvml", help="simulated: try step 5 without a GPU")
    args = ap.parse_args()

    started = time.perf_counter()
    try:
        import pynvml  # noqa: PLC0415 - the one thing this check needs beyond the exporter
    except ImportError:
        print("pynvml is not installed: pip install nvidia-ml-py", file=sys.stderr)
        return 2
    timed = TimedNVML(pynvml)
    backend = NVMLBackend(nvml=timed, clock=PACE)
    print(f"NVMLBackend started in {time.perf_counter() - started:.3f} s; error: {backend.error or '(none)'}")
    if not backend.started or backend.error:
        print("NVML did not start: this check needs an NVIDIA driver and pynvml", file=sys.stderr)
        return 2
    info = dataclasses.asdict(backend.info)
    print(f"driver {info['driver_version']}, NVML {info['nvml_version']}, CUDA {info['cuda_version']}; "
          f"{len(backend.inventory)} GPU(s): {[d.model for d in backend.inventory]}; "
          f"XID event set: {'registered' if backend.events is not None else 'unavailable'}")  # fmt: skip
    result: dict[str, Any] = {
        "driver": info,
        "gpus": [dataclasses.asdict(d) for d in backend.inventory],
        "xid_event_set": backend.events is not None,
        "nvidia_smi": shutil.which("nvidia-smi"),
    }
    idle = backend.read()
    result["idle"] = [dataclasses.asdict(r) for r in idle]
    rows = compare(idle)
    result["compare"] = rows
    print(f"\n{'field (nvidia-smi)':40} {'nvidia-smi':>24} {'backend':>24}  verdict")
    for row in rows:
        print(f"{row['smi']:40} {row['smi_value']!s:>24} {row['our_value']!s:>24}  {row['verdict']}")
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    print(f"verdicts: {counts}")
    unsupported = (
        [f.name for f in dataclasses.fields(GPUReading) if getattr(idle[0], f.name) is None] if idle else []
    )
    print(f"fields the backend left out (NVML NotSupported or none on this GPU): {unsupported}")
    result["left_out"] = unsupported

    timed.spent.clear()
    result["poll_cost"] = poll_cost(backend, args.polls)
    pc = result["poll_cost"]
    print(f"\none poll of {len(idle)} GPU(s): mean {pc['mean_ms']:.2f} ms, median {pc['median_ms']:.2f} ms, p99 {pc['p99_ms']:.2f} ms, "
          f"max {pc['max_ms']:.2f} ms over {pc['polls']} polls")  # fmt: skip
    result["per_call"] = per_call(timed, args.polls)
    for row in result["per_call"]:
        print(f"  {row['call']:45} {row['calls_per_poll']:4.1f} calls {row['ms_per_poll']:8.3f} ms/poll "
              f"(median {row['median_ms']:.3f} ms)")  # fmt: skip
    result["pcie_counters"] = pcie_counters(backend)
    print(f"PCIe byte counters: {result['pcie_counters']}")

    load = under_load(backend, args.load_seconds)
    result["load"] = load
    if "peak" in load:
        print(f"\nunder load ({len(load['samples'])} samples, load rc {load['load_rc']}):")
        for s in load["samples"]:
            print(
                "  " + ", ".join(f"{k}={v:.0f}" if isinstance(v, float) else f"{k}={v}" for k, v in s.items())
            )
        print(f"peak: {load['peak']}")
        print(f"mean: {load['mean']}")
        print(f"the copies against the counters: {load['truth']}")
    else:
        print(load)

    scrape = exporter_scrape(args.exporter_backend)
    result["exporter"] = scrape
    print(f"\nexporter /metrics: {scrape['series']} series; names: {scrape['names']}")
    print(f"collector_up: {scrape['collector_up']}")
    print("exporter log tail:\n  " + "\n  ".join(scrape["log_tail"]))
    backend.close()
    if args.output:
        args.output.write_text(json.dumps(result, indent=1, default=str) + "\n")
        print(f"\nwritten {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
