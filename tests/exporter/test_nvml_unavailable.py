"""NVML that cannot start (no driver, no library, a runtime that hides the devices) must not take the
sidecar down: host and training metrics are still served, the GPU collector says why it is down, and
the cause is logged once, not on every poll."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.exporter import fake_nvml
from tests.exporter.nvml_exporter import IDENTITY
from tests.exposition import Samples, parse, scrape
from tests.processes import free_port, wait_http
from trainguard.exporter.app import Exporter, ExporterConfig
from trainguard.exporter.faults import Faults
from trainguard.exporter.host import HostReader
from trainguard.exporter.nvml import NVMLBackend
from trainguard.exporter.training import TrainingState

ROOT = Path(__file__).resolve().parents[2]


def up(scraped: Samples) -> dict[str, tuple[float, str]]:
    return {lbl["collector"]: (v, lbl["error"]) for lbl, v in scraped["trainguard_exporter_collector_up"]}


def test_driver_not_loaded_keeps_serving_and_says_why_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="trainguard.exporter.nvml")
    nvml = fake_nvml.make([fake_nvml.healthy_gpu(0)], init_error=fake_nvml.NVMLError_DriverNotLoaded)
    now = [0.0]
    backend = NVMLBackend(nvml, clock=lambda: now[0], retry_s=60.0)
    faults = Faults()
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal: 100 kB\nMemAvailable: 40 kB\n")
    e = Exporter(ExporterConfig(IDENTITY, gpus_per_pod=1), backend, HostReader(tmp_path), TrainingState(faults=faults),
                 faults, CollectorRegistry())  # fmt: skip
    for _ in range(3):
        now[0] += 30
        e.poll_hardware()
    e.ingest([{"type": "step", "step": 5, "loss": 1.0}])
    s = parse(e.render().decode())
    assert up(s)["gpu"] == (0, "NVML init failed: Driver Not Loaded")
    assert s["trainguard_train_step"][0][1] == 5 and s["trainguard_host_memory_used_ratio"][0][1] == 0.6
    assert "DCGM_FI_DEV_GPU_TEMP" not in s
    assert s["trainguard_exporter_info"][0][0]["driver_supported"] == "false"
    assert len([r for r in caplog.records if "Driver Not Loaded" in r.getMessage()]) == 1, "logged once"

    nvml.init_error = None  # the driver container came up
    now[0] += 60
    e.poll_hardware()
    s = parse(e.render().decode())
    assert up(s)["gpu"] == (1, "")
    assert s["DCGM_FI_DEV_GPU_TEMP"][0][1] == 66


def test_enumeration_failure_after_init_is_not_fatal_either() -> None:
    nvml = fake_nvml.make([fake_nvml.healthy_gpu(0)])

    def count() -> int:
        raise fake_nvml.NVMLError("Insufficient Permissions")

    nvml.nvmlDeviceGetCount = count
    backend = NVMLBackend(nvml)
    assert backend.error == "NVML device enumeration failed: Insufficient Permissions"
    assert backend.read() == []


def test_the_real_pynvml_without_a_driver() -> None:
    """This machine has nvidia-ml-py but no NVIDIA driver: the real library, the real failure."""
    backend = NVMLBackend()
    if backend.started:
        pytest.skip("NVML works here (a GPU machine)")
    assert backend.error.startswith("NVML init failed: "), backend.error
    assert backend.read() == []


def test_exporter_command_with_the_nvml_backend_serves_without_a_driver(tmp_path: Path) -> None:
    if NVMLBackend().started:
        pytest.skip("NVML works here (a GPU machine)")
    port = free_port()
    log = tmp_path / "exporter.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainguard.cli", "exporter", "--backend", "nvml", "--listen", f"127.0.0.1:{port}",
         "--namespace", "ml", "--pod", "p-0", "--node", "n1", "--training-job", "j", "--poll-interval", "0.1"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=ROOT,
    )  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc=proc)
        s = scrape(f"http://127.0.0.1:{port}")
        assert proc.poll() is None, log.read_text()
        value, error = up(s)["gpu"]
        assert value == 0 and error.startswith("NVML init failed"), error
        assert up(s)["training"] == (1, "")
        assert "trainguard_train_nonfinite_loss_total" in s
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert log.read_text().count("NVML init failed") == 1, log.read_text()
