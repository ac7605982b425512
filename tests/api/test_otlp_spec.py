"""spec.exporter.otlp: the OTLP push of the injected sidecar. Its defaults follow the exporter's flags, a
wrong endpoint or interval names the field and says what to write, and the CRD's CEL rule decides
endpoints as the model and the exporter's own --otlp-endpoint parser do."""

from __future__ import annotations

import argparse
import re
from typing import Any

import pytest

from tests.conftest import MONITOR, merged, monitor
from trainguard.api import InvalidInput, parse_object
from trainguard.api.crd import crds
from trainguard.api.monitor import OTLP_ENDPOINT_PATTERN
from trainguard.exporter.flags import add_arguments, otlp_endpoint

VM = "http://victoria-metrics:8428/opentelemetry/v1/metrics"
GOOD_ENDPOINTS = [
    VM,
    "https://otel-collector.monitoring.svc:4318/v1/metrics",
    "http://127.0.0.1:8428/opentelemetry/v1/metrics?extra_label=team=ml",
    "http://[fd00::1]:4318/v1/metrics",
    "https://mimir.example.com/otlp/v1/metrics",
    "http://vminsert:8480/insert/0/opentelemetry/v1/metrics",
]
BAD_ENDPOINTS = [
    "victoria-metrics:8428/opentelemetry/v1/metrics",  # no scheme
    "grpc://otel-collector:4317",  # OTLP/gRPC: the exporter speaks OTLP/HTTP
    "ftp://vm/x",
    "http://",
    "http:///v1/metrics",
    "http://user:s3cret@vm:8428/opentelemetry/v1/metrics",  # credentials in the pod spec
    "http://vm:8428/open telemetry",
    " http://vm:8428/v1/metrics",
    "",
]


def otlp(**fields: Any) -> dict[str, Any]:
    return merged(MONITOR, **{"spec.exporter": {"gpuBackend": "simulated", "otlp": fields}})


def problems(obj: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidInput) as exc:
        parse_object(obj)
    return {p.path: p.message for p in exc.value.problems}


def exporter_flags(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(list(argv))


def test_otlp_is_off_unless_set() -> None:
    assert monitor().spec.exporter.otlp is None


def test_the_interval_defaults_to_the_exporters_own() -> None:
    spec = monitor(**{"spec.exporter": {"otlp": {"endpoint": VM}}}).spec.exporter.otlp
    assert spec is not None
    assert spec.interval == "15s" and spec.headers_secret_ref is None
    assert spec.interval_seconds() == exporter_flags().otlp_interval == 15.0


def test_a_full_setting_parses() -> None:
    obj = parse_object(
        otlp(endpoint=VM, interval="1m30s", headersSecretRef={"name": "vm-auth", "key": "headers"})
    )
    spec = obj.spec.exporter.otlp  # type: ignore[union-attr]
    assert spec is not None and spec.interval_seconds() == 90
    assert spec.headers_secret_ref is not None
    assert (spec.headers_secret_ref.name, spec.headers_secret_ref.key) == ("vm-auth", "headers")


@pytest.mark.parametrize("endpoint", BAD_ENDPOINTS)
def test_a_bad_endpoint_names_the_field_and_the_fix(endpoint: str) -> None:
    found = problems(otlp(endpoint=endpoint))
    message = found["spec.exporter.otlp.endpoint"]
    assert "must be the full http:// or https:// URL" in message
    assert "http://victoria-metrics:8428/opentelemetry/v1/metrics" in message
    assert "headersSecretRef" in message  # where credentials go instead


@pytest.mark.parametrize("endpoint", GOOD_ENDPOINTS)
def test_a_good_endpoint_is_kept_as_written(endpoint: str) -> None:
    obj = parse_object(otlp(endpoint=endpoint))
    assert obj.spec.exporter.otlp.endpoint == endpoint  # type: ignore[union-attr]


def test_the_endpoint_is_required() -> None:
    assert problems(otlp(interval="30s")) == {"spec.exporter.otlp.endpoint": "required field is missing"}


@pytest.mark.parametrize(
    ("interval", "fragment"),
    [
        ("0s", "between 1s and 1h"),
        ("500ms", "between 1s and 1h"),
        ("2h", "between 1s and 1h"),
        ("15", "pattern"),
    ],
)
def test_a_bad_interval_names_the_field(interval: str, fragment: str) -> None:
    found = problems(otlp(endpoint=VM, interval=interval))
    assert fragment in found["spec.exporter.otlp.interval"]


def test_headers_come_only_from_a_secret_reference() -> None:
    """No inline headers: a token in the monitor would be in the pod spec and in every kubectl get."""
    assert (
        "unknown field"
        in problems(otlp(endpoint=VM, headers={"Authorization": "Bearer x"}))["spec.exporter.otlp.headers"]
    )
    assert problems(otlp(endpoint=VM, headersSecretRef={"name": "vm-auth"})) == {
        "spec.exporter.otlp.headersSecretRef.key": "required field is missing"
    }
    found = problems(otlp(endpoint=VM, headersSecretRef={"name": "VM_Auth", "key": "headers"}))
    assert "pattern" in found["spec.exporter.otlp.headersSecretRef.name"]


def _otlp_schema() -> dict[str, Any]:
    crd = crds()["trainguard.io_trainingjobmonitors.yaml"]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    schema: dict[str, Any] = spec["properties"]["exporter"]["properties"]["otlp"]
    return schema


def test_the_crd_checks_the_endpoint_with_the_models_pattern_and_message() -> None:
    schema = _otlp_schema()
    assert schema["required"] == ["endpoint"]
    (rule,) = schema["x-kubernetes-validations"]
    assert rule["rule"] == f"self.endpoint.matches(r'{OTLP_ENDPOINT_PATTERN}')"
    assert rule["fieldPath"] == ".endpoint"
    assert "must be the full http:// or https:// URL" in rule["message"]
    assert schema["properties"]["endpoint"]["maxLength"] == 2048
    assert schema["properties"]["interval"]["default"] == "15s"
    assert set(schema["properties"]["headersSecretRef"]["required"]) == {"name", "key"}


@pytest.mark.parametrize("endpoint", GOOD_ENDPOINTS + BAD_ENDPOINTS)
def test_the_crd_rule_decides_like_the_model(endpoint: str) -> None:
    """RE2 (the apiserver's CEL) and Python agree on the pattern's constructs: classes, groups, \\S."""
    assert bool(re.fullmatch(OTLP_ENDPOINT_PATTERN, endpoint)) == (endpoint in GOOD_ENDPOINTS)


@pytest.mark.parametrize("endpoint", GOOD_ENDPOINTS)
def test_every_endpoint_the_model_accepts_the_exporter_accepts(endpoint: str) -> None:
    """The sidecar would crash-loop on an endpoint its --otlp-endpoint parser refuses."""
    assert otlp_endpoint(endpoint) == endpoint


def test_a_refused_endpoints_password_is_not_echoed() -> None:
    """`trainguard validate` and the operator log the refusal; the password must not be in it."""
    msg = problems(otlp(endpoint="http://user:s3cret@vm:8428/opentelemetry/v1/metrics"))
    text = " ".join(msg.values())
    assert "headersSecretRef" in text
    assert "s3cret" not in text and "http://***@vm:8428" in text
