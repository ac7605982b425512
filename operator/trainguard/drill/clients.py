"""The drill's edges: the apiserver (the monitor, its pods, the nodes), the sidecars and Alertmanager.

Sidecars are reached through the apiserver's pod proxy first
(`/api/v1/namespaces/NS/pods/NAME:PORT/proxy/v1/faults`): it needs nothing but the kubeconfig the
drill already uses (and RBAC `get`/`create` on `pods/proxy`) and works from a laptop outside the
cluster network. Where the proxy does not reach a sidecar, the drill talks to it at its pod IP
(http://POD_IP:PORT), which needs the drill to run inside the cluster network (or on the e2e harness's
host: the apiserver refuses to proxy to the harness's loopback pod IPs). --sidecar-access forces one.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from trainguard.catalog.severity import GRADE
from trainguard.clients import alertmanager as am
from trainguard.drill.scenarios import PodView
from trainguard.kube import ApiError, Kube
from trainguard.render.alertmanager import OPERATOR_RECEIVER
from trainguard.render.sidecar import EXPORTER

PLURAL = "trainingjobmonitors"
TIMEOUT_S = 10.0


class KubeCluster:
    """The drill's reads and its one write, through kube.Kube."""

    def __init__(self, kube: Kube, namespace: str, name: str) -> None:
        self.kube = kube
        self.namespace, self.name = namespace, name

    def monitor(self) -> dict[str, Any]:
        body = self.kube.get_monitor(self.namespace, self.name)
        if body is None:
            raise ApiError(status=404, reason=f"TrainingJobMonitor {self.namespace}/{self.name} not found")
        return {str(k): v for k, v in body.items()}

    def patch_dry_run(self, value: bool | None) -> None:
        """A JSON merge patch: null removes the field, as it was before the drill set it."""
        self.kube.patch_monitor(self.namespace, self.name, {"spec": {"remediation": {"dryRun": value}}})

    def pods(self, selector: str) -> list[PodView]:
        out = []
        for p in self.kube.list_pods(self.namespace, selector):
            meta, spec, status = p.get("metadata") or {}, p.get("spec") or {}, p.get("status") or {}
            if meta.get("deletionTimestamp") or status.get("phase") != "Running":
                continue
            port = 0
            for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
                if c.get("name") == EXPORTER and c.get("ports"):
                    port = int(c["ports"][0]["containerPort"])
            out.append(
                PodView(
                    str(meta.get("name")),
                    str(spec.get("nodeName") or ""),
                    str(status.get("podIP") or ""),
                    port,
                )
            )
        return out

    def cordoned(self) -> set[str]:
        return {
            str(n["metadata"]["name"])
            for n in self.kube.list_nodes()
            if (n.get("spec") or {}).get("unschedulable")
        }


class SidecarHTTP:
    """The exporter's /v1/faults and /metrics, through the pod proxy or at the pod's IP. `auto` tries the
    proxy first and falls back to the pod IP for a pod whose /healthz the proxy does not return (the
    apiserver refuses to proxy to loopback pod IPs, as the e2e harness's are); what worked is kept."""

    def __init__(self, kube: Kube, namespace: str, access: str = "auto") -> None:
        self.kube, self.namespace, self.access = kube, namespace, access
        self.modes: dict[str, str] = {}
        """Pod name -> "proxy" or "direct", as decided for it."""

    def _mode(self, pod: PodView) -> str:
        if self.access != "auto":
            return self.access
        if pod.name in self.modes:
            return self.modes[pod.name]
        if self._via(pod, "proxy", "GET", "/healthz", None)[0] == 200:
            self.modes[pod.name] = "proxy"
            return "proxy"
        try:
            if self._via(pod, "direct", "GET", "/healthz", None)[0] == 200:
                self.modes[pod.name] = "direct"
                return "direct"
        except OSError:
            pass
        return "proxy"  # neither answers yet (a new pod's sidecar starting): decided on a later call

    def _call(self, pod: PodView, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        return self._via(pod, self._mode(pod), method, path, body)

    def _via(self, pod: PodView, mode: str, method: str, path: str, body: Any) -> tuple[int, bytes]:
        if mode == "direct":
            data = None if body is None else json.dumps(body).encode()
            req = urllib.request.Request(f"http://{pod.ip}:{pod.port}{path}", data=data, method=method)
            if data is not None:
                req.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
                    return int(resp.status), bytes(resp.read())
            except urllib.error.HTTPError as exc:
                return int(exc.code), bytes(exc.read())
        return self.kube.proxy(self.namespace, pod.name, pod.port, method=method, path=path, body=body,
                               timeout=TIMEOUT_S)  # fmt: skip

    def _ok(self, pod: PodView, method: str, path: str, body: Any = None) -> bytes:
        status, data = self._call(pod, method, path, body)
        if status // 100 != 2:
            raise RuntimeError(
                f"{method} {path} on {pod.name}: HTTP {status} {data[:200].decode(errors='replace')}"
            )
        return data

    def injection_on(self, pod: PodView) -> bool:
        try:
            return self._call(pod, "GET", "/v1/faults")[0] == 200
        except OSError:
            return False

    def inject(self, pod: PodView, body: dict[str, Any]) -> None:
        self._ok(pod, "POST", "/v1/faults", body)

    def clear(self, pod: PodView) -> None:
        self._ok(pod, "DELETE", "/v1/faults")

    def active(self, pod: PodView) -> dict[str, Any]:
        return dict(json.loads(self._ok(pod, "GET", "/v1/faults") or b"{}"))

    def step(self, pod: PodView) -> float | None:
        try:
            text = self._ok(pod, "GET", "/metrics").decode(errors="replace")
        except (RuntimeError, OSError):
            return None
        return train_step(text)


def train_step(exposition: str) -> float | None:
    """trainguard_train_step from an exporter's /metrics (the highest, if several series)."""
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in exposition.splitlines()
        if line.startswith(("trainguard_train_step{", "trainguard_train_step "))
    ]
    return max(values) if values else None


def delivered(exposition: str) -> float:
    """Notifications Alertmanager delivered (attempts less failures), from its /metrics. Alertmanager
    0.27 and later label them by receiver_name, and the operator's receiver is left out; older ones
    count by integration only, the operator's webhook included."""

    def total(metric: str) -> float:
        out = 0.0
        for line in exposition.splitlines():
            if not line.startswith(metric + "{") and not line.startswith(metric + " "):
                continue
            head, _, value = line.rpartition(" ")
            if 'receiver_name="' in head and head.split('receiver_name="', 1)[1].split('"', 1)[0].endswith(
                OPERATOR_RECEIVER
            ):
                continue
            out += float(value)
        return out

    return total("alertmanager_notifications_total") - total("alertmanager_notifications_failed_total")


class AlertmanagerHTTP:
    def __init__(self, base_url: str, severity_style: str = GRADE) -> None:
        self.base = base_url.rstrip("/")
        self.severity_style = severity_style
        """The platform's severity style (catalog/severity.py): synthetic alerts look like its rules'."""

    def alerts(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return am.raw_alerts(self.base, {"namespace": namespace, "training_job": job})[1]

    def post(self, alerts: list[dict[str, Any]]) -> None:
        am.post_alerts(self.base, alerts, severity_style=self.severity_style)

    def delivered(self) -> float:
        with urllib.request.urlopen(f"{self.base}/metrics", timeout=TIMEOUT_S) as resp:
            return delivered(resp.read().decode(errors="replace"))

    def silence(self, labels: dict[str, str], ends: float, comment: str) -> str:
        return am.create_silence(
            self.base, labels, time.time(), ends, created_by="trainguard drill", comment=comment
        )
