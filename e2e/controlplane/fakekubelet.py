"""A small fake kubelet for the local control plane: registers GPU nodes, keeps their Lease
heartbeats, marks pods bound to them Running, and finishes their deletion. No container runs;
the scheduler, controllers and admission webhooks see what they would see on a real cluster. Each pod
gets its own loopback IP (127.1.x.y), so that a test can run a pod's sidecar as a local process that
listens where the pod's IP says (e2e/podprocesses.py)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import threading
import time
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

GPU_RESOURCE = "nvidia.com/gpu"
FAKE_LABEL = "trainguard.io/fake-node"


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def log(msg: str) -> None:
    print(f"[fake-kubelet {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class FakeKubelet:
    def __init__(self, api: client.ApiClient, names: list[str]) -> None:
        self.core = client.CoreV1Api(api)
        self.coord = client.CoordinationV1Api(api)
        self.names = set(names)
        self.stop = threading.Event()
        self.pod_ips: dict[str, str] = {}

    # ---- nodes ----------------------------------------------------------------------------------

    def _status(self) -> dict[str, Any]:
        t = now().isoformat()
        capacity = {
            "cpu": "96",
            "memory": "1024Gi",
            "pods": "110",
            GPU_RESOURCE: "8",
            "ephemeral-storage": "2Ti",
        }
        return {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake kubelet is posting ready status",
                 "lastHeartbeatTime": t, "lastTransitionTime": t},
                *[{"type": c, "status": "False", "reason": f"KubeletHas{r}", "message": "fake", "lastHeartbeatTime": t,
                   "lastTransitionTime": t} for c, r in (("MemoryPressure", "SufficientMemory"),
                                                          ("DiskPressure", "NoDiskPressure"), ("PIDPressure", "SufficientPID"))],
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "nodeInfo": {"kubeletVersion": "v1.36.3-fake", "architecture": "amd64", "operatingSystem": "linux",
                         "containerRuntimeVersion": "fake://1.0", "kernelVersion": "6.0", "osImage": "fake",
                         "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""},
        }  # fmt: skip

    def register(self) -> None:
        for name in sorted(self.names):
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                        FAKE_LABEL: "true",
                    },
                },
            }
            try:
                self.core.create_node(body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
            self.core.patch_node_status(name, {"status": self._status()})
            log(f"node {name} registered with {GPU_RESOURCE}: 8")

    def heartbeat_loop(self) -> None:
        last_status = 0.0
        while not self.stop.is_set():
            for name in sorted(self.names):
                lease = {
                    "metadata": {"name": name, "namespace": "kube-node-lease"},
                    "spec": {
                        "holderIdentity": name,
                        "leaseDurationSeconds": 40,
                        "renewTime": now().strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                    },
                }
                try:
                    self.coord.replace_namespaced_lease(name, "kube-node-lease", self._with_rv(name, lease))
                except ApiException as exc:
                    if exc.status == 404:
                        self.coord.create_namespaced_lease("kube-node-lease", lease)
                    else:
                        log(f"lease {name}: {exc.reason}")
            if time.monotonic() - last_status > 30:
                for name in sorted(self.names):
                    self._patch_ready(name)
                last_status = time.monotonic()
            self.stop.wait(5)

    def _with_rv(self, name: str, lease: dict[str, Any]) -> dict[str, Any]:
        current = self.coord.read_namespaced_lease(name, "kube-node-lease")
        lease["metadata"]["resourceVersion"] = current.metadata.resource_version
        return lease

    def _patch_ready(self, name: str) -> None:
        try:
            self.core.patch_node_status(name, {"status": {"conditions": self._status()["conditions"]}})
        except ApiException as exc:
            log(f"node {name}: {exc.reason}")

    # ---- pods -----------------------------------------------------------------------------------

    def _pod_ip(self, uid: str) -> str:
        if uid not in self.pod_ips:
            n = len(self.pod_ips)
            self.pod_ips[uid] = f"127.1.{n // 250}.{n % 250 + 1}"
        return self.pod_ips[uid]

    def _running_status(self, pod: client.V1Pod) -> dict[str, Any]:
        t = now().isoformat()
        spec = pod.spec

        def running(c: client.V1Container) -> dict[str, Any]:
            return {"name": c.name, "image": c.image, "imageID": f"fake://{c.image}", "ready": True,
                    "restartCount": 0, "started": True, "state": {"running": {"startedAt": t}},
                    "containerID": f"fake://{pod.metadata.uid}/{c.name}"}  # fmt: skip

        def done(c: client.V1Container) -> dict[str, Any]:
            if c.restart_policy == "Always":  # a native sidecar keeps running
                return running(c)
            return {"name": c.name, "image": c.image, "imageID": f"fake://{c.image}", "ready": True, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": t, "finishedAt": t}}}  # fmt: skip

        return {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "podIP": self._pod_ip(pod.metadata.uid),
            "startTime": t,
            "conditions": [{"type": c, "status": "True", "lastTransitionTime": t}
                           for c in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
            "containerStatuses": [running(c) for c in spec.containers],
            "initContainerStatuses": [done(c) for c in spec.init_containers or []],
        }  # fmt: skip

    def handle_pod(self, pod: client.V1Pod) -> None:
        if pod.spec.node_name not in self.names:
            return
        ns, name = pod.metadata.namespace, pod.metadata.name
        try:
            if pod.metadata.deletion_timestamp is not None:
                self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
            elif (pod.status.phase or "Pending") == "Pending":
                self.core.patch_namespaced_pod_status(name, ns, {"status": self._running_status(pod)})
        except ApiException as exc:
            if exc.status not in (404, 409):
                log(f"pod {ns}/{name}: {exc.status} {exc.reason}")

    def pod_loop(self) -> None:
        while not self.stop.is_set():
            try:
                for pod in self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=").items:
                    self.handle_pod(pod)
                w = watch.Watch()
                for event in w.stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector="spec.nodeName!=",
                    timeout_seconds=60,
                ):
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.handle_pod(event["object"])
                    if self.stop.is_set():
                        w.stop()
            except Exception as exc:
                log(f"pod watch restarted: {exc}")
                time.sleep(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--prefix", default="gpu-node-")
    args = parser.parse_args()
    api = config.new_client_from_config(args.kubeconfig)
    kubelet = FakeKubelet(api, [f"{args.prefix}{i}" for i in range(args.nodes)])
    kubelet.register()
    threading.Thread(target=kubelet.heartbeat_loop, daemon=True).start()
    kubelet.pod_loop()


if __name__ == "__main__":
    main()
