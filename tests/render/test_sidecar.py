"""Sidecar injection as a pure function: what is added, and that it is added once."""

from __future__ import annotations

import argparse
import copy
from typing import Any

import pytest

from tests.conftest import monitor
from trainguard.exporter.flags import add_arguments
from trainguard.render.sidecar import (
    EXPORTER,
    exporter_args,
    inject,
    is_injected,
    matching_monitor,
    pod_gpus,
    supports_native_sidecar,
    trace_id,
)
from trainguard.render.webhook import mutating_webhook_configuration

IMAGE = "registry.example/trainguard:1.2.3"
"""The operator's --sidecar-image in these tests (not trainguard.IMAGE, so a test sees which one won)."""

POD: dict[str, Any] = {
    "metadata": {
        "namespace": "ml",
        "generateName": "llama-pretrain-0-",
        "labels": {"app": "llama-pretrain"},
        "ownerReferences": [
            {"kind": "Job", "name": "llama-pretrain", "uid": "1234-abcd", "controller": True}
        ],
    },
    "spec": {
        "containers": [
            {"name": "trainer", "image": "t:1", "env": [{"name": "A", "value": "1"}]},
            {"name": "shipper", "image": "s:1"},
        ],
        "initContainers": [{"name": "fetch", "image": "f:1"}],
    },
}


def injected(pod: dict[str, Any] = POD, **changes: Any) -> dict[str, Any]:
    out = inject(
        pod,
        monitor(**changes),
        fallback_trace="f" * 32,
        receiver_url="https://op:8443/v1/events",
        sidecar_image=IMAGE,
    )
    assert out is not None
    return out


def applied(pod: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(pod)
    result["metadata"]["annotations"] = changes["metadata"]["annotations"]
    result["spec"].update(changes["spec"])
    return result


def test_exporter_is_a_native_sidecar_with_downward_api_env() -> None:
    spec = injected()["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["fetch", EXPORTER]
    exporter = spec["initContainers"][-1]
    assert exporter["restartPolicy"] == "Always"
    env = {e["name"]: e for e in exporter["env"]}
    assert env["TRAINGUARD_POD"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["TRAINGUARD_NODE"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["TRAINGUARD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["TRAINGUARD_TRAINING_JOB"]["value"] == "llama-pretrain"
    assert env["TRAINGUARD_FASTPATH_TOKEN_FILE"]["value"].endswith("/token")
    assert env["TRAINGUARD_FASTPATH_IDENTITY_FILE"]["value"] == "/var/run/trainguard-identity/token"
    assert exporter["ports"] == [{"name": "tg-metrics", "containerPort": 9400, "protocol": "TCP"}]
    sc = exporter["securityContext"]
    assert sc["runAsNonRoot"] and not sc["allowPrivilegeEscalation"] and sc["readOnlyRootFilesystem"]
    assert exporter["args"][:3] == ["exporter", "--backend", "simulated"]


def test_training_containers_get_the_sdk_endpoint_and_keep_their_env() -> None:
    containers = injected()["spec"]["containers"]
    assert [c["name"] for c in containers] == ["trainer", "shipper"]
    env = {e["name"]: e.get("value") for e in containers[0]["env"]}
    assert env["A"] == "1"
    assert env["TRAINGUARD_ENDPOINT"] == "unix:///var/run/trainguard/sdk.sock"
    assert {"name": "trainguard-run", "mountPath": "/var/run/trainguard"} in containers[0]["volumeMounts"]


def test_one_trace_id_per_run_in_every_container() -> None:
    spec = injected()["spec"]
    traces = {
        e["value"]
        for c in [*spec["initContainers"], *spec["containers"]]
        for e in c["env"]
        if e["name"] == "TRAINGUARD_TRACE_ID"
    }
    assert traces == {trace_id(POD, "unused")}
    sibling = copy.deepcopy(POD)
    sibling["metadata"]["generateName"] = "llama-pretrain-1-"
    assert trace_id(sibling, "x") == trace_id(POD, "y"), "pods of one Job share the run's trace id"
    bare = {"metadata": {"name": "p"}, "spec": {"containers": []}}
    assert trace_id(bare, "random-fallback") == "random-fallback"


def test_injection_is_idempotent() -> None:
    once = applied(POD, injected())
    assert is_injected(once)
    assert inject(once, monitor(), fallback_trace="x", receiver_url="u", sidecar_image=IMAGE) is None


def test_opt_out_label() -> None:
    pod = copy.deepcopy(POD)
    pod["metadata"]["labels"]["trainguard.io/inject"] = "disabled"
    assert inject(pod, monitor(), fallback_trace="x", receiver_url="u", sidecar_image=IMAGE) is None


def test_matching_monitor_respects_namespace_and_selector() -> None:
    mine = monitor()
    other_ns = monitor(**{"metadata.namespace": "other"})
    other_sel = monitor(**{"metadata.name": "bert", "spec.selector": {"matchLabels": {"app": "bert"}}})
    assert matching_monitor(POD, [other_ns, other_sel, mine]) is mine
    assert matching_monitor(POD, [other_ns, other_sel]) is None


def test_nvml_backend_sees_all_gpus() -> None:
    env = {
        e["name"]: e.get("value")
        for e in injected(**{"spec.exporter.gpuBackend": "nvml"})["spec"]["initContainers"][-1]["env"]
    }
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"


def test_webhook_configuration_never_blocks_pods() -> None:
    cfg = mutating_webhook_configuration(b"CA", url="https://127.0.0.1:9443")
    hook = cfg["webhooks"][0]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["timeoutSeconds"] <= 5
    assert hook["clientConfig"]["url"] == "https://127.0.0.1:9443/inject-sidecar"
    assert "kube-system" in hook["namespaceSelector"]["matchExpressions"][0]["values"]
    in_cluster = mutating_webhook_configuration(
        b"CA", service=("trainguard-system", "trainguard-operator", 443)
    )
    assert in_cluster["webhooks"][0]["clientConfig"]["service"]["path"] == "/inject-sidecar"


def exporter_parser() -> argparse.ArgumentParser:
    """The exporter's own parser: what the sidecar's command line is read with in the pod."""
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(parser)
    return parser


@pytest.mark.parametrize("backend", ["nvml", "dcgm", "simulated"])
def test_rendered_args_parse_with_the_exporters_real_parser(backend: str) -> None:
    spec = injected(**{"spec.exporter.gpuBackend": backend})["spec"]
    args = spec["initContainers"][-1]["args"]
    assert args[0] == "exporter"
    parsed = exporter_parser().parse_args(args[1:])  # argparse exits (a crash loop) on a bad flag
    # dcgm: the GPU series come from dcgm-exporter, the sidecar still serves training and host series
    assert parsed.backend == {"dcgm": "none"}.get(backend, backend)
    assert parsed.sdk_socket.endswith("sdk.sock")


def test_gpus_per_pod_comes_from_the_pods_own_gpu_limits() -> None:
    pod = copy.deepcopy(POD)
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "4"}}
    assert pod_gpus(pod) == 4
    args = injected(pod, **{"spec.exporter.gpuBackend": "nvml"})["spec"]["initContainers"][-1]["args"]
    assert exporter_parser().parse_args(args[1:]).gpus_per_pod == 4
    # a pod that asks for no GPU falls back to the monitor's gpusPerPod
    assert pod_gpus(POD) is None
    assert exporter_parser().parse_args(exporter_args(monitor())[1:]).gpus_per_pod == 8


def test_before_kubernetes_1_29_the_exporter_is_a_regular_container() -> None:
    assert not supports_native_sidecar("1", "28")
    assert not supports_native_sidecar("1", "27+")
    assert supports_native_sidecar("1", "29")
    assert supports_native_sidecar("1", "36")
    assert supports_native_sidecar("2", "0")
    out = inject(
        POD, monitor(), fallback_trace="f" * 32, receiver_url="u", sidecar_image=IMAGE, native_sidecar=False
    )
    assert out is not None
    spec = out["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["fetch"], "never an init container that never ends"
    assert [c["name"] for c in spec["containers"]] == ["trainer", "shipper", EXPORTER]
    assert "restartPolicy" not in spec["containers"][-1]
    # nothing else stops a regular container: it leaves once every trainer said bye, so the Job completes
    assert exporter_parser().parse_args(spec["containers"][-1]["args"][1:]).exit_after_bye
    native = injected()["spec"]["initContainers"][-1]["args"]
    assert not exporter_parser().parse_args(native[1:]).exit_after_bye
    assert is_injected(applied(POD, out)), "a regular-container exporter still counts as injected"


def test_the_exporter_alone_mounts_a_projected_audience_bound_serviceaccount_token() -> None:
    spec = injected()["spec"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "trainguard-identity"]
    assert volume == {
        "name": "trainguard-identity",
        "projected": {
            "defaultMode": 0o444,
            "sources": [
                {
                    "serviceAccountToken": {
                        "audience": "trainguard.io/events",
                        "expirationSeconds": 600,
                        "path": "token",
                    }
                }
            ],
        },
    }
    exporter = spec["initContainers"][-1]
    assert {
        "name": "trainguard-identity",
        "mountPath": "/var/run/trainguard-identity",
        "readOnly": True,
    } in exporter["volumeMounts"]
    others = [c for c in [*spec["initContainers"][:-1], *spec["containers"]]]
    assert all(m["name"] != "trainguard-identity" for c in others for m in c.get("volumeMounts") or [])


def test_a_pod_that_already_names_the_identity_volume_gets_ours() -> None:
    pod = copy.deepcopy(POD)
    pod["spec"]["volumes"] = [
        *(pod["spec"].get("volumes") or []),
        {"name": "trainguard-identity", "emptyDir": {}},
    ]
    changes = inject(
        pod, monitor(), fallback_trace="t", receiver_url="https://op/v1/events", sidecar_image=IMAGE
    )
    assert changes is not None
    (volume,) = [v for v in changes["spec"]["volumes"] if v["name"] == "trainguard-identity"]
    assert "projected" in volume


def exporter_of(out: dict[str, Any] | None) -> dict[str, Any]:
    assert out is not None
    (exporter,) = [c for c in out["spec"]["initContainers"] if c["name"] == EXPORTER]
    return exporter


def test_the_exporter_runs_the_operators_image_unless_the_monitor_overrides_it() -> None:
    """One version: a monitor without spec.exporter.image gets the operator's --sidecar-image, so the
    helm upgrade that moves the operator moves the sidecars of new pods with it."""
    assert exporter_of(injected())["image"] == IMAGE
    moved = inject(
        POD,
        monitor(),
        fallback_trace="x",
        receiver_url="u",
        sidecar_image="registry.example/trainguard:1.3.0",
    )
    assert exporter_of(moved)["image"] == "registry.example/trainguard:1.3.0"
    pinned = {"spec.exporter": {"image": "registry.example/custom-exporter:7"}}
    assert exporter_of(injected(**pinned))["image"] == "registry.example/custom-exporter:7"


def test_the_image_the_crd_once_defaulted_is_no_override() -> None:
    """Monitors created under the earlier CRD hold its default, stored by the apiserver: they follow the
    operator too, or an upgrade would leave every existing monitor's sidecars behind."""
    stored = {"spec.exporter": {"image": "ghcr.io/trainguard/trainguard:0.1.0"}}
    assert exporter_of(injected(**stored))["image"] == IMAGE
    assert monitor().spec.exporter.image is None, "no default: unset means the operator's image"
