"""nvml-down: NVML stops answering, so no GPU series is exported while host and training series keep
coming. This is what MonitoringDataMissing must catch (a pod with GPUs and no GPU series)."""

from __future__ import annotations

import time

from tests.exporter.running import running_exporter


def test_nvml_down_removes_every_gpu_series_and_nothing_else() -> None:
    with running_exporter("--backend", "simulated", "--gpus", "2", "--enable-fault-injection") as exp:
        exp.post("/v1/report", {"events": [{"type": "hello", "started_at": time.time() - 60, "pid": 4242}]})
        before = exp.scrape()
        assert len(before["DCGM_FI_DEV_GPU_UTIL"]) == 2
        exp.post("/v1/faults", {"fault": "nvml-down"})
        exp.exporter.poll_hardware()
        during = exp.scrape()
        assert not [n for n, samples in during.items() if n.startswith("DCGM_FI_") and samples]
        assert during["trainguard_exporter_gpus_assigned"][0][1] == 2, "the pod still has its GPUs"
        assert during["trainguard_train_start_timestamp_seconds"], "training series keep coming"
        exp.delete("/v1/faults")
        exp.exporter.poll_hardware()
        assert len(exp.scrape()["DCGM_FI_DEV_GPU_UTIL"]) == 2
