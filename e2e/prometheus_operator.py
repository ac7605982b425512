"""The real prometheus-operator, run against the cluster, and what the kubelet and the config-reloader do
with the StatefulSets it makes, for a Prometheus and an Alertmanager run as local processes.

prometheus-operator (built from its Go module by e2e/controlplane/build.sh, cached by version) watches the
Prometheus and Alertmanager objects a test creates and everything they select (PrometheusRules,
PodMonitors, AlertmanagerConfigs and the Secrets they name) and writes what it always writes: the
configuration Secrets, the rule ConfigMaps and a StatefulSet per object. No kubelet runs those pods here
(their nodeSelector matches no node), so `Materializer` does its part for the first replica: it mounts the
volumes of the StatefulSet's main container under a local folder (a Secret's or ConfigMap's keys as files,
subPath mounts as single files), and does the config-reloader's (`--config-file` gunzipped, its
`$(VAR)`s expanded from the reloader's env, written to `--config-envsubst-file`). The paths in the
configuration are the container's mount paths; they are rewritten to the local folders, which is all that
differs from the pod. The local Prometheus and Alertmanager read that configuration and are told to
reload when any mounted file changes, as the config-reloader tells them.

Prometheus discovers its scrape targets itself, with the kubernetes_sd_configs prometheus-operator writes
for each PodMonitor, against the apiserver named by the Prometheus object's `apiserverConfig` (in a pod
it would use its ServiceAccount).
"""

from __future__ import annotations

import base64
import gzip
import re
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from e2e.controlplane.cache import cache_dir
from tests.processes import free_port, wait_for

Obj = dict[str, Any]
GROUP, VERSION = "monitoring.coreos.com", "v1"
NOWHERE = {"e2e.trainguard.io/no-kubelet": "true"}
"""The nodeSelector of every Prometheus and Alertmanager made here: their pods stay Pending (the local
processes stand in for them), and the fake kubelet never marks them Running."""


def binary(name: str = "prometheus-operator") -> Path:
    """prometheus-operator, or the Prometheus built for it (Debian's has no Kubernetes discovery)."""
    path = cache_dir() / "bin" / "current" / name
    if not path.exists():
        raise FileNotFoundError(f"{path}: run e2e/controlplane/build.sh {name}")
    return path


@dataclass(frozen=True)
class Credentials:
    """How a process outside the cluster reaches the apiserver: prometheus-operator's --apiserver and its
    certificate flags, and the Prometheus object's apiserverConfig."""

    server: str
    ca: Path
    cert: Path
    key: Path

    @classmethod
    def from_kubeconfig(cls, kubeconfig: Path, workdir: Path) -> Credentials:
        conf = yaml.safe_load(kubeconfig.read_text())
        ctx = next(c for c in conf["contexts"] if c["name"] == conf["current-context"])["context"]
        cluster = next(c for c in conf["clusters"] if c["name"] == ctx["cluster"])["cluster"]
        user = next(u for u in conf["users"] if u["name"] == ctx["user"])["user"]

        def path(section: Obj, key: str, name: str) -> Path:
            if key in section:
                return Path(section[key])
            if f"{key}-data" in section:  # kind writes the certificates into the kubeconfig
                out = workdir / f"prometheus-operator-{name}"
                out.write_bytes(base64.b64decode(section[f"{key}-data"]))
                return out
            raise ValueError(f"{kubeconfig}: prometheus-operator runs outside the cluster with a client "
                             f"certificate; the kubeconfig's user has no {key}")  # fmt: skip

        return cls(
            server=cluster["server"],
            ca=path(cluster, "certificate-authority", "ca.crt"),
            cert=path(user, "client-certificate", "client.crt"),
            key=path(user, "client-key", "client.key"),
        )

    def apiserver_config(self) -> Obj:
        return {"host": self.server,
                "tlsConfig": {"caFile": str(self.ca), "certFile": str(self.cert), "keyFile": str(self.key)}}  # fmt: skip


def start(kubeconfig: Path, workdir: Path) -> tuple[subprocess.Popen[bytes], Credentials]:
    """prometheus-operator as a process, with its caches synced (its /healthz answers only then)."""
    creds = Credentials.from_kubeconfig(kubeconfig, workdir)
    port = free_port()
    log = (workdir / "prometheus-operator.log").open("ab")
    proc = subprocess.Popen(
        [str(binary()), f"--apiserver={creds.server}", f"--ca-file={creds.ca}", f"--cert-file={creds.cert}",
         f"--key-file={creds.key}", f"--web.listen-address=127.0.0.1:{port}", "--log-level=info"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"prometheus-operator exited:\n{logs(workdir)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    wait_for("prometheus-operator healthy", healthy, timeout=60)
    return proc, creds


def logs(workdir: Path) -> str:
    path = workdir / "prometheus-operator.log"
    return path.read_text(errors="replace")[-4000:] if path.exists() else ""


def prometheus(name: str, ns: str, creds: Credentials, *, interval: str, alertmanagers_secret: str,
               selectors: Obj | None = None) -> Obj:  # fmt: skip
    """A Prometheus object for a local Prometheus 2.42 (Debian's): its Alertmanager is named in an
    additionalAlertManagerConfigs Secret (a static target, the local process), and `selectors` are the
    rule and PodMonitor selectors (every one in every namespace unless given)."""
    spec: Obj = {
        "version": "v2.42.0", "replicas": 1, "nodeSelector": NOWHERE,
        "scrapeInterval": interval, "evaluationInterval": interval,
        "apiserverConfig": creds.apiserver_config(),
        "additionalAlertManagerConfigs": {"name": alertmanagers_secret, "key": "alertmanagers.yaml"},
        "ruleSelector": {}, "ruleNamespaceSelector": {},
        "podMonitorSelector": {}, "podMonitorNamespaceSelector": {},
        "serviceMonitorSelector": {}, "serviceMonitorNamespaceSelector": {},
        **(selectors or {}),
    }  # fmt: skip
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Prometheus",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}  # fmt: skip


def alertmanager(name: str, ns: str, *, spec: Obj | None = None) -> Obj:
    """An Alertmanager object for a local Alertmanager 0.25 (Debian's), selecting every AlertmanagerConfig
    in every namespace unless `spec` says otherwise."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Alertmanager", "metadata": {"name": name, "namespace": ns},
        "spec": {"version": "v0.25.0", "replicas": 1, "nodeSelector": NOWHERE,
                 "alertmanagerConfigSelector": {}, "alertmanagerConfigNamespaceSelector": {}, **(spec or {})},
    }  # fmt: skip


def alertmanagers_secret(name: str, ns: str, target: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
            "stringData": {"alertmanagers.yaml": yaml.safe_dump([{"static_configs": [{"targets": [target]}]}])}}  # fmt: skip


# ---- the kubelet's and the config-reloader's part ----


def _flag(args: list[str], name: str) -> str | None:
    prefix = f"--{name}="
    return next((a[len(prefix) :] for a in args if a.startswith(prefix)), None)


def _volume_files(
    volume: Obj, secrets: dict[str, Obj], configmaps: dict[str, Obj]
) -> dict[str, bytes] | None:
    """The files a volume holds, by name; None for a volume whose source is not there yet (the kubelet
    would not start the pod)."""

    def keys(kind: str, ref: Obj) -> dict[str, bytes] | None:
        if kind == "secret":
            obj = secrets.get(ref.get("secretName") or ref.get("name", ""))
            if obj is None:
                return None if not ref.get("optional") else {}
            data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        else:
            obj = configmaps.get(ref["name"])
            if obj is None:
                return None if not ref.get("optional") else {}
            data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
            data |= {k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()}
        if ref.get("items"):
            return {i["path"]: data[i["key"]] for i in ref["items"] if i["key"] in data}
        return data

    if "secret" in volume:
        return keys("secret", volume["secret"])
    if "configMap" in volume:
        return keys("configMap", volume["configMap"])
    if "projected" in volume:
        out: dict[str, bytes] = {}
        for source in volume["projected"].get("sources") or []:
            kind = "secret" if "secret" in source else "configMap" if "configMap" in source else None
            if kind is None:
                continue  # a ServiceAccount token or downward API: nothing the configuration reads
            got = keys(kind, source[kind])
            if got is None:
                return None
            out |= got
        return out
    return {}  # emptyDir: a folder


@dataclass
class Materializer:
    """Mounts one StatefulSet's volumes for its container `container` (and its config-reloader) under `root`
    and writes its
    configuration as the config-reloader would; `sync` says whether anything changed."""

    root: Path
    container: str
    written: dict[Path, bytes] = field(default_factory=dict)

    @property
    def config(self) -> Path:
        return self.root / "config_out.yaml"

    def sync(self, sts: Obj, secrets: dict[str, Obj], configmaps: dict[str, Obj]) -> bool | None:
        """True when a file changed, False when none did, None when the configuration is not there yet."""
        spec = sts["spec"]["template"]["spec"]
        main = next(c for c in spec["containers"] if c["name"] == self.container)
        reloader = next(c for c in spec["containers"] if c["name"] == "config-reloader")
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        mounts: dict[str, Path] = {}
        files: dict[Path, bytes] = {}
        # the main container's mounts and the config-reloader's (which alone mounts the generated Secret)
        for m in sorted([*(main.get("volumeMounts") or []), *(reloader.get("volumeMounts") or [])],
                        key=lambda m: m["mountPath"]):  # fmt: skip
            content = _volume_files(volumes[m["name"]], secrets, configmaps)
            if content is None:
                return None
            local = self.root / "volumes" / m["name"]
            if m.get("subPath"):
                mounts[m["mountPath"]] = local / m["subPath"]
            else:
                mounts[m["mountPath"]] = local
                local.mkdir(parents=True, exist_ok=True)
            for key, data in content.items():
                if not m.get("subPath") or key == m["subPath"]:
                    files[local / key] = data
        source, out = (
            _flag(reloader.get("args") or [], "config-file"),
            _flag(reloader.get("args") or [], "config-envsubst-file"),
        )
        if source is None or out is None:
            raise AssertionError(f"{sts['metadata']['name']}: its config-reloader names no --config-file")
        raw = files.get(self._local(source, mounts))
        if raw is None:
            return None
        text = gzip.decompress(raw).decode() if source.endswith(".gz") else raw.decode()
        env = {e["name"]: e.get("value", f"{sts['metadata']['name']}-0") for e in reloader.get("env") or []}
        text = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), text)
        files[self.config] = self.rewrite(text, mounts).encode()
        changed = False
        for path, data in files.items():
            if self.written.get(path) == data:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(data)
            tmp.replace(path)  # whole, never truncated under a reader
            self.written[path] = data
            changed = True
        return changed

    @staticmethod
    def _local(path: str, mounts: dict[str, Path]) -> Path:
        for mount in sorted(mounts, key=len, reverse=True):
            if path == mount or path.startswith(mount + "/"):
                return Path(str(mounts[mount]) + path[len(mount) :])
        raise AssertionError(f"{path} is on no volume the container mounts")

    @staticmethod
    def rewrite(text: str, mounts: dict[str, Path]) -> str:
        """Every mount path in the configuration, as the local folder or file it is here."""
        if not mounts:
            return text
        # one pass, longest first, whole paths only: a local folder may hold a mount path's text
        alternatives = "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
        pattern = re.compile(rf"(?<![\w/.-])({alternatives})(?=[/\s\"']|$)", re.M)
        return pattern.sub(lambda m: str(mounts[m.group(1)]), text)


def read_for(
    core: client.CoreV1Api, apps: client.AppsV1Api, ns: str, sts_name: str
) -> tuple[Obj | None, dict[str, Obj], dict[str, Obj]]:
    """The StatefulSet and the Secrets and ConfigMaps of its namespace, as plain dicts."""
    ser = core.api_client.sanitize_for_serialization
    try:
        sts = ser(apps.read_namespaced_stateful_set(sts_name, ns))
    except client.ApiException as exc:
        if exc.status == 404:
            return None, {}, {}
        raise
    secrets = {s.metadata.name: ser(s) for s in core.list_namespaced_secret(ns).items}
    configmaps = {c.metadata.name: ser(c) for c in core.list_namespaced_config_map(ns).items}
    return sts, secrets, configmaps
