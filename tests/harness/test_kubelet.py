"""The e2e pod runner's kubelet rules (e2e/kubelet.py): $(VAR) expansion, service links, the downward
API's fields, image references, and what it refuses; and the pod network's stand-in
(e2e/podnetwork/sitecustomize.py) in a real Python process. No apiserver."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from e2e.kubelet import POD_NETWORK, Kubelet, Unsupported, expand, field_value, repository, service_links

POD: dict[str, Any] = {
    "metadata": {"name": "op-1", "namespace": "tg", "uid": "u-1", "labels": {"app": "x"}, "annotations": {"a/b": "c"}},
    "spec": {"nodeName": "gpu-node-0", "serviceAccountName": "sa"},
    "status": {"podIP": "127.9.0.1", "hostIP": "127.0.0.1", "podIPs": [{"ip": "127.9.0.1"}]},
}  # fmt: skip


def test_expansion_is_the_kubelets() -> None:
    env = {"A": "1", "B": "two"}
    assert expand("$(A)-$(B)", env) == "1-two"
    assert expand("$(MISSING)", env) == "$(MISSING)", "an undefined reference stays as written"
    assert expand("$$(A)", env) == "$(A)", "$$ escapes"
    assert expand("cost $5", env) == "cost $5"


def test_service_links_are_the_kubelets_variables() -> None:
    svc = {"metadata": {"name": "trainguard-operator"},
           "spec": {"clusterIP": "127.9.128.7", "ports": [{"name": "webhook", "port": 443, "protocol": "TCP"},
                                                           {"name": "metrics", "port": 8081}]}}  # fmt: skip
    headless = {
        "metadata": {"name": "prometheus-operated"},
        "spec": {"clusterIP": "None", "ports": [{"port": 9090}]},
    }
    links = service_links([svc, headless])
    assert links == {
        "TRAINGUARD_OPERATOR_SERVICE_HOST": "127.9.128.7",
        "TRAINGUARD_OPERATOR_SERVICE_PORT": "443",
        "TRAINGUARD_OPERATOR_SERVICE_PORT_WEBHOOK": "443",
        "TRAINGUARD_OPERATOR_SERVICE_PORT_METRICS": "8081",
        "TRAINGUARD_OPERATOR_PORT": "tcp://127.9.128.7:443",
        "TRAINGUARD_OPERATOR_PORT_443_TCP": "tcp://127.9.128.7:443",
        "TRAINGUARD_OPERATOR_PORT_443_TCP_PROTO": "tcp",
        "TRAINGUARD_OPERATOR_PORT_443_TCP_PORT": "443",
        "TRAINGUARD_OPERATOR_PORT_443_TCP_ADDR": "127.9.128.7",
        "TRAINGUARD_OPERATOR_PORT_8081_TCP": "tcp://127.9.128.7:8081",
        "TRAINGUARD_OPERATOR_PORT_8081_TCP_PROTO": "tcp",
        "TRAINGUARD_OPERATOR_PORT_8081_TCP_PORT": "8081",
        "TRAINGUARD_OPERATOR_PORT_8081_TCP_ADDR": "127.9.128.7",
    }, "a headless Service has none"


@pytest.mark.parametrize(
    ("path", "value"),
    [("metadata.name", "op-1"), ("metadata.namespace", "tg"), ("metadata.uid", "u-1"),
     ("metadata.labels['app']", "x"), ("metadata.annotations['a/b']", "c"), ("spec.nodeName", "gpu-node-0"),
     ("spec.serviceAccountName", "sa"), ("status.podIP", "127.9.0.1"), ("status.podIPs", "127.9.0.1"),
     ("status.hostIP", "127.0.0.1")],
)  # fmt: skip
def test_field_refs(path: str, value: str) -> None:
    assert field_value(POD, path) == value


def test_an_unknown_field_ref_is_refused_by_name() -> None:
    with pytest.raises(Unsupported, match=r"metadata\.generation"):
        field_value(POD, "metadata.generation")


@pytest.mark.parametrize(
    "image",
    ["ghcr.io/trainguard/trainguard:0.1.0", "ghcr.io/trainguard/trainguard@sha256:" + "ab" * 32,
     "ghcr.io/trainguard/trainguard:0.1.0@sha256:" + "ab" * 32, "ghcr.io/trainguard/trainguard"],
)  # fmt: skip
def test_an_image_is_known_by_its_repository(image: str) -> None:
    assert repository(image) == "ghcr.io/trainguard/trainguard"


def test_a_registry_port_is_not_a_tag() -> None:
    assert repository("localhost:5000/trainguard") == "localhost:5000/trainguard"


def test_what_the_runner_does_not_do_is_refused_before_anything_runs(tmp_path: Path) -> None:
    kubelet = Kubelet.__new__(Kubelet)  # no apiserver: these are refused before it is asked anything
    kubelet.workdir = tmp_path
    with pytest.raises(Unsupported, match="init containers"):
        kubelet.start({**POD, "spec": {**POD["spec"], "initContainers": [{"name": "i"}], "containers": []}})
    with pytest.raises(Unsupported, match="volume data: hostPath volumes"):
        kubelet._volume(POD, {"name": "data", "hostPath": {"path": "/data"}}, tmp_path / "data")
    with pytest.raises(Unsupported, match="projected source clusterTrustBundle"):
        kubelet._volume(
            POD, {"name": "b", "projected": {"sources": [{"clusterTrustBundle": {}}]}}, tmp_path / "b"
        )
    with pytest.raises(Unsupported, match=r"env LIMIT valueFrom \['resourceFieldRef'\]"):
        kubelet._env_value(POD, {"name": "LIMIT", "valueFrom": {"resourceFieldRef": {}}}, {}, "pod tg/op-1")


def _bound(extra_env: dict[str, str], host: str) -> str:
    code = f"import socket; s = socket.socket(); s.bind(({host!r}, 0)); print(s.getsockname()[0])"
    env = {k: v for k, v in os.environ.items() if k not in ("E2E_POD_IP", "PYTHONPATH")}
    env |= {"PYTHONPATH": str(POD_NETWORK)} | extra_env
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_a_wildcard_listen_in_the_pod_is_on_the_pods_ip() -> None:
    assert _bound({"E2E_POD_IP": "127.0.0.77"}, "0.0.0.0") == "127.0.0.77"
    assert _bound({"E2E_POD_IP": "127.0.0.77"}, "") == "127.0.0.77"
    assert _bound({"E2E_POD_IP": "127.0.0.77"}, "127.0.0.1") == "127.0.0.1", "an address named is kept"
    assert _bound({}, "0.0.0.0") == "0.0.0.0", "outside a pod: untouched"
