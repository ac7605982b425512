"""The sidecar injection as a pure function: a pod and its monitor in, the changed pod fields out.

The exporter runs as a native sidecar (an init container with restartPolicy Always), so a Job's pod
still completes when training ends. Before Kubernetes 1.29 an apiserver drops that restartPolicy and
the pod would never leave Init, so there the exporter is a regular container instead. Injection is
idempotent: a pod that already carries the injected annotation or the exporter container is left alone.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.events import EVENTS_AUDIENCE, EVENTS_TOKEN_EXPIRY_S
from trainguard.catalog.kubernetes import RESUME_FROM, SPARE_LABEL
from trainguard.render.kubernetes import CA_KEY, FASTPATH_TOKEN_KEY, METRICS_PORT_NAME, fastpath_secret_name

EXPORTER = "trainguard-exporter"
INJECTED = "trainguard.io/injected"
TRACE_ANNOTATION = "trainguard.io/trace-id"
OPT_OUT = "trainguard.io/inject"
RUN_VOLUME = "trainguard-run"
TOKEN_VOLUME = "trainguard-fastpath-token"
IDENTITY_VOLUME = "trainguard-identity"
RUN_DIR = "/var/run/trainguard"
TOKEN_DIR = "/var/run/trainguard-token"
IDENTITY_DIR = "/var/run/trainguard-identity"
"""The projected, audience-bound ServiceAccount token the sidecar posts fast-path events with (the
kubelet rotates it; the sender reads the file on every post)."""
SDK_SOCKET = f"{RUN_DIR}/sdk.sock"
NONROOT_UID = 65532
GPU_RESOURCE = "nvidia.com/gpu"
"""Warm spare nodes carry this NoSchedule taint (and the label of the same key): ordinary work stays
off them; a job's replacement pods tolerate it while trainguard restarts the job after a node fault."""
RESUME_FROM_ENV = "TRAINGUARD_RESUME_FROM"
OTLP_ENDPOINT_ENV = "TRAINGUARD_OTLP_ENDPOINT"
"""The exporter's --otlp-endpoint default (exporter/flags.py)."""
OTLP_HEADERS_ENV = "OTEL_EXPORTER_OTLP_HEADERS"
"""Read by the OpenTelemetry SDK's OTLP exporter itself, added to any --otlp-header."""

EXPORTER_BACKEND = {"nvml": "nvml", "simulated": "simulated", "dcgm": "none"}
"""The exporter's --backend for each gpuBackend: with dcgm the GPU series come from dcgm-exporter, and
the sidecar serves the training and host series (and the info series the dcgm join reads)."""

NATIVE_SIDECAR_MIN = (1, 29)
"""Native sidecars (SidecarContainers) are on by default from Kubernetes 1.29."""


def supports_native_sidecar(major: str, minor: str) -> bool:
    """From the apiserver's /version: `minor` may carry a suffix such as "28+" (EKS, GKE)."""
    digits = "".join(ch for ch in minor if ch.isdigit())
    try:
        return (int(major), int(digits)) >= NATIVE_SIDECAR_MIN
    except ValueError:
        return True  # an unparseable version is a new one more often than an old one


def pod_gpus(pod: dict[str, Any]) -> int | None:
    """GPUs the pod asks the device plugin for: the sum over its containers, the largest init
    container counted as the scheduler does; None when it asks for none."""
    spec = pod.get("spec", {})

    def gpus(c: dict[str, Any]) -> int:
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get(GPU_RESOURCE, (res.get("requests") or {}).get(GPU_RESOURCE, 0))
        try:
            return int(str(value))
        except ValueError:
            return 0

    total = sum(gpus(c) for c in spec.get("containers") or [])
    total = max(total, *(gpus(c) for c in spec.get("initContainers") or []), 0)
    return total or None


def trace_id(pod: dict[str, Any], fallback: str) -> str:
    """One id per run: derived from the controlling owner (the Job), so all its pods share it;
    `fallback` (random, from the caller) for a bare pod."""
    for ref in pod.get("metadata", {}).get("ownerReferences", []) or []:
        if ref.get("controller") and ref.get("uid"):
            return hashlib.sha256(ref["uid"].encode()).hexdigest()[:32]
    return fallback


def is_injected(pod: dict[str, Any]) -> bool:
    annotations = pod.get("metadata", {}).get("annotations") or {}
    spec = pod.get("spec", {})
    names = [c.get("name") for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]]
    return INJECTED in annotations or EXPORTER in names


def carries_exporter(pod: dict[str, Any]) -> bool:
    """The pod runs the exporter (as a native sidecar or a regular container): it is monitored."""
    spec = pod.get("spec") or {}
    return any(
        c.get("name") == EXPORTER
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    )


def wants_injection(pod: dict[str, Any]) -> bool:
    labels = pod.get("metadata", {}).get("labels") or {}
    return labels.get(OPT_OUT) != "disabled"


def _env(name: str, value: str) -> dict[str, str]:
    return {"name": name, "value": value}


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def exporter_args(monitor: TrainingJobMonitor, gpus: int | None = None, *, native: bool = True) -> list[str]:
    """The sidecar's command line; `gpus` is what the pod asks for (else the monitor's gpusPerPod). A
    regular-container exporter (not `native`) exits once every trainer said bye, so the pod completes."""
    exp = monitor.spec.exporter
    per_pod = gpus or monitor.spec.gpus_per_pod
    args = [
        "exporter",
        "--backend",
        EXPORTER_BACKEND[exp.gpu_backend],
        "--listen",
        f"0.0.0.0:{exp.port}",
        "--sdk-socket",
        SDK_SOCKET,
    ]
    if per_pod:
        args += ["--gpus-per-pod", str(per_pod)]
    if exp.gpu_backend == "simulated":
        args += ["--gpus", str(per_pod or 1)]
    if not native:
        args.append("--exit-after-bye")
    if exp.otlp is not None:
        args += ["--otlp-interval", f"{exp.otlp.interval_seconds():g}"]
    return args


def otlp_env(monitor: TrainingJobMonitor) -> list[dict[str, Any]]:
    """spec.exporter.otlp as the sidecar's environment: the endpoint in clear, the headers (often a
    token) only by reference to the Secret, read by the kubelet, so neither the pod spec nor the
    webhook ever holds them. The reference is optional: a missing Secret must not keep a training pod
    from starting; the sidecar then pushes without those headers and logs the store's refusals."""
    otlp = monitor.spec.exporter.otlp
    if otlp is None:
        return []
    env: list[dict[str, Any]] = [_env(OTLP_ENDPOINT_ENV, otlp.endpoint)]
    ref = otlp.headers_secret_ref
    if ref is not None:
        env.append({
            "name": OTLP_HEADERS_ENV,
            "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key, "optional": True}},
        })  # fmt: skip
    return env


def identity_volume() -> dict[str, Any]:
    """The sidecar's identity for the fast path: a ServiceAccount token of the pod's own account,
    projected by the kubelet, bound to the pod (so it names the pod, its uid and, from Kubernetes 1.30,
    its node) and to trainguard's audience, short-lived and rotated. The operator checks it with a
    TokenReview and takes the pod and node from it, not from the event."""
    token = {"audience": EVENTS_AUDIENCE, "expirationSeconds": EVENTS_TOKEN_EXPIRY_S, "path": "token"}
    return {
        "name": IDENTITY_VOLUME,
        "projected": {"defaultMode": 0o444, "sources": [{"serviceAccountToken": token}]},
    }


def exporter_image(monitor: TrainingJobMonitor, operator_image: str) -> str:
    """The monitor's spec.exporter.image when it overrides, else the operator's --sidecar-image: one
    version for the operator and the sidecars it injects, moved together by an upgrade."""
    return monitor.spec.exporter.image_override() or operator_image


def exporter_container(
    monitor: TrainingJobMonitor,
    trace: str,
    receiver_url: str,
    *,
    image: str,
    gpus: int | None = None,
    native: bool = True,
) -> dict[str, Any]:
    """The exporter sidecar; `image` is the operator's --sidecar-image (a monitor may override it)."""
    exp = monitor.spec.exporter
    args = exporter_args(monitor, gpus, native=native)
    env = [
        _field_env("TRAINGUARD_NAMESPACE", "metadata.namespace"),
        _field_env("TRAINGUARD_POD", "metadata.name"),
        _field_env("TRAINGUARD_NODE", "spec.nodeName"),
        _env("TRAINGUARD_TRAINING_JOB", monitor.name),
        _env("TRAINGUARD_TRACE_ID", trace),
        _env("TRAINGUARD_FASTPATH_URL", receiver_url),
        _env("TRAINGUARD_FASTPATH_TOKEN_FILE", f"{TOKEN_DIR}/token"),
        _env("TRAINGUARD_FASTPATH_IDENTITY_FILE", f"{IDENTITY_DIR}/token"),
        _env("TRAINGUARD_FASTPATH_CA_FILE", f"{TOKEN_DIR}/ca.crt"),
        *otlp_env(monitor),
    ]
    if exp.gpu_backend == "nvml":
        # NVML sees the node's GPUs without allocating one (NVIDIA container runtime); the exporter
        # keeps only the pod's own: the SDK reports the devices the plugin gave the trainer
        env.append(_env("NVIDIA_VISIBLE_DEVICES", "all"))
    container: dict[str, Any] = {
        "name": EXPORTER,
        "image": exporter_image(monitor, image),
        "args": args,
        "ports": [{"name": METRICS_PORT_NAME, "containerPort": exp.port, "protocol": "TCP"}],
        "env": env,
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": exp.port}, "periodSeconds": 10},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NONROOT_UID,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": RUN_VOLUME, "mountPath": RUN_DIR},
            {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True},
            {"name": IDENTITY_VOLUME, "mountPath": IDENTITY_DIR, "readOnly": True},
        ],
    }
    if native:
        container["restartPolicy"] = "Always"
    return container


def _with_training_env(container: dict[str, Any], monitor: TrainingJobMonitor, trace: str) -> dict[str, Any]:
    c = copy.deepcopy(container)
    env = [e for e in c.get("env") or [] if not str(e.get("name", "")).startswith("TRAINGUARD_")]
    env += [
        _env("TRAINGUARD_ENDPOINT", f"unix://{SDK_SOCKET}"),
        _env("TRAINGUARD_TRACE_ID", trace),
        _env("TRAINGUARD_TRAINING_JOB", monitor.name),
        _env("TRAINGUARD_CHECKPOINT_INCREMENTAL_EVERY", str(monitor.spec.checkpoint.incremental_every_steps)),
        _env("TRAINGUARD_CHECKPOINT_FULL_EVERY", str(monitor.spec.checkpoint.full_every_steps)),
    ]
    c["env"] = env
    mounts = [m for m in c.get("volumeMounts") or [] if m.get("name") != RUN_VOLUME]
    c["volumeMounts"] = [*mounts, {"name": RUN_VOLUME, "mountPath": RUN_DIR}]
    return c


def _with_trace(container: dict[str, Any], trace: str) -> dict[str, Any]:
    c = copy.deepcopy(container)
    env = [e for e in c.get("env") or [] if e.get("name") != "TRAINGUARD_TRACE_ID"]
    c["env"] = [*env, _env("TRAINGUARD_TRACE_ID", trace)]
    return c


def inject(
    pod: dict[str, Any],
    monitor: TrainingJobMonitor,
    *,
    fallback_trace: str,
    receiver_url: str,
    sidecar_image: str,
    native_sidecar: bool = True,
    tolerate_spares: bool = False,
    resume_from: str | None = None,
) -> dict[str, Any] | None:
    """The pod fields to replace (metadata.annotations, spec.initContainers, spec.containers,
    spec.volumes, spec.tolerations), or None when there is nothing to do. The exporter runs the
    operator's `sidecar_image` unless the monitor overrides it. Without `native_sidecar`
    (Kubernetes before 1.29) the exporter is the last regular container. While trainguard restarts the
    job (`tolerate_spares`), its pods may land on a warm spare, and the exporter starts with the
    checkpoint the operator chose (`resume_from`, JSON) for the trainer's Reporter.resume_from(), said on
    the pod too (trainguard.io/resume-from)."""
    if is_injected(pod) or not wants_injection(pod):
        return None
    spec = pod.get("spec", {})
    trace = trace_id(pod, fallback_trace)
    annotations = dict(pod.get("metadata", {}).get("annotations") or {})
    annotations[INJECTED] = monitor.name
    annotations[TRACE_ANNOTATION] = trace
    init = [_with_trace(c, trace) for c in spec.get("initContainers") or []]
    ours = (RUN_VOLUME, TOKEN_VOLUME, IDENTITY_VOLUME)
    volumes = [v for v in spec.get("volumes") or [] if v.get("name") not in ours]
    volumes += [
        {"name": RUN_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
        {
            "name": TOKEN_VOLUME,
            "secret": {
                "secretName": fastpath_secret_name(monitor),
                "defaultMode": 0o444,
                "optional": True,
                # the token the operator's control calls carry, and the receiver's CA; never Alertmanager's token
                "items": [{"key": FASTPATH_TOKEN_KEY, "path": "token"}, {"key": CA_KEY, "path": "ca.crt"}],
            },
        },
        identity_volume(),
    ]
    exporter = exporter_container(
        monitor, trace, receiver_url, image=sidecar_image, gpus=pod_gpus(pod), native=native_sidecar
    )
    if resume_from:
        exporter["env"].append(_env(RESUME_FROM_ENV, resume_from))
        annotations[RESUME_FROM] = resume_from  # what the restart's placement checks the pod was given
    containers = [_with_training_env(c, monitor, trace) for c in spec.get("containers") or []]
    if native_sidecar:
        init.append(exporter)
    else:
        containers.append(exporter)
    out_spec: dict[str, Any] = {"initContainers": init, "containers": containers, "volumes": volumes}
    if tolerate_spares:
        tolerations = [t for t in spec.get("tolerations") or [] if t.get("key") != SPARE_LABEL]
        tolerations.append({"key": SPARE_LABEL, "operator": "Exists", "effect": "NoSchedule"})
        out_spec["tolerations"] = tolerations
    return {"metadata": {"annotations": annotations}, "spec": out_spec}


def matching_monitor(pod: dict[str, Any], monitors: list[TrainingJobMonitor]) -> TrainingJobMonitor | None:
    """The monitor in the pod's namespace whose selector matches it; the oldest name wins a tie."""
    labels = pod.get("metadata", {}).get("labels") or {}
    namespace = pod.get("metadata", {}).get("namespace")
    found = sorted(
        (
            m
            for m in monitors
            if (namespace is None or m.namespace == namespace) and m.spec.selector.matches(labels)
        ),
        key=lambda m: m.name,
    )
    return found[0] if found else None
