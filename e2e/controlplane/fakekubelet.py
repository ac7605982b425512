"""A small fake kubelet for the local control plane: registers GPU nodes, keeps their Lease
heartbeats, marks pods bound to them Running, and finishes their deletion. No container runs;
the scheduler, controllers and admission webhooks see what they would see on a real cluster. Each pod
gets its own loopback IP (127.N.x.y, N the kubelet's --pod-network), so that a test can run a pod's
sidecar as a local process that listens where the pod's IP says (e2e/podprocesses.py).

Container logs: with a serving certificate, it serves the kubelet's `GET /containerLogs/{ns}/{pod}/{container}`
over HTTPS on the port every node's status gives (daemonEndpoints.kubeletEndpoint), to clients with a
certificate of the cluster CA (the apiserver's kubelet client), so `kubectl logs` and
read_namespaced_pod_log go through the real apiserver. It reads what the container runtime would
write: CRI log files under the directory it publishes in each node's POD_LOG_DIR annotation, which the
local pod runner writes (e2e/podprocesses.py). The query is handled as the kubelet's kuberuntime logs
do: since = the later of now - sinceSeconds and sinceTime, older lines skipped; tailLines; timestamps
prefix each line with its RFC3339 time (nanoseconds, fixed width); limitBytes cuts the output, even
mid-line. follow and previous are not served (a 400 says so).

A stopped kubelet, for a node death: with a control folder (--control-dir, published in each node's
CONTROL_DIR annotation), the nodes named in its `stopped` file, one a line, get no heartbeat (no Lease
renewal, no Ready status) and their pods nothing (no Running status, no finished deletion), as a node
whose kubelet died. The kubelet reads the file every TICK_S and writes the set it now skips to `stopped.ack`
after that pass, so a test knows when its word took effect (e2e/nodes.py's `kubelet_stopped`). A node taken
off the file gets its Lease renewed, Ready posted and its pods handled again in the next pass."""

from __future__ import annotations

import argparse
import datetime as dt
import re
import ssl
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

GPU_RESOURCE = "nvidia.com/gpu"
FAKE_LABEL = "trainguard.io/fake-node"
POD_LOG_DIR = "trainguard.io/fake-pod-log-dir"
"""Node annotation: where the container runtime (the local pod runner) writes CRI log files, as
{dir}/{namespace}_{pod}_{uid}/{container}/0.log, the layout of /var/log/pods."""
CONTROL_DIR = "trainguard.io/fake-kubelet-control-dir"
"""Node annotation: the folder whose `stopped` file names the nodes whose kubelet is stopped."""
STOPPED, STOPPED_ACK = "stopped", "stopped.ack"
TICK_S = 0.5
"""How often the heartbeat loop reads the control folder."""
RENEW_S = 5.0
"""How often a Lease is renewed by default (a real kubelet renews every 10 s: --renew-seconds)."""
READY_S = 30.0
"""How often the Ready condition is posted by default (a real kubelet: nodeStatusReportFrequency, 5 min:
--status-seconds)."""


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def log(msg: str) -> None:
    print(f"[fake-kubelet {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- container logs: the CRI log format and the kubelet's reading of it ----------------------------


def rfc3339_nano(ns: int) -> str:
    """The kubelet's timestamp for output (RFC3339NanoFixed, UTC): nine fraction digits always."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 10**9)) + f".{ns % 10**9:09d}Z"


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)")


def parse_rfc3339_ns(text: str) -> int:
    """RFC3339 with or without a fraction (the kubelet's lenient parse), as Unix nanoseconds."""
    m = _RFC3339.fullmatch(text)
    if m is None:
        raise ValueError(f"not an RFC3339 time: {text!r}")
    zone = dt.UTC if m[3] == "Z" else dt.datetime.strptime(m[3].replace(":", ""), "%z").tzinfo
    base = dt.datetime.strptime(m[1], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=zone)
    return int(base.timestamp()) * 10**9 + int((m[2] or "0").ljust(9, "0"))


def cri_line(ns: int, stream: str, content: bytes) -> bytes:
    """One line as a container runtime writes it: `<time> <stream> <F|P> <content>`; P marks a partial
    line (content without its newline)."""
    full = content.endswith(b"\n")
    return f"{rfc3339_nano(ns)} {stream} {'F' if full else 'P'} ".encode() + content.rstrip(b"\n") + b"\n"


def read_logs(
    lines: Iterable[bytes], *, since_ns: int | None, timestamps: bool, tail: int | None, limit: int | None
) -> bytes:
    """What the kubelet serves from a CRI log file's lines."""
    selected = list(lines)
    if tail is not None and tail >= 0:
        selected = selected[len(selected) - tail :] if tail else []
    out = bytearray()
    for raw in selected:
        parts = raw.split(b" ", 3)
        if len(parts) < 4 or parts[1] not in (b"stdout", b"stderr"):
            continue  # the kubelet logs and skips a line it cannot parse
        ts = parse_rfc3339_ns(parts[0].decode())
        if since_ns is not None and ts < since_ns:
            continue
        content = parts[3][:-1] if parts[3].endswith(b"\n") else parts[3]
        line = content + (b"\n" if parts[2].split(b":")[0] == b"F" else b"")
        if timestamps:
            line = rfc3339_nano(ts).encode() + b" " + line
        if limit is not None and len(out) + len(line) >= limit:
            out += line[: limit - len(out)]
            break
        out += line
    return bytes(out)


def pod_log_dir(root: Path, namespace: str, pod: str, uid: str) -> Path:
    return root / f"{namespace}_{pod}_{uid}"


def log_path(root: Path, namespace: str, pod: str, uid: str, container: str) -> Path:
    return pod_log_dir(root, namespace, pod, uid) / container / "0.log"


class FakeKubelet:
    def __init__(
        self,
        api: client.ApiClient,
        names: list[str],
        log_dir: Path | None = None,
        pod_network: int = 1,
        control_dir: Path | None = None,
        *,
        renew_s: float = RENEW_S,
        status_s: float = READY_S,
    ) -> None:
        if not 1 <= pod_network <= 254:
            raise ValueError(f"pod_network {pod_network}: pod IPs are 127.<pod_network>.x.y, so 1 to 254")
        self.pod_network = pod_network
        """The second octet of the pod IPs: one per kubelet running on this host, as their pods' sidecars
        listen on their pod IP and the same port."""
        self.core = client.CoreV1Api(api)
        self.coord = client.CoordinationV1Api(api)
        self.names = set(names)
        self.stop = threading.Event()
        self.pod_ips: dict[str, str] = {}
        self.log_dir = log_dir
        self.port = 0
        """The kubelet endpoint's port (0: no log server)."""
        self.control_dir = control_dir
        self.stopped: frozenset[str] = frozenset()
        """The nodes whose kubelet is stopped (the control folder's `stopped` file)."""
        self.renew_s, self.status_s = renew_s, status_s
        self.lease_versions: dict[str, str] = {}
        """Each Lease's resourceVersion from this kubelet's last write: a renewal is one PUT, as the real
        kubelet's lease controller does, read again only on a conflict."""

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
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
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
                    "annotations": self._annotations(),
                },
            }
            try:
                self.core.create_node(body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                if self._annotations():
                    self.core.patch_node(name, {"metadata": {"annotations": self._annotations()}})
            self.core.patch_node_status(name, {"status": self._status()})
            log(f"node {name} registered with {GPU_RESOURCE}: 8")

    def _annotations(self) -> dict[str, str]:
        out = {POD_LOG_DIR: str(self.log_dir)} if self.log_dir else {}
        if self.control_dir:
            out[CONTROL_DIR] = str(self.control_dir)
        return out

    def _read_stopped(self) -> frozenset[str]:
        if self.control_dir is None:
            return frozenset()
        try:
            text = (self.control_dir / STOPPED).read_text()
        except FileNotFoundError:
            return frozenset()
        return frozenset(line.strip() for line in text.splitlines() if line.strip()) & self.names

    def heartbeat_loop(self) -> None:
        renewed: dict[str, float] = {}
        reported: dict[str, float] = {}
        while not self.stop.is_set():
            stopped = self._read_stopped()
            for name in sorted(self.stopped - stopped):  # back: a heartbeat now, and its pods handled
                renewed.pop(name, None)
                reported.pop(name, None)
            if stopped != self.stopped:
                log(f"kubelet stopped on {sorted(stopped) or 'no node'}")
            resumed, self.stopped = self.stopped - stopped, stopped
            for name in sorted(self.names - stopped):
                if time.monotonic() - renewed.get(name, -self.renew_s) >= self.renew_s:
                    self._renew(name)
                    renewed[name] = time.monotonic()
                if time.monotonic() - reported.get(name, -self.status_s) >= self.status_s:
                    self._patch_ready(name)
                    reported[name] = time.monotonic()
            for name in sorted(resumed):
                self._resync_pods(name)
            if self.control_dir is not None and self._read_ack() != stopped:
                (self.control_dir / STOPPED_ACK).write_text("".join(f"{n}\n" for n in sorted(stopped)))
            self.stop.wait(TICK_S)

    def _read_ack(self) -> frozenset[str] | None:
        assert self.control_dir is not None
        try:
            text = (self.control_dir / STOPPED_ACK).read_text()
        except FileNotFoundError:
            return None
        return frozenset(line.strip() for line in text.splitlines() if line.strip())

    def _renew(self, name: str) -> None:
        lease = {
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": 40,
                "renewTime": now().strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        }
        try:
            if name not in self.lease_versions:
                self._read_lease(name)
            for attempt in (1, 2):
                try:
                    written = self.coord.replace_namespaced_lease(
                        name, "kube-node-lease", self._with_rv(name, lease)
                    )
                    break
                except ApiException as exc:
                    # someone else wrote it (a test's own renewer): read it and write once more
                    if exc.status != 409 or attempt == 2:
                        raise
                    self._read_lease(name)
            self.lease_versions[name] = written.metadata.resource_version
        except ApiException as exc:
            self.lease_versions.pop(name, None)
            if exc.status == 404:
                self.coord.create_namespaced_lease("kube-node-lease", lease)
            else:
                log(f"lease {name}: {exc.reason}")

    def _read_lease(self, name: str) -> None:
        self.lease_versions[name] = self.coord.read_namespaced_lease(
            name, "kube-node-lease"
        ).metadata.resource_version

    def _resync_pods(self, name: str) -> None:
        """A kubelet back from the dead handles its node's pods as they are now."""
        try:
            for pod in self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items:
                self.handle_pod(pod)
        except ApiException as exc:
            log(f"pods of {name}: {exc.reason}")

    def _with_rv(self, name: str, lease: dict[str, Any]) -> dict[str, Any]:
        return {**lease, "metadata": {**lease["metadata"], "resourceVersion": self.lease_versions[name]}}

    def _patch_ready(self, name: str) -> None:
        try:
            self.core.patch_node_status(name, {"status": {"conditions": self._status()["conditions"]}})
        except ApiException as exc:
            log(f"node {name}: {exc.reason}")

    # ---- pods -----------------------------------------------------------------------------------

    def _pod_ip(self, uid: str) -> str:
        if uid not in self.pod_ips:
            n = len(self.pod_ips)
            self.pod_ips[uid] = f"127.{self.pod_network}.{n // 250}.{n % 250 + 1}"
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
        if pod.spec.node_name not in self.names or pod.spec.node_name in self.stopped:
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
        """List once, then watch from the list's resourceVersion, resuming each watch where the last one
        ended: the pods are listed again only when the apiserver no longer has that version (a 410) or the
        watch fails, not every time a watch times out (with 16,000 pods a list costs the shared cores)."""
        while not self.stop.is_set():
            try:
                listed = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
                for pod in listed.items:
                    self.handle_pod(pod)
                version = listed.metadata.resource_version
                while not self.stop.is_set():
                    w = watch.Watch()
                    for event in w.stream(
                        self.core.list_pod_for_all_namespaces,
                        field_selector="spec.nodeName!=",
                        resource_version=version,
                        allow_watch_bookmarks=True,
                        timeout_seconds=60,
                    ):
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self.handle_pod(event["object"])
                        if self.stop.is_set():
                            w.stop()
                    version = w.resource_version or version
            except Exception as exc:
                log(f"pod watch restarted: {exc}")
                time.sleep(1)

    # ---- the kubelet API's container logs --------------------------------------------------------

    def container_logs(self, path: str, query: str, now_ns: int) -> tuple[int, bytes]:
        """(HTTP status, body) of GET /containerLogs/{ns}/{pod}/{container}?{query}."""
        parts = path.strip("/").split("/")
        if len(parts) != 4 or parts[0] != "containerLogs":
            return 404, b"404 page not found\n"
        ns, name, container = (urllib.parse.unquote(p) for p in parts[1:])
        q = {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()}
        if q.get("follow") == "true" or q.get("previous") == "true":
            return 400, b"follow and previous are not served by the fake kubelet\n"
        try:
            pod = self.core.read_namespaced_pod(name, ns)
        except ApiException as exc:
            return exc.status or 500, f"pod {ns}/{name}: {exc.reason}\n".encode()
        if pod.spec.node_name not in self.names:
            return 404, f"pod {ns}/{name} is not on this kubelet's nodes\n".encode()
        names = [c.name for c in [*(pod.spec.init_containers or []), *pod.spec.containers]]
        if container not in names:
            return 400, f'container "{container}" in pod "{name}" is not valid\n'.encode()
        since: int | None = None
        try:
            if "sinceSeconds" in q:
                since = now_ns - int(q["sinceSeconds"]) * 10**9
            if "sinceTime" in q:
                since = max(since or 0, parse_rfc3339_ns(q["sinceTime"]))
            tail = int(q["tailLines"]) if "tailLines" in q else None
            limit = int(q["limitBytes"]) if "limitBytes" in q else None
        except ValueError as exc:
            return 400, f"{exc}\n".encode()
        file = log_path(self.log_dir, ns, name, pod.metadata.uid, container) if self.log_dir else None
        if file is None or not file.exists():
            return 200, b""  # nothing written yet
        with file.open("rb") as f:
            lines = [ln for ln in f if ln.endswith(b"\n")]  # a line being written is left for next time
        return 200, read_logs(lines, since_ns=since, timestamps=q.get("timestamps") == "true", tail=tail,
                              limit=limit)  # fmt: skip

    def serve_logs(self, cert: Path, key: Path, client_ca: Path) -> ThreadingHTTPServer:
        """HTTPS on a free port of 127.0.0.1 (every node's InternalIP), client certificates of the CA only."""
        kubelet = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                status, body = kubelet.container_logs(url.path, url.query, time.time_ns())
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, fmt: str, *args: object) -> None:
                log("kubelet API: " + fmt % args)

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert), str(key))
        ctx.load_verify_locations(str(client_ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        self.port = int(server.server_address[1])
        threading.Thread(target=server.serve_forever, name="kubelet-api", daemon=True).start()
        log(f"kubelet API (container logs from {self.log_dir}) on https://127.0.0.1:{self.port}")
        return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--prefix", default="gpu-node-")
    parser.add_argument("--pod-log-dir", type=Path, help="where the pod runner writes CRI log files")
    parser.add_argument(
        "--tls-cert", type=Path, help="serving certificate: with it, container logs are served"
    )
    parser.add_argument("--tls-key", type=Path)
    parser.add_argument("--client-ca", type=Path, help="the CA of the apiserver's kubelet client certificate")
    parser.add_argument(
        "--control-dir",
        type=Path,
        help="where a test names the nodes whose kubelet is stopped (file `stopped`, one name a line)",
    )
    parser.add_argument(
        "--pod-network",
        type=int,
        default=1,
        help="pod IPs are 127.N.x.y: a different N for each kubelet on a host",
    )
    parser.add_argument(
        "--renew-seconds", type=float, default=RENEW_S, help="how often each Lease is renewed"
    )
    parser.add_argument(
        "--status-seconds",
        type=float,
        default=READY_S,
        help="how often each node's Ready condition is posted",
    )
    args = parser.parse_args()
    api = config.new_client_from_config(args.kubeconfig)
    kubelet = FakeKubelet(
        api,
        [f"{args.prefix}{i}" for i in range(args.nodes)],
        args.pod_log_dir,
        args.pod_network,
        args.control_dir,
        renew_s=args.renew_seconds,
        status_s=args.status_seconds,
    )
    if args.control_dir:
        args.control_dir.mkdir(parents=True, exist_ok=True)
    if args.tls_cert and args.tls_key and args.client_ca and args.pod_log_dir:
        args.pod_log_dir.mkdir(parents=True, exist_ok=True)
        kubelet.serve_logs(args.tls_cert, args.tls_key, args.client_ca)
    kubelet.register()
    threading.Thread(target=kubelet.heartbeat_loop, daemon=True).start()
    kubelet.pod_loop()


if __name__ == "__main__":
    main()
