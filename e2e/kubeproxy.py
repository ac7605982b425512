"""kube-proxy's part on the local control plane: every Service's ClusterIP ports listened on and forwarded
over TCP to an endpoint, so that what calls a Service by its address (the apiserver calling a webhook's
Service, a pod's kubernetes client at $KUBERNETES_SERVICE_HOST) reaches it as in a cluster.

The plane's Service range must be a loopback one (LocalControlPlane.service_cidr, 127.N.128.0/17), whose
addresses this machine answers on. A Service's endpoints are its selector's pods that are Running and Ready
with an IP (the loopback addresses the fake kubelet gives them, where e2e/kubelet.py runs their
containers), at the port's targetPort (a name: the pods' container port of that name), one picked at
random per connection; the `kubernetes` Service's is the apiserver itself (the endpoint its reconciler
would publish, which the local plane turns off). Bytes pass through untouched: a TLS client checks the
certificate of the Service's name, as it would in a cluster. TCP only; no session affinity, no
Endpoints objects read (the apiserver refuses loopback addresses in them); the listeners follow the
Services (`sync`, every second on a thread of its own). A Service port below 1024 (443) needs root to
listen on, as the mount namespaces of e2e/kubelet.py do."""

from __future__ import annotations

import contextlib
import random
import socket
import threading
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

Obj = dict[str, Any]


class KubeProxy:
    def __init__(self, api: client.ApiClient, apiserver: tuple[str, int]) -> None:
        self.core = client.CoreV1Api(api)
        self.apiserver = apiserver
        self.listeners: dict[tuple[str, int], socket.socket] = {}
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._loop, name="kube-proxy", daemon=True)

    def __enter__(self) -> KubeProxy:
        self.sync()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)
        for sock in self.listeners.values():
            sock.close()

    def _loop(self) -> None:
        while not self.stopping.wait(1):
            try:
                self.sync()
            except Exception as exc:  # an apiserver hiccup: the next pass tries again
                self.errors.append(repr(exc))

    def sync(self) -> None:
        """Listen on the ClusterIP ports of Services created since the last pass."""
        for svc in self.core.list_service_for_all_namespaces().items:
            ip = svc.spec.cluster_ip
            if not ip or ip == "None":
                continue
            for port in svc.spec.ports or []:
                if (port.protocol or "TCP") != "TCP" or (ip, port.port) in self.listeners:
                    continue
                sock = socket.create_server((ip, port.port))
                sock.settimeout(0.5)
                self.listeners[(ip, port.port)] = sock
                threading.Thread(
                    target=self._accept, args=(sock, svc.metadata.namespace, svc.metadata.name, port.port),
                    name=f"kube-proxy {svc.metadata.namespace}/{svc.metadata.name}:{port.port}", daemon=True,
                ).start()  # fmt: skip

    def _accept(self, sock: socket.socket, ns: str, name: str, port: int) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            threading.Thread(target=self._forward, args=(conn, ns, name, port), daemon=True).start()

    def endpoint(self, ns: str, name: str, port: int) -> tuple[str, int] | None:
        """Where a connection to the Service's `port` goes now; None: no ready endpoint."""
        if (ns, name) == ("default", "kubernetes"):
            return self.apiserver
        try:
            svc = self.core.read_namespaced_service(name, ns)
        except ApiException:
            return None
        spec = next(p for p in svc.spec.ports if p.port == port)
        selector = svc.spec.selector or {}
        if not selector:
            return None
        pods = self.core.list_namespaced_pod(
            ns, label_selector=",".join(f"{k}={v}" for k, v in selector.items())
        )
        ready = [p for p in pods.items if p.metadata.deletion_timestamp is None and p.status.phase == "Running"
                 and p.status.pod_ip and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]  # fmt: skip
        if not ready:
            return None
        pod = random.choice(ready)
        target = spec.target_port if spec.target_port is not None else port
        if isinstance(target, str) and not target.isdigit():
            named = [
                cp.container_port for c in pod.spec.containers for cp in c.ports or [] if cp.name == target
            ]
            if not named:
                return None
            target = named[0]
        return str(pod.status.pod_ip), int(target)

    def _forward(self, conn: socket.socket, ns: str, name: str, port: int) -> None:
        with conn:
            try:
                where = self.endpoint(ns, name, port)
                if where is None:
                    return  # as kube-proxy without endpoints: the connection is refused
                upstream = socket.create_connection(where, timeout=10)
            except OSError:
                return
            with upstream:
                upstream.settimeout(None)
                back = threading.Thread(target=_pipe, args=(upstream, conn), daemon=True)
                back.start()
                _pipe(conn, upstream)
                back.join()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy until src ends, then end dst's writing side."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
