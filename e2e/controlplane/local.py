"""Start and stop a local Kubernetes control plane: etcd, kube-apiserver (admission webhooks on),
kube-controller-manager (garbage collector, Job controller, ...), kube-scheduler and a fake kubelet
for GPU nodes. Every process dies with the harness, even on Ctrl-C or a hard kill of the parent; a Ctrl-C
reaches the harness only, which stops them after what it runs on them."""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from kubernetes import client, config

from e2e.controlplane.cache import cache_dir
from e2e.controlplane.certs import make_ca, make_cert, make_keypair
from e2e.controlplane.fakekubelet import READY_S, RENEW_S
from tests.processes import free_port

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
K8S_VERSION = os.environ.get("K8S_VERSION", "1.36.3")
SERVICE_CIDR = "10.96.0.0/16"


def log(message: str) -> None:
    print(f"[controlplane {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ensure_binaries() -> Path:
    """Build or reuse the cached binaries; returns the folder of stable names."""
    subprocess.run([str(HERE / "build.sh"), "all"], check=True)
    return cache_dir() / "bin" / "current"


def prometheus_operator_crds() -> list[Path]:
    """The CRDs build.sh generated last (crds/current: its version and kinds revision live there only)."""
    found = sorted((cache_dir() / "crds" / "current").glob("*.yaml"))
    if not found:
        raise FileNotFoundError(
            f"no CRDs in {cache_dir() / 'crds' / 'current'}: run e2e/controlplane/build.sh crds"
        )
    return found


def die_with_parent() -> None:  # pragma: no cover - runs in the child
    """PR_SET_PDEATHSIG: if the harness dies without its cleanup (SIGKILL, a crash), the kernel kills
    the child too; a graceful stop goes through stop() instead."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)


AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  # the operator's LIST requests: the watch caches list once, then watch (e2e/test_watch_caches.py)
  - level: Metadata
    verbs: [list]
    users: ["system:serviceaccount:trainguard-system:trainguard-operator"]
  # its pod deletions, and its node writes with their bodies: each effect of a remediation counted
  # (e2e/audit.py)
  - level: Metadata
    verbs: [delete]
    resources: [{group: "", resources: [pods]}]
    users: ["system:serviceaccount:trainguard-system:trainguard-operator"]
  - level: Request
    verbs: [patch, update]
    resources: [{group: "", resources: [nodes]}]
    users: ["system:serviceaccount:trainguard-system:trainguard-operator"]
  # every other request of its by name (reads and writes): what a steady resync pass asks of the API
  # (e2e/test_watch_caches.py)
  - level: Metadata
    verbs: [get, create, patch, update, delete]
    users: ["system:serviceaccount:trainguard-system:trainguard-operator"]
  - level: None
"""


@dataclass
class LocalControlPlane:
    workdir: Path
    bin: Path
    nodes: int = 3
    pod_network: int = 1
    """Pod IPs are 127.<pod_network>.x.y: control planes running side by side (make e2e's processes)
    need different ones."""
    service_cidr: str = SERVICE_CIDR
    """ClusterIPs: by default a range nothing routes; a loopback range (127.<pod_network>.128.0/17) where
    e2e/kubeproxy.py forwards each ClusterIP to its Service's endpoints, for a test that runs a
    Deployment's pods with e2e/kubelet.py. The apiserver's certificate names its first address (the
    `kubernetes` Service's)."""
    kubelet_renew_s: float = RENEW_S
    """How often the fake kubelet renews each node's Lease (a real kubelet: 10 s)."""
    kubelet_status_s: float = READY_S
    """How often it posts each node's Ready condition (a real kubelet: 5 minutes when nothing changed)."""
    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    api_port: int = 0

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def audit_log(self) -> Path:
        """The apiserver's audit log of the operator's LIST requests, pod deletions and node writes
        (AUDIT_POLICY), JSON lines, written before each request is answered: e2e/test_watch_caches.py
        and e2e/audit.py count them."""
        return self.workdir / "audit.log"

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        out = (self.workdir / f"{name}.log").open("ab")
        env = os.environ | {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        }
        proc = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - the fork happens before any thread of ours starts
            # a terminal's Ctrl-C reaches the harness alone, which stops everything in order: an apiserver
            # that took the SIGINT itself would be gone while the harness still deletes what it applied
            start_new_session=True,
            cwd=self.workdir,
            env=env,
        )
        self.procs.append((name, proc))
        return proc

    def _check_alive(self) -> None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                tail = (self.workdir / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {proc.returncode}; last log lines:\n{tail}")

    def _wait(self, what: str, probe: Callable[[], bool], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            try:
                if probe():
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not ready after {timeout}s (logs in {self.workdir})")
            time.sleep(0.25)

    def _certs(self) -> None:
        d = self.workdir
        make_ca(d)
        sans = ["IP:127.0.0.1", f"IP:{ipaddress.ip_network(self.service_cidr)[1]}", "DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default",
                "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local"]  # fmt: skip
        make_cert(d, "apiserver", "/CN=kube-apiserver", sans)
        make_cert(d, "admin", "/O=system:masters/CN=trainguard-e2e-admin", client=True)
        make_cert(
            d, "apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client", client=True
        )
        make_cert(d, "kubelet", "/CN=fake-kubelet", ["IP:127.0.0.1", "DNS:localhost"])  # its log server
        make_keypair(d, "sa")

    def write_kubeconfig(self, path: Path, user: dict[str, str]) -> None:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "e2e",
                            "cluster": {
                                "server": self.server,
                                "certificate-authority": str(self.workdir / "ca.crt"),
                            },
                        }
                    ],
                    "users": [{"name": "user", "user": user}],
                    "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "user"}}],
                    "current-context": "e2e",
                }
            )
        )

    def _https_ok(self, url: str) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.workdir / "ca.crt"))
        ctx.load_cert_chain(str(self.workdir / "admin.crt"), str(self.workdir / "admin.key"))
        with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
            return bool(resp.status == 200)

    def start(self) -> None:
        t0 = time.monotonic()
        d = self.workdir
        self._certs()
        (d / "audit-policy.yaml").write_text(AUDIT_POLICY)
        etcd_port, etcd_peer = free_port(), free_port()
        self._spawn("etcd", [
            str(self.bin / "etcd"), "--data-dir", str(d / "etcd"), "--name", "e2e",
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
            "--initial-cluster", f"e2e=http://127.0.0.1:{etcd_peer}",
            "--unsafe-no-fsync", "--quota-backend-bytes", str(2 * 1024**3),
        ])  # fmt: skip
        self._wait(
            "etcd",
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{etcd_port}/health", timeout=2).status == 200,
        )
        log(f"etcd ready ({time.monotonic() - t0:.1f}s)")

        self.api_port = free_port()
        self._spawn("kube-apiserver", [
            str(self.bin / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.api_port}",
            f"--tls-cert-file={d / 'apiserver.crt'}", f"--tls-private-key-file={d / 'apiserver.key'}",
            f"--client-ca-file={d / 'ca.crt'}",
            f"--kubelet-client-certificate={d / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={d / 'apiserver-kubelet-client.key'}",
            # pods/log goes to the fake kubelet's log server, its certificate checked against the CA
            f"--kubelet-certificate-authority={d / 'ca.crt'}", "--kubelet-preferred-address-types=InternalIP",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={d / 'sa.pub'}", f"--service-account-signing-key-file={d / 'sa.key'}",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--authorization-mode=Node,RBAC",
            # OwnerReferencesPermissionEnforcement as on OpenShift: blockOwnerDeletion needs RBAC
            "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,DefaultStorageClass,ResourceQuota,"
            "MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy,"
            "OwnerReferencesPermissionEnforcement",
            "--allow-privileged=true", "--profiling=false", "--endpoint-reconciler-type=none",
            f"--audit-policy-file={d / 'audit-policy.yaml'}", f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json", "--audit-log-mode=blocking",
        ])  # fmt: skip
        self.write_kubeconfig(
            self.kubeconfig, {"client-certificate": str(d / "admin.crt"), "client-key": str(d / "admin.key")}
        )
        self._wait("kube-apiserver", lambda: self._https_ok(f"{self.server}/readyz"), timeout=120)
        log(f"kube-apiserver ready on {self.server} ({time.monotonic() - t0:.1f}s)")

        self._spawn("kube-controller-manager", [
            str(self.bin / "kube-controller-manager"), f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            f"--service-account-private-key-file={d / 'sa.key'}", f"--root-ca-file={d / 'ca.crt'}",
            f"--cluster-signing-cert-file={d / 'ca.crt'}", f"--cluster-signing-key-file={d / 'ca.key'}",
            "--controllers=*", "--use-service-account-credentials=false",
            f"--service-cluster-ip-range={self.service_cidr}", "--allocate-node-cidrs=false",
            "--node-monitor-grace-period=40s", "--concurrent-gc-syncs=5",
        ])  # fmt: skip
        self._spawn("kube-scheduler", [
            str(self.bin / "kube-scheduler"), f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
        ])  # fmt: skip
        self._spawn("fake-kubelet", [
            sys.executable, "-m", "e2e.controlplane.fakekubelet", "--kubeconfig", str(self.kubeconfig),
            "--nodes", str(self.nodes), "--pod-log-dir", str(d / "pod-logs"), "--tls-cert", str(d / "kubelet.crt"),
            "--tls-key", str(d / "kubelet.key"), "--client-ca", str(d / "ca.crt"),
            "--pod-network", str(self.pod_network), "--control-dir", str(d / "kubelet"),
            "--renew-seconds", f"{self.kubelet_renew_s:g}", "--status-seconds", f"{self.kubelet_status_s:g}",
        ])  # fmt: skip
        self._wait_cluster_usable()
        log(
            f"control plane ready: {self.nodes} fake GPU nodes, kubeconfig {self.kubeconfig} ({time.monotonic() - t0:.1f}s)"
        )

    def _wait_cluster_usable(self) -> None:
        api = client.CoreV1Api(config.new_client_from_config(str(self.kubeconfig)))

        def ready() -> bool:
            api.read_namespaced_service_account("default", "default")
            nodes = api.list_node().items
            return len(nodes) == self.nodes and all(
                any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
                for n in nodes
            )

        self._wait("default service account and Ready nodes", ready, timeout=120)

    def stop(self) -> None:
        """In reverse start order, each one waited for: the apiserver shuts down while etcd still runs."""
        for _name, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


@contextlib.contextmanager
def local_control_plane(
    nodes: int = 3,
    keep: bool = False,
    pod_network: int = 1,
    service_cidr: str = SERVICE_CIDR,
    *,
    kubelet_renew_s: float = RENEW_S,
    kubelet_status_s: float = READY_S,
) -> Iterator[LocalControlPlane]:
    """Build or reuse the binaries, start everything, and always tear it down."""
    t0 = time.monotonic()
    bin_dir = ensure_binaries()
    log(f"binaries ready in {time.monotonic() - t0:.1f}s")
    workdir = Path(tempfile.mkdtemp(prefix="trainguard-e2e-"))
    plane = LocalControlPlane(
        workdir=workdir,
        bin=bin_dir,
        nodes=nodes,
        pod_network=pod_network,
        service_cidr=service_cidr,
        kubelet_renew_s=kubelet_renew_s,
        kubelet_status_s=kubelet_status_s,
    )
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()
        signal.signal(signal.SIGTERM, previous)
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
        log("control plane stopped")


def main() -> None:
    """`python -m e2e.controlplane.local`: start a control plane and keep it until Ctrl-C."""
    with local_control_plane(keep=True) as plane:
        print(f"export KUBECONFIG={plane.kubeconfig}", flush=True)
        try:
            while True:
                time.sleep(1)
                plane._check_alive()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
