"""What the e2e tests need from any cluster: applying YAML, waiting, and running the operator under
its least-privilege ServiceAccount. Works on the local control plane and on any kubeconfig."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from e2e import prometheus_operator as po
from e2e.controlplane.certs import make_ca, make_cert
from tests.processes import free_port, lasting_port, stop, wait_for

REPO = Path(__file__).resolve().parents[1]
OPERATOR_NS = "trainguard-system"
FAKE_NODE_LABEL = "trainguard.io/fake-node=true"
RESYNC_SECONDS = 10
DEPLOY_FILES = (
    "rbac.yaml",
    "rbac-pod-logs.yaml",
    "rbac-webhook-configuration.yaml",
    "rbac-webhook-tls.yaml",
    "secret-write-policy.yaml",
    "namespace-label-policy.yaml",
    "api-priority.yaml",
)
"""What `kubectl apply` of deploy/ installs after the peering (docs/install.md): the e2e operators run
under all of it, the RBAC of either way of managing certificates, the Secret-write policy, the
namespace-label policy and the FlowSchema of its remediation requests."""


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads a bare `=` as the obscure `value` tag (prometheus-operator's CRDs have one)."""


_Loader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


def load_all(path: Path) -> list[Any]:
    return [d for d in yaml.load_all(path.read_text(), Loader=_Loader) if d]


@dataclass
class Cluster:
    kubeconfig: Path
    workdir: Path
    audit_log: Path | None = None
    """The apiserver's audit log of the operator's LIST requests, pod deletions and node writes, where the
    harness started the apiserver (the local control plane); None on a cluster named by
    TRAINGUARD_E2E_KUBECONFIG."""
    api: client.ApiClient = field(init=False)
    operators: list[subprocess.Popen[bytes]] = field(default_factory=list)
    webhook_ports: dict[str, int] = field(default_factory=dict)
    receiver_ports: dict[str, int] = field(default_factory=dict)
    metrics_ports: dict[str, int] = field(default_factory=dict)
    monitoring_operator: tuple[subprocess.Popen[bytes], po.Credentials] | None = None
    """The real prometheus-operator (prometheus_operator()), once a test asked for it, and its credentials."""

    def __post_init__(self) -> None:
        self.api = config.new_client_from_config(str(self.kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.dynamic = DynamicClient(self.api)

    # ---- objects ----

    def apply_file(self, path: Path | str, namespace: str | None = None) -> None:
        self.apply(load_all(Path(path)), namespace)

    def apply(self, objs: Iterable[dict[str, Any]], namespace: str | None = None) -> None:
        for original in objs:
            if not original:
                continue
            obj = dict(original)
            if namespace and obj.get("kind") not in ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                                                     "ClusterKopfPeering", "Namespace"):  # fmt: skip
                obj["metadata"] = {**obj["metadata"], "namespace": namespace}
            resource = self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            self.dynamic.server_side_apply(
                resource, body=obj, name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"),
                field_manager="e2e", force_conflicts=True,
            )  # fmt: skip

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Any | None:
        resource = self.dynamic.resources.get(api_version=api_version, kind=kind)
        try:
            return self.dynamic.get(resource, name=name, namespace=namespace).to_dict()
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise

    def delete_owners(self, namespace: str, group: str, version: str, plural: str, pods: str) -> None:
        """Delete every object of `plural` in `namespace` (Foreground) and wait until the pods they made
        (label selector `pods`) are gone: the ns fixture deletes Jobs and pods, which a running JobSet,
        TrainJob or PyTorchJob would only recreate, holding the fake GPUs the next test's gang needs."""
        for obj in self.custom.list_namespaced_custom_object(group, version, namespace, plural)["items"]:
            try:
                self.custom.delete_namespaced_custom_object(group, version, namespace, plural, obj["metadata"]["name"],
                                                            propagation_policy="Foreground")  # fmt: skip
            except ApiException as exc:
                # a 404: gone between the list and the delete (its own deletion finished), as wanted
                if exc.status != 404:
                    raise
        wait_for(f"the {plural}' pods gone", lambda: not self.core.list_namespaced_pod(
            namespace, label_selector=pods).items, timeout=60)  # fmt: skip

    def delete(self, obj: dict[str, Any]) -> None:
        """Delete the object, if it is there."""
        resource = self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        try:
            self.dynamic.delete(
                resource, name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace")
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def prometheus_operator(self) -> po.Credentials:
        """Start the real prometheus-operator against this cluster, once; its credentials, for the
        Prometheus objects' apiserverConfig."""
        if self.monitoring_operator is None or self.monitoring_operator[0].poll() is not None:
            self.monitoring_operator = po.start(self.kubeconfig, self.workdir)
        return self.monitoring_operator[1]

    def stop_prometheus_operator(self) -> None:
        if self.monitoring_operator is not None:
            stop([self.monitoring_operator[0]])
            self.monitoring_operator = None

    def list(self, api_version: str, kind: str, namespace: str) -> list[dict[str, Any]]:
        resource = self.dynamic.resources.get(api_version=api_version, kind=kind)
        return [i.to_dict() for i in self.dynamic.get(resource, namespace=namespace).items]

    def namespace(self, name: str) -> str:
        try:
            self.core.create_namespace({"metadata": {"name": name}})
        except ApiException as exc:
            if exc.status != 409:
                raise
        wait_for(
            f"default ServiceAccount in {name}",
            lambda: self.core.read_namespaced_service_account("default", name),
        )
        return name

    def wait_crds(self, names: Iterable[str]) -> None:
        ext = client.ApiextensionsV1Api(self.api)
        for n in names:
            wait_for(f"CRD {n} Established", lambda n=n: any(
                c.type == "Established" and c.status == "True" for c in (ext.read_custom_resource_definition(n).status.conditions or [])
            ))  # fmt: skip
        self.dynamic.resources.invalidate_cache()

    # ---- trainguard installation ----

    def install(self, extra_crds: list[Path]) -> None:
        """CRDs (trainguard's, prometheus-operator's, kopf peering), namespace, RBAC and the Secret-write
        policy (DEPLOY_FILES), peering object."""
        sources = [*sorted((REPO / "crds").glob("*.yaml")), REPO / "deploy" / "peering-crd.yaml", *extra_crds]
        crds = [load_all(p)[0] for p in sources]
        self.apply(crds)
        self.wait_crds(c["metadata"]["name"] for c in crds)
        self.apply_file(REPO / "deploy" / "peering.yaml")
        self.namespace(OPERATOR_NS)
        for name in DEPLOY_FILES:
            self.apply_file(REPO / "deploy" / name)

    def operator_kubeconfig(self) -> Path:
        """A kubeconfig holding a token of the operator's ServiceAccount: the e2e operator runs with
        exactly the RBAC of deploy/ (DEPLOY_FILES), not as cluster-admin."""
        token = self.core.create_namespaced_service_account_token(
            "trainguard-operator", OPERATOR_NS, {"spec": {"expirationSeconds": 7200}}
        ).status.token
        admin = yaml.safe_load(self.kubeconfig.read_text())
        current = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
        cluster = next(c for c in admin["clusters"] if c["name"] == current["context"]["cluster"])
        path = self.workdir / "operator.kubeconfig"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
            "users": [{"name": "operator", "user": {"token": token}}],
            "contexts": [{"name": "operator", "context": {"cluster": cluster["name"], "user": "operator"}}],
            "current-context": "operator",
        }))  # fmt: skip
        return path

    def webhook_certs(self, host: str) -> tuple[Path, Path, Path]:
        d = self.workdir / "webhook"
        if not (d / "webhook.crt").exists():
            d.mkdir(exist_ok=True)
            make_ca(d, "webhook-ca")
            san = f"IP:{host}" if host.replace(".", "").isdigit() else f"DNS:{host}"
            make_cert(d, "webhook", f"/CN={host}", [san], ca="webhook-ca")
        return d / "webhook.crt", d / "webhook.key", d / "webhook-ca.crt"

    def start_operator(
        self,
        priority: int,
        name: str = "operator",
        *,
        manage_webhook: bool = True,
        extra: tuple[str, ...] = (),
        keep_ports: bool = False,
    ) -> subprocess.Popen[bytes]:
        """Start `trainguard operator` and wait until kopf reports it alive. A replica started with
        `manage_webhook=False` serves admission on its own port (webhook_ports[name]) without pointing
        the cluster's webhook configuration at itself. The receiver (receiver_ports[name]) is where
        sidecars and Alertmanager post; `keep_ports` restarts a replica where it was before."""
        host = os.environ.get("TRAINGUARD_E2E_WEBHOOK_HOST", "127.0.0.1")
        cert, key, ca = self.webhook_certs(host)
        health = free_port()
        if keep_ports and name in self.webhook_ports:
            port, receiver_port = self.webhook_ports[name], self.receiver_ports[name]
        else:
            # kept across a restart with keep_ports: below the ephemeral range, where no other process's
            # port-0 bind can take them while this replica is down
            port, receiver_port = lasting_port(), lasting_port()
        self.webhook_ports[name] = port
        self.receiver_ports[name] = receiver_port
        self.metrics_ports[name] = free_port()
        log = (self.workdir / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainguard.cli", "operator",
             "--kubeconfig", str(self.operator_kubeconfig()), "--priority", str(priority),
             "--webhook-addr", "0.0.0.0" if host != "127.0.0.1" else "127.0.0.1", "--webhook-port", str(port),
             "--webhook-url", f"https://{host}:{port}",
             "--webhook-cert", str(cert), "--webhook-key", str(key), "--webhook-ca", str(ca),
             "--receiver-url", f"https://{host}:{receiver_port}", "--liveness", f"http://127.0.0.1:{health}/healthz",
             "--receiver-addr", "127.0.0.1", "--receiver-port", str(receiver_port),
             # short periods, so the e2e tests see a resync and a pod count within seconds
             "--resync-seconds", str(RESYNC_SECONDS), "--pods-seconds", "2",
             "--secret-rewrite-seconds", str(RESYNC_SECONDS),
             # a metrics port of its own (the default :8081 is one per host; `extra` may name another)
             "--metrics-addr", f"127.0.0.1:{self.metrics_ports[name]}",
             *([] if manage_webhook else ["--no-manage-webhook"]), *extra],
            stdout=log, stderr=subprocess.STDOUT, env=os.environ | {"PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        self.operators.append(proc)

        def alive() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"operator exited with {proc.returncode}:\n{self.operator_logs()}")
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/healthz", timeout=2) as resp:
                return bool(resp.status == 200)

        # the operator's imports and startup take seconds on a quiet machine; a CI run starved by three e2e
        # workers at load 12 once took over a minute
        wait_for("the operator's liveness endpoint", alive, timeout=180)
        return proc

    def metrics_url(self, name: str = "operator") -> str:
        """The replica's own /metrics base URL (unless `extra` named another --metrics-addr)."""
        return f"http://127.0.0.1:{self.metrics_ports[name]}"

    def receiver_url(self, name: str = "operator") -> str:
        host = os.environ.get("TRAINGUARD_E2E_WEBHOOK_HOST", "127.0.0.1")
        return f"https://{host}:{self.receiver_ports[name]}"

    def stop_operator(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc in self.operators:
            self.operators.remove(proc)

    def stop_all_operators(self) -> None:
        for proc in list(self.operators):
            self.stop_operator(proc)

    @contextmanager
    def operators_aside(self) -> Iterator[None]:
        """The session's operator steps aside for the block (it would lead: its resume pass would take up,
        or refuse as unsigned, the records a test writes for replicas of its own) and comes back; any
        replica the block started is stopped."""
        had = bool(self.operators)
        self.stop_all_operators()
        try:
            yield
        finally:
            self.stop_all_operators()
            if had:
                self.start_operator(priority=100, keep_ports=True)

    def operator_logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-6000:] for p in sorted(self.workdir.glob("operator*.log"))
        )

    def start_fake_nodes(self, prefix: str, count: int) -> subprocess.Popen[bytes]:
        log = (self.workdir / "fake-kubelet.log").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "e2e.controlplane.fakekubelet", "--kubeconfig", str(self.kubeconfig),
             "--nodes", str(count), "--prefix", prefix, "--control-dir", str(self.workdir / "kubelet")],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip
        wait_for(
            f"{count} fake nodes",
            lambda: len(self.core.list_node(label_selector=FAKE_NODE_LABEL).items) >= count,
        )
        return proc

    def delete_fake_nodes(self) -> None:
        for node in self.core.list_node(label_selector=FAKE_NODE_LABEL).items:
            self.core.delete_node(node.metadata.name)

    def events(self, namespace: str, name: str, reason: str) -> list[client.CoreV1Event]:
        items = self.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
        return [e for e in items if e.reason == reason]


def new_workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="trainguard-e2e-run-"))
