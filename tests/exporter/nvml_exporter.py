"""An exporter in this process over the fake NVML (tests/exporter/fake_nvml.py), polled and rendered
without a server, and a fast-path sender that records what the detectors send."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from tests.exposition import Samples, parse
from trainguard.exporter.app import Exporter, ExporterConfig
from trainguard.exporter.faults import Faults
from trainguard.exporter.nvml import NVMLBackend
from trainguard.exporter.training import TrainingState

IDENTITY = {"namespace": "ml", "pod": "p-0", "node": "n1", "training_job": "j"}


def samples(exporter: Exporter) -> Samples:
    """What the exporter would answer a scrape with now."""
    return parse(exporter.render().decode())


class RecordingSender:
    """Stands in for FastPathSender: keeps what the detectors send."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.results: dict[str, int] = {}

    def send(self, ev: dict[str, Any]) -> bool:
        self.sent.append(ev)
        return True

    def alertnames(self) -> list[tuple[str, str]]:
        return [(e["labels"]["alertname"], e["labels"].get("gpu", "")) for e in self.sent]


def exporter_for(
    nvml: Any, timeout: float = 3.0, sender: RecordingSender | None = None, **config: Any
) -> Exporter:
    """An exporter over `nvml`; by default the pod owns the whole node (--gpus-per-pod = all its GPUs)."""
    backend = NVMLBackend(nvml)
    faults = Faults()
    config.setdefault("gpus_per_pod", nvml.nvmlDeviceGetCount())
    e = Exporter(ExporterConfig(IDENTITY, gpu_timeout_s=timeout, **config), backend, None,
                 TrainingState(faults=faults), faults, CollectorRegistry(), fastpath=sender)  # type: ignore[arg-type]  # fmt: skip
    e.poll_hardware()
    return e
