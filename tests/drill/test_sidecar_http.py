"""The drill's sidecar client against a real exporter (in this process, simulated GPUs): it sees
whether injection is on, injects, reads the faults back, clears them and reads the training step.
`auto` access falls back to the pod IP when the apiserver's proxy does not answer (here: no apiserver)."""

from __future__ import annotations

import urllib.parse
from typing import Any

from kubernetes import client

from tests.exporter.running import running_exporter
from trainguard.drill.clients import SidecarHTTP
from trainguard.drill.scenarios import PodView
from trainguard.kube import Kube


def pod_of(url: str) -> PodView:
    parts = urllib.parse.urlsplit(url)
    return PodView("llama-0", "gpu-node-1", str(parts.hostname), int(parts.port or 0))


def no_apiserver() -> Kube:
    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # the discard port: nothing answers
    cfg.retries = False
    return Kube(client.ApiClient(cfg))


def test_inject_read_clear_and_step_through_the_pod_ip() -> None:
    with running_exporter("--backend", "simulated", "--enable-fault-injection") as run:
        pod = pod_of(run.url)
        sidecars = SidecarHTTP(no_apiserver(), "ml", "auto")
        assert sidecars.injection_on(pod)
        assert sidecars.modes == {"llama-0": "direct"}
        sidecars.inject(pod, {"fault": "xid-79", "gpu": 0})
        sidecars.inject(pod, {"fault": "nan-loss"})
        active: dict[str, Any] = sidecars.active(pod)
        assert active == {"xid-79": [0], "nan-loss": [-1]}
        sidecars.clear(pod)
        assert sidecars.active(pod) == {}
        run.post("/v1/report", {"events": [{"type": "step", "step": 42, "loss": 1.0}]})
        run.exporter.render()
        assert sidecars.step(pod) == 42


def test_a_sidecar_without_injection_says_so_and_a_missing_one_is_not_injectable() -> None:
    with running_exporter("--backend", "simulated") as run:
        sidecars = SidecarHTTP(no_apiserver(), "ml", "direct")
        assert not sidecars.injection_on(pod_of(run.url))
    gone = PodView("llama-1", "gpu-node-2", "127.0.0.1", 9)
    assert not SidecarHTTP(no_apiserver(), "ml", "auto").injection_on(gone)
