"""The xid-79 fault drills what a real XID 79 does: the GPU falls off the bus, so it is lost (NVML
answers GPU_IS_LOST for it) and keeps only the XID that took it down. A drill must drive both
GPULost and GPUCriticalXid, as the real fault does."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from tests.exporter.nvml_exporter import IDENTITY, RecordingSender
from tests.exporter.running import running_exporter
from trainguard.exporter.app import Exporter, ExporterConfig
from trainguard.exporter.faults import Faults
from trainguard.exporter.simulated import SimulatedBackend
from trainguard.exporter.training import TrainingState


def test_the_xid_79_drill_takes_the_gpu_off_the_bus() -> None:
    with running_exporter("--backend", "simulated", "--gpus", "2", "--enable-fault-injection") as exp:
        exp.post("/v1/faults", {"fault": "xid-79", "gpu": 1})
        s = exp.scrape()
        exp.delete("/v1/faults")
        cleared = exp.scrape()
    assert {lbl["gpu"]: v for lbl, v in s["trainguard_gpu_lost"]} == {"0": 0, "1": 1}
    assert {lbl["gpu"]: v for lbl, v in s["DCGM_FI_DEV_XID_ERRORS"]}["1"] == 79, "what took it down"
    assert [lbl["gpu"] for lbl, _ in s["DCGM_FI_DEV_GPU_TEMP"]] == ["0"], "a lost GPU answers nothing else"
    assert {lbl["gpu"]: v for lbl, v in cleared["trainguard_gpu_lost"]} == {"0": 0, "1": 0}


def test_the_xid_79_drill_posts_gpu_lost_and_critical_xid_on_the_fast_path() -> None:
    faults, sender = Faults(), RecordingSender()
    e = Exporter(ExporterConfig(IDENTITY, backend_name="simulated", filter_gpus=False), SimulatedBackend(gpus=2),
                 None, TrainingState(faults=faults), faults, CollectorRegistry(), fastpath=sender)  # type: ignore[arg-type]  # fmt: skip
    e.poll_hardware()
    e.render()
    faults.add("xid-79", 1)
    e.render()
    assert sorted(sender.alertnames()) == [("GPUCriticalXid", "1"), ("GPULost", "1")]
