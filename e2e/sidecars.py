"""A real exporter standing in for a pod's sidecar container: the fake kubelet runs no container, so
the operator's calls to a pod's sidecar port (control, the GPU faults it saw) reach nothing unless a test
serves the exporter there itself, on the pod's IP and the monitor's port, as the container would."""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainguard.exporter.app import Exporter
from trainguard.exporter.flags import add_arguments
from trainguard.exporter.main import build
from trainguard.exporter.server import serve

SIDECAR_PORT = 9400


@contextlib.contextmanager
def sidecar_that_saw(
    pod: Any, token: str, fault: str = "xid-79", gpu: int = 3, *, cleared: bool = False
) -> Iterator[Exporter]:
    """The exporter of `pod` (a kubernetes V1Pod) serving its port with `token` (the monitor's events
    token), having detected `fault` (an exporter fault-injection kind) on GPU `gpu` before it serves.
    `cleared`: the fault has cleared since (a transient XID): GET /v1/hardware still lists it (it keeps an
    hour), while its /metrics show a healthy GPU, so a Prometheus scraping it raises no alert of its own.
    Yields the exporter: a test may hand it an SDK report (`exporter.training.ingest`) as the trainer would."""
    with tempfile.TemporaryDirectory() as tmp:
        token_file = Path(tmp) / "token"
        token_file.write_text(token)
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        args = parser.parse_args([
            "--namespace", pod.metadata.namespace, "--pod", pod.metadata.name, "--node", pod.spec.node_name,
            "--training-job", "llama-pretrain", "--backend", "simulated", "--gpus", "8", "--no-host",
        ])  # fmt: skip
        exporter = build(args)
        exporter.start()
        servers = []
        try:
            exporter.render()
            exporter.add_fault(fault, gpu)
            exporter.render()  # detected: kept for GET /v1/hardware
            if cleared:
                exporter.faults.clear()
                exporter.render()
            servers = serve(exporter, pod.status.pod_ip, SIDECAR_PORT, token_file=str(token_file))
            yield exporter
        finally:
            for s in servers:
                s.shutdown()
                s.server_close()
            exporter.stop()
