"""A GPU that fell off the bus before the exporter started: NVML answers GPU_IS_LOST when asked for
its handle. That must cost that GPU alone, reported as lost (GPULost fires), never NVML for the
whole node; and a GPU that refuses XID events must not cost the others theirs."""

from __future__ import annotations

import pytest

from tests.exporter import fake_nvml
from tests.exporter.nvml_exporter import RecordingSender, exporter_for, samples
from trainguard.exporter.nvml import NVMLBackend


def lost_at_start(i: int) -> dict[str, object]:
    return fake_nvml.healthy_gpu(i) | {"handle": fake_nvml.NVMLError_GpuIsLost}


def test_the_fake_refuses_a_lost_gpus_handle_as_nvml_does() -> None:
    nvml = fake_nvml.make([fake_nvml.healthy_gpu(0), lost_at_start(1)])
    nvml.nvmlInit()
    nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(fake_nvml.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetHandleByIndex(1)


def test_a_gpu_lost_at_start_is_exported_as_lost_and_the_others_are_read() -> None:
    sender = RecordingSender()
    e = exporter_for(fake_nvml.make([fake_nvml.healthy_gpu(0), lost_at_start(1), fake_nvml.healthy_gpu(2)]),
                     sender=sender)  # fmt: skip
    assert e.backend is not None and e.backend.error == "", "NVML still works for the node"
    s = samples(e)
    assert {lbl["gpu"]: v for lbl, v in s["trainguard_gpu_lost"]} == {"0": 0, "1": 1, "2": 0}
    assert [lbl["gpu"] for lbl, _ in s["DCGM_FI_DEV_GPU_TEMP"]] == ["0", "2"]
    assert {lbl["gpu"] for lbl, _ in s["DCGM_FI_DEV_XID_ERRORS"]} == {"0", "2"}, "no made-up zero for GPU 1"
    up = {lbl["collector"]: v for lbl, v in s["trainguard_exporter_collector_up"]}
    assert up["gpu"] == 1
    assert sender.alertnames() == [("GPULost", "1")]


def test_xids_of_the_other_gpus_still_arrive_when_one_is_lost_at_start() -> None:
    nvml = fake_nvml.make([lost_at_start(0), fake_nvml.healthy_gpu(1)])
    e = exporter_for(nvml)
    nvml.xid(1, 48)
    e.poll_hardware()
    assert {lbl["gpu"]: v for lbl, v in samples(e)["DCGM_FI_DEV_XID_ERRORS"]} == {"1": 48}


def test_one_gpu_refusing_xid_events_costs_only_its_own() -> None:
    refusing = fake_nvml.healthy_gpu(0) | {"events": fake_nvml.NVMLError_NotSupported}
    nvml = fake_nvml.make([refusing, fake_nvml.healthy_gpu(1)])
    e = exporter_for(nvml)
    assert nvml.registered == {1}
    nvml.xid(1, 79)
    e.poll_hardware()
    assert {lbl["gpu"]: v for lbl, v in samples(e)["DCGM_FI_DEV_XID_ERRORS"]} == {"0": 0, "1": 79}


def test_a_gpu_whose_handle_comes_back_is_read_again() -> None:
    gpus = [fake_nvml.healthy_gpu(0), lost_at_start(1)]
    nvml = fake_nvml.make(gpus)
    backend = NVMLBackend(nvml)
    assert [r.lost for r in backend.read()] == [False, True]
    del gpus[1]["handle"]  # reset and back on the bus
    readings = backend.read()
    assert [(r.index, r.lost, r.uuid) for r in readings] == [
        (0, False, "GPU-fake-0"),
        (1, False, "GPU-fake-1"),
    ]
    assert nvml.registered == {0, 1}, "its XIDs are watched from then on"
