"""spec.exporter.otlp on the injected sidecar: the endpoint and interval in its env and args, the headers
only as a reference to the Secret. The seam: the rendered container's args and env, resolved as the
kubelet resolves them, go through the exporter's real flag parser and start_otlp, and a push arrives at
the endpoint with the Secret's headers."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

import pytest

from tests.conftest import monitor
from tests.exporter.running import running_exporter
from tests.exporter.test_otlp_mapping import otlp_receiver
from trainguard import IMAGE
from trainguard.exporter import otlp
from trainguard.exporter.flags import add_arguments
from trainguard.exporter.main import start_otlp
from trainguard.render.sidecar import EXPORTER, OTLP_ENDPOINT_ENV, OTLP_HEADERS_ENV, inject

VM = "http://victoria-metrics:8428/opentelemetry/v1/metrics"
SECRET_REF = {"name": "vm-auth", "key": "otlp-headers"}
POD: dict[str, Any] = {
    "metadata": {"name": "llama-pretrain-0-abcde", "namespace": "ml", "labels": {"app": "llama-pretrain"}},
    "spec": {
        "nodeName": "gpu-node-1",
        "containers": [{"name": "trainer", "image": "t:1", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
    },
}


def sidecar(otlp_spec: dict[str, Any] | None, *, native: bool = True) -> dict[str, Any]:
    changes = {"spec.exporter": {"gpuBackend": "simulated", **({"otlp": otlp_spec} if otlp_spec else {})}}
    out = inject(POD, monitor(**changes), fallback_trace="f" * 32, receiver_url="https://op:8443/v1/events", sidecar_image=IMAGE,
                 native_sidecar=native)  # fmt: skip
    assert out is not None
    containers = out["spec"]["initContainers" if native else "containers"]
    (exporter,) = [c for c in containers if c["name"] == EXPORTER]
    return exporter


def env_entries(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container["env"]}


def kubelet_env(
    container: dict[str, Any], pod: dict[str, Any], secrets: dict[str, dict[str, str]]
) -> dict[str, str]:
    """The container's environment as the kubelet builds it: values, the downward API, and secretKeyRef
    from `secrets` (name -> data), an optional reference to a missing Secret or key left out."""
    fields = {
        "metadata.namespace": pod["metadata"]["namespace"],
        "metadata.name": pod["metadata"]["name"],
        "spec.nodeName": pod["spec"]["nodeName"],
    }
    out: dict[str, str] = {}
    for entry in container["env"]:
        if "value" in entry:
            out[entry["name"]] = entry["value"]
        elif "fieldRef" in entry["valueFrom"]:
            out[entry["name"]] = fields[entry["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            ref = entry["valueFrom"]["secretKeyRef"]
            value = secrets.get(ref["name"], {}).get(ref["key"])
            if value is None:
                assert ref.get("optional"), (
                    f"{entry['name']}: a missing Secret would keep the pod from starting"
                )
                continue
            out[entry["name"]] = value
    return out


def parsed(
    container: dict[str, Any], monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> argparse.Namespace:
    """The exporter's flags as the sidecar process parses them: its args (after the `exporter`
    subcommand) with exactly the container's environment for the defaults."""
    for name in [*env, OTLP_ENDPOINT_ENV, OTLP_HEADERS_ENV, "OTEL_EXPORTER_OTLP_METRICS_HEADERS"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert container["args"][0] == "exporter"
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(container["args"][1:])


def test_no_otlp_setting_no_otlp_env_or_flag() -> None:
    c = sidecar(None)
    assert not {OTLP_ENDPOINT_ENV, OTLP_HEADERS_ENV} & set(env_entries(c))
    assert not any(a.startswith("--otlp") for a in c["args"])


@pytest.mark.parametrize("native", [True, False])
def test_the_endpoint_interval_and_secret_reference_are_injected(native: bool) -> None:
    c = sidecar({"endpoint": VM, "interval": "30s", "headersSecretRef": SECRET_REF}, native=native)
    env = env_entries(c)
    assert env[OTLP_ENDPOINT_ENV] == {"name": OTLP_ENDPOINT_ENV, "value": VM}
    assert env[OTLP_HEADERS_ENV] == {
        "name": OTLP_HEADERS_ENV,
        "valueFrom": {"secretKeyRef": {"name": "vm-auth", "key": "otlp-headers", "optional": True}},
    }
    assert c["args"][c["args"].index("--otlp-interval") + 1] == "30"
    assert "--otlp-header" not in c["args"] and "--otlp-endpoint" not in c["args"]


def test_without_a_secret_reference_no_headers_env() -> None:
    c = sidecar({"endpoint": VM})
    assert OTLP_HEADERS_ENV not in env_entries(c)
    assert c["args"][c["args"].index("--otlp-interval") + 1] == "15"


@pytest.mark.parametrize(
    ("interval", "seconds"), [("15s", 15.0), ("1m30s", 90.0), ("1500ms", 1.5), ("1h", 3600.0)]
)
def test_the_rendered_flags_parse_into_the_exporters_otlp_settings(
    interval: str, seconds: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = sidecar({"endpoint": VM, "interval": interval, "headersSecretRef": SECRET_REF})
    env = kubelet_env(c, POD, {"vm-auth": {"otlp-headers": "Authorization=Bearer%20s3cret"}})
    args = parsed(c, monkeypatch, env)
    assert (args.otlp_endpoint, args.otlp_interval, args.otlp_header) == (VM, seconds, None)
    assert env[OTLP_HEADERS_ENV] == "Authorization=Bearer%20s3cret"  # for the SDK, not the flags


def test_a_missing_secret_leaves_the_pod_startable_and_the_push_on(monkeypatch: pytest.MonkeyPatch) -> None:
    c = sidecar({"endpoint": VM, "headersSecretRef": SECRET_REF})
    env = kubelet_env(c, POD, {})
    assert OTLP_HEADERS_ENV not in env
    assert parsed(c, monkeypatch, env).otlp_endpoint == VM


def test_the_injected_sidecar_pushes_with_the_secrets_headers(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Rendered pod -> kubelet env -> the exporter's parser -> start_otlp -> a real OTLP/HTTP request at
    the monitor's endpoint carrying the Secret's headers; the token is in neither the pod nor the log."""
    token = "s3cret-t0ken"
    with otlp_receiver() as (addr, got):
        endpoint = f"http://{addr}/opentelemetry/v1/metrics"
        c = sidecar({"endpoint": endpoint, "interval": "1h", "headersSecretRef": SECRET_REF})
        assert token not in json.dumps(c)
        env = kubelet_env(
            c, POD, {"vm-auth": {"otlp-headers": f"Authorization=Bearer%20{token},X-Scope-OrgID=ml"}}
        )
        args = parsed(c, monkeypatch, env)
        with running_exporter("--backend", "simulated", "--no-host") as exp:
            with caplog.at_level(logging.INFO, logger="trainguard.exporter"):
                pusher = start_otlp(otlp, args, exp.exporter)
            pusher.stop()  # the final push; the interval (1h) never elapses
    assert f"{endpoint} every 3600s" in caplog.text
    assert token not in caplog.text
    ((path, headers, _body),) = got
    assert path == "/opentelemetry/v1/metrics"
    assert headers["authorization"] == f"Bearer {token}"
    assert headers["x-scope-orgid"] == "ml"
    assert headers["content-type"] == "application/x-protobuf"
