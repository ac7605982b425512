"""On a node shared by two jobs, each sidecar exports only its own pod's GPUs: otherwise each job is
paged for the other's. Until the pod's GPUs are known, no GPU series at all."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.exporter import fake_nvml
from tests.exporter.nvml_exporter import IDENTITY, RecordingSender, samples
from trainguard.exporter.app import Exporter, ExporterConfig
from trainguard.exporter.assignment import Assignment, resolve
from trainguard.exporter.faults import Faults
from trainguard.exporter.nvml import NVMLBackend
from trainguard.exporter.readings import GPUDevice
from trainguard.exporter.training import TrainingState

NODE = [GPUDevice(i, f"GPU-fake-{i}", "H100") for i in range(4)]


@pytest.mark.parametrize(
    ("hints", "expected"),
    [
        ({"flag": "GPU-fake-1,GPU-FAKE-2"}, Assignment(frozenset({1, 2}), "flag")),
        ({"flag": "3"}, Assignment(frozenset({3}), "flag")),
        ({"visible": "GPU-fake-0,GPU-fake-3"}, Assignment(frozenset({0, 3}), "sdk")),
        ({"visible": "1,2"}, Assignment(frozenset({1, 2}), "sdk")),
        ({"flag": "0", "visible": "1"}, Assignment(frozenset({0}), "flag")),
        ({"gpus_per_pod": 4}, Assignment(frozenset({0, 1, 2, 3}), "whole-node")),
        ({"visible": "GPU-fake-1", "gpus_per_pod": 4}, Assignment(frozenset({1}), "sdk")),
    ],
)
def test_the_pods_gpus_come_from_the_flag_the_sdk_or_a_whole_node(
    hints: dict[str, Any], expected: Assignment
) -> None:
    assert resolve(NODE, **hints) == expected


@pytest.mark.parametrize("visible", [None, "", "all", "none", "void", "ALL"])
def test_non_specific_visible_devices_leave_the_gpus_unknown(visible: str | None) -> None:
    a = resolve(NODE, visible=visible, gpus_per_pod=2)
    assert a.indices is None and a.source == "unknown"
    assert "--gpus-per-pod 2 is not the node's 4 GPUs" in a.reason


def test_ids_matching_no_gpu_leave_them_unknown_and_say_which() -> None:
    a = resolve(NODE, flag="GPU-other")
    assert a.indices is None and "GPU-other" in a.reason
    partial = resolve(NODE, visible="GPU-fake-1,GPU-gone")
    assert partial.indices == frozenset({1}) and "GPU-gone" in partial.reason


def shared_node(**config: Any) -> tuple[Any, Exporter, RecordingSender]:
    nvml = fake_nvml.make([fake_nvml.healthy_gpu(i) for i in range(4)])
    faults, sender = Faults(), RecordingSender()
    e = Exporter(ExporterConfig(IDENTITY, **config), NVMLBackend(nvml), None, TrainingState(faults=faults), faults,
                 CollectorRegistry(), fastpath=sender)  # type: ignore[arg-type]  # fmt: skip
    e.poll_hardware()
    return nvml, e, sender


def gpus_in(s: dict[str, list[tuple[dict[str, str], float]]]) -> set[str]:
    return {lbl["gpu"] for name, rows in s.items() if name.startswith("DCGM_") for lbl, _ in rows}


def test_unknown_gpus_export_no_gpu_series_and_ignore_other_gpus_xids() -> None:
    nvml, e, sender = shared_node(gpus_per_pod=2)
    e.render()
    nvml.xid(3, 79)  # another job's GPU
    e.poll_hardware()
    s = samples(e)
    assert gpus_in(s) == set() and "trainguard_gpu_lost" not in s
    assert s["trainguard_exporter_gpus_assigned"] == [(IDENTITY | {"source": "unknown"}, 0)]
    assert sender.sent == []


def test_the_sdk_hello_names_the_pods_gpus() -> None:
    nvml, e, sender = shared_node(gpus_per_pod=2)
    e.ingest([{"type": "hello", "started_at": 1.0, "pid": 7, "visible_devices": "GPU-fake-1,GPU-fake-2"}])
    e.poll_hardware()
    e.render()
    nvml.xid(3, 79)  # the other job's GPU: not ours to report
    nvml.xid(2, 48)
    e.poll_hardware()
    s = samples(e)
    assert gpus_in(s) == {"1", "2"}
    assert s["trainguard_exporter_gpus_assigned"] == [(IDENTITY | {"source": "sdk"}, 2)]
    assert sender.alertnames() == [("GPUCriticalXid", "2")]


def test_the_flag_names_the_pods_gpus_and_tokens_are_per_gpu_of_the_pod() -> None:
    _, e, _ = shared_node(gpu_ids="0")
    e.ingest([{"type": "step", "step": 1, "tokens": 1000, "step_time_s": 1.0}])
    s = samples(e)
    assert gpus_in(s) == {"0"}
    assert s["trainguard_train_tokens_per_second_per_gpu"][0][1] == 1000


def test_a_pod_with_every_gpu_of_the_node_needs_no_hint() -> None:
    _, e, _ = shared_node(gpus_per_pod=4)
    assert gpus_in(samples(e)) == {"0", "1", "2", "3"}
