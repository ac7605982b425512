"""The seam between the sidecar the webhook injects and the exporter that runs in it: the rendered
command line, started as a real process, must serve /metrics for every gpuBackend.

Here there is no GPU and no NVIDIA driver, which is exactly the case of a node where NVML cannot start:
the nvml sidecar must keep serving its host and training series and say why the GPU ones are missing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import monitor
from tests.exposition import metric_families
from tests.processes import free_port, wait_http
from trainguard.render.sidecar import exporter_args


def _local(args: list[str], port: int, socket: Path) -> list[str]:
    """The rendered args with the pod's listen address and socket moved to this machine."""
    out = list(args)
    out[out.index("--listen") + 1] = f"127.0.0.1:{port}"
    out[out.index("--sdk-socket") + 1] = str(socket)
    return out


@pytest.mark.parametrize("backend", ["nvml", "dcgm", "simulated"])
def test_the_rendered_sidecar_command_serves_metrics(backend: str, tmp_path: Path) -> None:
    args = exporter_args(monitor(**{"spec.exporter.gpuBackend": backend}))
    port = free_port()
    log = (tmp_path / "exporter.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainguard.cli", *_local(args, port, tmp_path / "sdk.sock")],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz", timeout=20, proc=proc)
        except (RuntimeError, TimeoutError) as exc:
            raise AssertionError(f"{exc}:\n{(tmp_path / 'exporter.log').read_text()}") from None
        families = metric_families(f"http://127.0.0.1:{port}")
        info = families["trainguard_exporter_info"].samples[0].labels
        assert info["backend"] == {"dcgm": "none"}.get(backend, backend)
        # training series exist whatever the GPU backend: the counters start at zero
        assert "trainguard_train_nonfinite_loss" in families
        temp = families.get("DCGM_FI_DEV_GPU_TEMP")
        gpu_series = temp.samples if temp is not None else []
        if backend == "simulated":
            assert len(gpu_series) == 8
        else:
            assert gpu_series == [], "no driver here (nvml), or dcgm-exporter has them (dcgm)"
        assert proc.poll() is None, "still running"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
