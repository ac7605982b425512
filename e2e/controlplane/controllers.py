"""The real training controllers, JobSet, Kueue, Kubeflow Trainer v2 and the Kubeflow training-operator,
as local processes against the local control plane, as the operator runs: each built by build.sh from
its Go module, its CRDs applied as its module ships them, its admission (and conversion) webhooks
served on a loopback port with a certificate of the e2e webhook CA (Cluster.webhook_certs), and its
webhook configurations, made from its module's kustomize folder, pointing at
`https://127.0.0.1:<port>/<path>` with that CA as their caBundle.

Each runs with an admin kubeconfig, leader election off, metrics and health on free loopback ports and
its own certificate management off (their cert-controllers make certificates for a Service's DNS name,
which a URL webhook on loopback cannot use; the training-operator's cannot be turned off, and is handed
a certificate it keeps). Where a controller reads files at fixed paths (Kueue's
metrics certificate in /etc/kueue/metrics/certs, the training-operator's serving certificate in
/tmp/k8s-webhook-server/serving-certs), the harness bind-mounts its own folders there in a mount
namespace of the controller's own (`unshare --mount`, as root), as a kubelet mounts a pod's volumes:
only empty mount points are left on the host."""

from __future__ import annotations

import base64
import contextlib
import copy
import os
import shlex
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.cluster import Cluster, load_all
from e2e.controlplane.cache import cache_dir
from e2e.controlplane.certs import make_ca, make_cert
from e2e.controlplane.local import die_with_parent, log
from tests.processes import free_port, wait_for

HERE = Path(__file__).resolve().parent
HOST = "127.0.0.1"
ADMISSION_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@dataclass(frozen=True)
class Ports:
    webhook: int
    metrics: int
    health: int
    extra: int
    """A controller's other server (Trainer's status server)."""


@dataclass
class Launch:
    """How one controller is started: its arguments, and what it needs around it."""

    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    mounts: dict[str, Path] = field(default_factory=dict)
    """Fixed paths the controller reads or writes (container path -> host folder), bind-mounted in a
    mount namespace of its own."""
    objects: list[dict[str, Any]] = field(default_factory=list)
    """Applied before it starts (its namespace, a Secret it expects)."""
    ca: Path | None = None
    """The CA its webhook certificate is signed by, where not the e2e webhook CA."""
    keep_config_names: bool = False
    """Its webhook configurations keep their names (a controller that patches its own looks them up by
    name); otherwise they are prefixed with the controller's name, as JobSet, Kueue and Trainer all
    name theirs `mutating-webhook-configuration` upstream."""


@dataclass(frozen=True)
class Spec:
    name: str
    """build.sh's target, and the binary's and manifests' stable name in the cache."""
    crds: str
    """The folder of its CRDs in its module (manifests/current/<name>/...)."""
    webhooks: str
    """The kustomize folder of its webhook configurations."""
    launch: Callable[[Cluster, Ports, Path], Launch]
    crd_patches: str | None = None
    """The folder of the kustomize patches that give CRDs a conversion webhook (webhook_in_<plural>.yaml)."""
    needs_root: bool = False
    """It reads or writes fixed paths that the harness mounts (Launch.mounts)."""


@dataclass
class Controller:
    """A running controller and what the tests measure about it."""

    name: str
    proc: subprocess.Popen[bytes]
    dir: Path
    ports: Ports
    ready_seconds: float
    webhook_configs: list[tuple[str, str]] = field(default_factory=list)
    """(kind, name) of the webhook configurations registered for it."""
    served_paths: list[str] = field(default_factory=list)
    dropped_paths: list[str] = field(default_factory=list)
    """Webhook paths of its configurations that its server does not serve (an integration left off):
    not registered, as a failurePolicy Fail webhook without a handler would refuse every object."""

    def rss_mib(self) -> float:
        """Its resident memory now (VmRSS), in MiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError(f"{self.name}: no VmRSS for pid {self.proc.pid}")

    def log(self) -> str:
        return (self.dir / "controller.log").read_text(errors="replace")


# ---- kustomize, the little of it the modules' webhook and CRD folders use -------------------------


def _pointer(doc: Any, path: str) -> tuple[Any, str | int]:
    """The parent of a JSON pointer's target and the target's key (an index for a list)."""
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]
    for p in parts[:-1]:
        doc = doc[int(p)] if isinstance(doc, list) else doc[p]
    last = parts[-1]
    return doc, (int(last) if isinstance(doc, list) and last != "-" else last)


def json6902(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for op in ops:
        parent, key = _pointer(out, op["path"])
        if op["op"] in ("replace", "add"):
            if isinstance(parent, list) and op["op"] == "add":
                parent.insert(len(parent) if key == "-" else int(key), op["value"])
            else:
                parent[key] = op["value"]
        elif op["op"] == "remove":
            del parent[key]
        else:
            raise ValueError(f"JSON patch op {op['op']!r} at {op['path']} is not handled by the e2e harness")
    return out


def strategic_merge(doc: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A strategic merge patch of a webhook configuration: maps merge, `webhooks` merge by name."""
    out = copy.deepcopy(doc)
    for key, value in patch.items():
        if key == "webhooks":
            by_name = {w["name"]: w for w in out.get("webhooks", [])}
            for w in value:
                if w["name"] in by_name:
                    by_name[w["name"]].update(copy.deepcopy(w))
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = strategic_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _targets(doc: dict[str, Any], target: dict[str, Any] | None, patch: Any) -> bool:
    """Whether a patch applies to `doc`: its target's kind and name, or a strategic patch's own."""
    if target is not None:
        return doc["kind"] == target.get("kind", doc["kind"]) and doc["metadata"]["name"] == target.get(
            "name", doc["metadata"]["name"]
        )
    return bool(
        isinstance(patch, dict)
        and patch.get("kind") == doc["kind"]
        and patch.get("metadata", {}).get("name") == doc["metadata"]["name"]
    )


def kustomize(folder: Path) -> list[dict[str, Any]]:
    """The admission configurations of a kustomize folder with its patches applied (its Service and
    other resources left out: the webhooks are called by URL)."""
    k = yaml.safe_load((folder / "kustomization.yaml").read_text())
    docs = [
        d for r in k.get("resources", []) for d in load_all(folder / r) if d.get("kind") in ADMISSION_KINDS
    ]
    for entry in k.get("patches", []) or []:
        patch = (
            yaml.safe_load(entry["patch"])
            if "patch" in entry
            else yaml.safe_load((folder / entry["path"]).read_text())
        )
        target = entry.get("target")
        for i, d in enumerate(docs):
            if not _targets(d, target, patch):
                continue
            docs[i] = json6902(d, patch) if isinstance(patch, list) else strategic_merge(d, patch)
    return docs


def _crd_conversions(folder: Path | None) -> dict[str, str]:
    """CRD name -> conversion webhook path, from webhook_in_<plural>.yaml patches."""
    if folder is None or not folder.is_dir():
        return {}
    out = {}
    for p in sorted(folder.glob("webhook_in_*.yaml")):
        doc = yaml.safe_load(p.read_text())
        hook = doc["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
        out[doc["metadata"]["name"]] = hook.get("path", "/convert")
    return out


# ---- the pieces ------------------------------------------------------------------------------------


def ensure_built(name: str) -> tuple[Path, Path]:
    """Build or reuse the controller (build.sh waits for a build in progress); its binary and manifests."""
    subprocess.run([str(HERE / "build.sh"), name], check=True)
    return cache_dir() / "bin" / "current" / name, (cache_dir() / "manifests" / "current" / name).resolve()


def crds(spec: Spec, manifests: Path, url: str, ca: bytes) -> list[dict[str, Any]]:
    """Its CRDs; those its module gives a conversion webhook convert through `url` (which serves the
    versions that the apiserver would otherwise hand over unconverted)."""
    conversions = _crd_conversions(manifests / spec.crd_patches if spec.crd_patches else None)
    out = []
    for path in sorted((manifests / spec.crds).glob("*.yaml")):
        for doc in load_all(path):
            if doc.get("kind") != "CustomResourceDefinition":
                continue
            name = doc["metadata"]["name"]
            if name in conversions and len(doc["spec"]["versions"]) > 1:
                doc["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "conversionReviewVersions": ["v1"],
                        "clientConfig": {
                            "url": url + conversions[name],
                            "caBundle": base64.b64encode(ca).decode(),
                        },
                    },
                }
            out.append(doc)
    return out


def served(url: str, ca: Path) -> bool:
    """Whether the webhook server has a handler at `url`: controller-runtime answers an empty review at
    a registered path (200 or 400), and 404 elsewhere."""
    ctx = ssl.create_default_context(cafile=str(ca))
    req = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=5):
            return True
    except urllib.error.HTTPError as exc:
        return exc.code != 404
    except (urllib.error.URLError, OSError):  # the webhook server not listening yet
        return False


WEBHOOKS_TIMEOUT_S = 30.0
"""How long a controller ready by /readyz may take to register its webhook handlers: JobSet and Kueue
register them only once their certificate rotator says the certificates are ready, after /readyz
answers, and a webhook dropped in that window leaves its objects undefaulted (JobSet then creates no
Jobs)."""


def pointed_at(
    configs: list[dict[str, Any]], prefix: str | None, url: str, ca: bytes
) -> list[dict[str, Any]]:
    """The webhook configurations with every webhook called at `url` + its path, trusting `ca`."""
    out = []
    for original in configs:
        doc = copy.deepcopy(original)
        meta = doc["metadata"]
        doc["metadata"] = {"name": f"{prefix}-{meta['name']}" if prefix else meta["name"],
                           "labels": {"trainguard.io/e2e-controller": prefix or "kept"}}  # fmt: skip
        for w in doc["webhooks"]:
            path = w["clientConfig"]["service"].get("path", "/")
            w["clientConfig"] = {"url": url + path, "caBundle": base64.b64encode(ca).decode()}
        out.append(doc)
    return out


def _spawn(binary: Path, launch: Launch, run_dir: Path) -> subprocess.Popen[bytes]:
    argv = [str(binary), *launch.args]
    if launch.mounts:
        if os.geteuid() != 0:
            raise PermissionError(
                f"{binary.name} reads {', '.join(launch.mounts)}: the harness bind-mounts its folders there in "
                "a mount namespace, which needs root (CI runs as root)"
            )
        script = "set -e; "
        for target, source in launch.mounts.items():
            Path(target).mkdir(parents=True, exist_ok=True)  # the mount point: an empty folder on the host
            script += f"mount --bind {shlex.quote(str(source))} {shlex.quote(target)}; "
        argv = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script + 'exec "$@"',
            "sh",
            *argv,
        ]
    out = (run_dir / "controller.log").open("ab")
    return subprocess.Popen(
        argv,
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=run_dir,
        env=os.environ | launch.env,
        preexec_fn=die_with_parent,  # noqa: PLW1509 - before any thread of ours starts in the child
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _ready(proc: subprocess.Popen[bytes], name: str, run_dir: Path, health: int) -> Callable[[], bool]:
    def probe() -> bool:
        if proc.poll() is not None:
            tail = (run_dir / "controller.log").read_text(errors="replace")[-4000:]
            raise AssertionError(f"{name} exited with {proc.returncode}; its log ends:\n{tail}")
        with urllib.request.urlopen(f"http://{HOST}:{health}/readyz", timeout=2) as resp:
            return bool(resp.status == 200)

    return probe


@contextlib.contextmanager
def run_controller(cluster: Cluster, spec: Spec, *, ready_timeout: float = 120) -> Iterator[Controller]:
    """Build (or reuse), install and start `spec`'s controller; on exit, unregister its webhooks and stop
    it. Its CRDs stay (objects of them may outlive the test, and the next controller may want them)."""
    binary, manifests = ensure_built(spec.name)
    run_dir = cluster.workdir / "controllers" / spec.name
    shutil.rmtree(run_dir, ignore_errors=True)
    certs = run_dir / "certs"
    certs.mkdir(parents=True)
    cert, key, ca = cluster.webhook_certs(HOST)
    shutil.copy(cert, certs / "tls.crt")
    shutil.copy(key, certs / "tls.key")
    shutil.copy(ca, certs / "ca.crt")
    ports = Ports(free_port(), free_port(), free_port(), free_port())
    url = f"https://{HOST}:{ports.webhook}"
    launch = spec.launch(cluster, ports, run_dir)
    ca = launch.ca or ca
    ca_pem = ca.read_bytes()

    definitions = crds(spec, manifests, url, ca_pem)
    cluster.apply(definitions)
    cluster.wait_crds(d["metadata"]["name"] for d in definitions)
    cluster.apply(launch.objects)
    # registered before it starts, as its Deployment and these would be applied together (a controller
    # that patches its own configuration's caBundle waits for it to exist)
    configs = pointed_at(kustomize(manifests / spec.webhooks), None if launch.keep_config_names else spec.name,
                         url, ca_pem)  # fmt: skip
    cluster.apply(configs)
    admission = client.AdmissionregistrationV1Api(cluster.api)

    def delete(kind: str, name: str) -> None:
        remove = (admission.delete_mutating_webhook_configuration if kind == ADMISSION_KINDS[0]
                  else admission.delete_validating_webhook_configuration)  # fmt: skip
        with contextlib.suppress(ApiException):
            remove(name)

    t0 = time.monotonic()
    proc = _spawn(binary, launch, run_dir)
    ctl = Controller(
        spec.name, proc, run_dir, ports, 0.0, [(d["kind"], d["metadata"]["name"]) for d in configs]
    )
    try:
        try:
            wait_for(
                f"{spec.name}'s /readyz",
                _ready(proc, spec.name, run_dir, ports.health),
                timeout=ready_timeout,
            )
        except AssertionError as exc:
            # the lines before its probes' repeated failures say why
            lines = [ln for ln in ctl.log().splitlines() if "healthz check failed" not in ln]
            raise AssertionError(f"{exc}\n{spec.name}'s log ends:\n" + "\n".join(lines[-30:])) from None
        ctl.ready_seconds = time.monotonic() - t0
        urls = [w["clientConfig"]["url"] for doc in configs for w in doc["webhooks"]]
        if urls:  # the handlers are registered together: once one answers, the rest are checked once
            with contextlib.suppress(AssertionError):
                wait_for(f"{spec.name}'s webhook handlers", lambda: any(served(u, ca) for u in urls),
                         timeout=WEBHOOKS_TIMEOUT_S, interval=0.5)  # fmt: skip
        for doc in configs:  # a webhook without a handler would refuse what it matches: taken out
            keep = []
            for w in doc["webhooks"]:
                path = w["clientConfig"]["url"].removeprefix(url)
                (ctl.served_paths if served(w["clientConfig"]["url"], ca) else ctl.dropped_paths).append(path)
                if path in ctl.served_paths:
                    keep.append(w)
            if len(keep) < len(doc["webhooks"]):
                delete(doc["kind"], doc["metadata"]["name"])
                if keep:
                    cluster.apply([doc | {"webhooks": keep}])
        log(f"{spec.name} ready in {ctl.ready_seconds:.1f}s, {ctl.rss_mib():.0f} MiB resident, webhooks on {url} "
            f"({len(ctl.served_paths)} paths; not served, not registered: {ctl.dropped_paths or 'none'})")  # fmt: skip
        yield ctl
    finally:
        for kind, name in ctl.webhook_configs:
            delete(kind, name)
        with contextlib.suppress(Exception):
            log(f"{spec.name}: {ctl.rss_mib():.0f} MiB resident at the end")
        _stop(proc)


# ---- the four controllers ---------------------------------------------------------------------------


def _config(run_dir: Path, doc: dict[str, Any]) -> Path:
    path = run_dir / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _zap() -> list[str]:
    return ["--zap-log-level=info", "--zap-devel=false"]


def jobset_launch(cluster: Cluster, ports: Ports, run_dir: Path) -> Launch:
    certs = str(run_dir / "certs")
    config = _config(run_dir, {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": ports.webhook, "host": HOST, "certDir": certs},
        "metrics": {"bindAddress": f"{HOST}:{ports.metrics}", "certDir": certs},
        "health": {"healthProbeBindAddress": f"{HOST}:{ports.health}"},
    })  # fmt: skip
    return Launch([f"--kubeconfig={cluster.kubeconfig}", f"--config={config}", *_zap()])


KUEUE_NAMESPACE = "kueue-system"
KUEUE_FRAMEWORKS = ("batch/job", "jobset.x-k8s.io/jobset")
"""Kueue's integrations: a JobSet's is set up once the JobSet CRD is served (Kueue waits for it), and its
webhook is served from the start."""


def kueue_launch(
    cluster: Cluster, ports: Ports, run_dir: Path, frameworks: tuple[str, ...] = KUEUE_FRAMEWORKS
) -> Launch:
    config = _config(run_dir, {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": ports.webhook, "host": HOST, "certDir": str(run_dir / "certs")},
        "metrics": {"bindAddress": f"{HOST}:{ports.metrics}"},
        "health": {"healthProbeBindAddress": f"{HOST}:{ports.health}"},
        "integrations": {"frameworks": list(frameworks)},
        # its visibility API server (pending workloads, an aggregated API) writes a certificate to /visibility,
        # a folder at the root of the host's file system here: off, as nothing here asks it
        "featureGates": {"VisibilityOnDemand": False},
    })  # fmt: skip
    return Launch(
        [f"--kubeconfig={cluster.kubeconfig}", f"--config={config}", *_zap()],
        # with its certificate management off, Kueue serves metrics with the certificate mounted here
        mounts={"/etc/kueue/metrics/certs": run_dir / "certs"},
        objects=[_namespace(KUEUE_NAMESPACE)],
    )


def trainer_launch(cluster: Cluster, ports: Ports, run_dir: Path) -> Launch:
    # Trainer's configuration has no webhook certDir: controller-runtime's default is under $TMPDIR
    serving = run_dir / "tmp" / "k8s-webhook-server" / "serving-certs"
    serving.mkdir(parents=True)
    for f in ("tls.crt", "tls.key"):
        shutil.copy(run_dir / "certs" / f, serving / f)
    config = _config(run_dir, {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "certManagement": {"enable": False},
        "webhook": {"port": ports.webhook, "host": HOST},
        "metrics": {"bindAddress": f"{HOST}:{ports.metrics}", "secureServing": True},
        "health": {"healthProbeBindAddress": f"{HOST}:{ports.health}", "readinessEndpointName": "readyz",
                   "livenessEndpointName": "healthz"},
        "statusServer": {"port": ports.extra},
    })  # fmt: skip
    return Launch([f"--kubeconfig={cluster.kubeconfig}", f"--config={config}", *_zap()],
                  env={"TMPDIR": str(run_dir / "tmp")})  # fmt: skip


TRAINING_OPERATOR_NAMESPACE = "kubeflow"


def training_operator_launch(cluster: Cluster, ports: Ports, run_dir: Path) -> Launch:
    """The training-operator always runs its cert-controller, for `training-operator.kubeflow.svc`. It
    keeps the CA and certificate it finds in its Secret when they are valid (the CA for its CA name, the
    certificate for that DNS name), so the harness puts there a CA of that name and a certificate valid
    for 127.0.0.1 too, mounts the Secret's files at its fixed serving folder as the kubelet would, and
    the rotator puts the CA in its webhook configuration, found by name."""
    d = run_dir / "certs"
    make_ca(d, "training-operator-ca", cn="training-operator-ca", pkcs1=True)
    make_cert(d, "training-operator", f"/CN=training-operator.{TRAINING_OPERATOR_NAMESPACE}.svc",
              [f"DNS:training-operator.{TRAINING_OPERATOR_NAMESPACE}.svc", f"IP:{HOST}"], ca="training-operator-ca")  # fmt: skip
    data = {name: base64.b64encode((d / f).read_bytes()).decode() for name, f in
            (("ca.crt", "training-operator-ca.crt"), ("ca.key", "training-operator-ca.key"),
             ("tls.crt", "training-operator.crt"), ("tls.key", "training-operator.key"))}  # fmt: skip
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": data,
              "metadata": {"name": "training-operator-webhook-cert", "namespace": TRAINING_OPERATOR_NAMESPACE}}  # fmt: skip
    serving = run_dir / "serving-certs"  # its Secret's volume, as the kubelet would mount it
    serving.mkdir()
    for key, value in data.items():
        (serving / key).write_bytes(base64.b64decode(value))
    return Launch(
        [
            f"--kubeconfig={cluster.kubeconfig}",
            "--leader-elect=false",
            f"--webhook-server-port={ports.webhook}",
            f"--metrics-bind-address={HOST}:{ports.metrics}",
            f"--health-probe-bind-address={HOST}:{ports.health}",
            *_zap(),
        ],
        env={"MY_POD_NAMESPACE": TRAINING_OPERATOR_NAMESPACE},
        mounts={"/tmp/k8s-webhook-server/serving-certs": serving},
        objects=[_namespace(TRAINING_OPERATOR_NAMESPACE), secret],
        ca=d / "training-operator-ca.crt",
        keep_config_names=True,
    )


JOBSET = Spec("jobset", "config/components/crd/bases", "config/components/webhook", jobset_launch,
              crd_patches="config/components/crd/patches")  # fmt: skip
KUEUE = Spec("kueue", "config/components/crd/bases", "config/components/webhook", kueue_launch,
             crd_patches="config/components/crd/patches", needs_root=True)  # fmt: skip
TRAINER = Spec("trainer", "manifests/base/crds", "manifests/base/webhook", trainer_launch)
TRAINING_OPERATOR = Spec("training-operator", "manifests/base/crds", "manifests/base/webhook",
                         training_operator_launch, needs_root=True)  # fmt: skip


def manifests_dir(name: str) -> Path:
    """Where build.sh keeps the YAML of the controller's module (its sample runtimes, say)."""
    return (cache_dir() / "manifests" / "current" / name).resolve()
