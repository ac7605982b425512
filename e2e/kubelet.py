"""A pod run as the kubelet runs it, its containers local processes: for a component installed from a
manifest or a chart (the trainguard chart's operator Deployment, e2e/test_kube_prometheus_stack.py),
so that what runs is what the apiserver holds, with nothing the test passes besides.

From the pod as the apiserver has it (after admission: the ServiceAccount's kube-api-access volume is in
it), for each container:
- the command: `command` (else the image's ENTRYPOINT), then `args` (else the image's CMD), each
  `$(VAR)` expanded from the container's environment. No image is pulled: IMAGES says what each image
  stands for. For trainguard's image (Dockerfile: ENTRYPOINT ["trainguard"], PATH=/opt/trainguard/bin:...)
  that is the harness's virtual environment, whose bin folder is first on the image's PATH: the chart's
  `command: [trainguard, operator]` runs the venv's `trainguard` console script, on the code under test
  (PYTHONPATH=<repo>/operator, where the image has its installed package);
- the environment: the image's ENV, the service links (the pod's namespace's Services with
  enableServiceLinks, the `kubernetes` Service always), then `env` in order: value, fieldRef,
  secretKeyRef, configMapKeyRef, each value `$(VAR)`-expanded as the kubelet does;
- the volumes, written into folders of the pod: emptyDir, secret, configMap, downwardAPI and projected
  (a serviceAccountToken source is a token from the TokenRequest API, bound to the pod, with the source's
  audience and expiry: the container is the pod's ServiceAccount to the apiserver, and has the RBAC bound
  to it and nothing more), bind-mounted at their mountPaths (subPath, readOnly) in a mount namespace of the
  container's own, so a fixed path such as /var/run/secrets/kubernetes.io/serviceaccount (which the
  kubernetes client reads in a pod) is where the container looks; the pod's name as hostname (a UTS
  namespace);
- its output into <pod folder>/<container>.log and the CRI log file the fake kubelet serves as the pod's
  logs (`kubectl logs`);
- its startup and readiness probes (httpGet, tcpSocket) against the pod's IP: `ready`.

Anything else a pod asks for (another volume type, envFrom, resourceFieldRef, an exec probe, an init
container, an image not in IMAGES) is refused with an Unsupported error naming it, never run half-way.

What is not real: no container runtime (no image, cgroup or seccomp; the securityContext's user and
read-only root filesystem are not applied: the process runs as the harness's user, root, which the mount
namespace needs); no network namespace (e2e/podnetwork/sitecustomize.py turns a Python server's
wildcard listens into listens on the pod's IP, the loopback address the fake kubelet gave the pod); no
cluster DNS (a Service's name resolves nowhere; its ClusterIP is reachable where e2e/kubeproxy.py runs,
the `kubernetes` Service's included); volumes are written once (no Secret update or token rotation
reaches them); probes are not acted on (a failing liveness probe restarts nothing; the fake kubelet has
marked the pod Ready). A mount point missing on the host (/var/run/secrets/kubernetes.io/serviceaccount)
is created there, empty, as e2e/controlplane/controllers.py does for its fixed paths.
"""

from __future__ import annotations

import base64
import re
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.controlplane.fakekubelet import POD_LOG_DIR, pod_log_dir
from e2e.controlplane.local import die_with_parent
from e2e.podprocesses import _spawn_logged

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[1]
POD_NETWORK = Path(__file__).resolve().parent / "podnetwork"
"""Its sitecustomize.py binds the container's wildcard listens to the pod's IP (E2E_POD_IP)."""
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The PATH of the python:*-slim base image."""


class Unsupported(RuntimeError):
    """The pod asks for something this runner does not do; it names it."""


@dataclass(frozen=True)
class Image:
    """What an image stands for on this machine: bin folders first on its PATH, its ENV, WORKDIR,
    ENTRYPOINT and CMD, and where its Python code is (PYTHONPATH)."""

    path: tuple[str, ...]
    env: Mapping[str, str]
    workdir: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...] = ()
    pythonpath: tuple[str, ...] = ()


def trainguard_image() -> Image:
    """ghcr.io/trainguard/trainguard (the top-level Dockerfile): its /opt/trainguard virtual environment is
    the harness's, whose `trainguard` console script is the image's ENTRYPOINT; the code under test is
    imported from the checkout."""
    venv_bin = Path(sys.executable).parent
    if not (venv_bin / "trainguard").exists():
        raise Unsupported(f"{venv_bin}/trainguard: the image's entrypoint is the venv's console script; "
                          "install the project into the venv the tests run with (pip install -e .)")  # fmt: skip
    return Image(
        path=(str(venv_bin),),
        env={"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8"},
        workdir="/tmp",
        entrypoint=("trainguard",),
        cmd=("--help",),
        pythonpath=(str(REPO / "operator"),),
    )


IMAGES: dict[str, Callable[[], Image]] = {"ghcr.io/trainguard/trainguard": trainguard_image}


def image_roots() -> list[PurePosixPath]:
    """What the trainguard image stands for on this machine: the checkout (the code under test) and the
    venv, where it is not inside the checkout."""
    checkout, venv = Path(__file__).resolve().parents[1], Path(sys.prefix).resolve()
    roots = [checkout] if checkout in venv.parents else [checkout, venv]
    return [PurePosixPath(r) for r in roots]


"""Image repositories (no tag or digest) this runner can run, and what each stands for."""


def repository(image: str) -> str:
    """The image reference without its digest or tag."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


# ---- the environment ----

_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's $(VAR) expansion: a defined variable's value, an undefined reference kept as it is,
    $$ for a literal $."""
    return _REF.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def _env_name(name: str) -> str:
    return name.upper().replace("-", "_")


def service_links(services: list[Obj]) -> dict[str, str]:
    """The Docker-link variables the kubelet sets for each Service with a ClusterIP
    (pkg/kubelet/envvars): NAME_SERVICE_HOST, NAME_SERVICE_PORT[_PORTNAME], NAME_PORT[_N_PROTO[...]]."""
    out: dict[str, str] = {}
    for svc in services:
        spec = svc.get("spec") or {}
        ip, ports = spec.get("clusterIP"), spec.get("ports") or []
        if not ip or ip == "None" or not ports:
            continue
        prefix = _env_name(svc["metadata"]["name"])
        out[f"{prefix}_SERVICE_HOST"] = ip
        out[f"{prefix}_SERVICE_PORT"] = str(ports[0]["port"])
        for p in ports:
            if p.get("name"):
                out[f"{prefix}_SERVICE_PORT_{_env_name(p['name'])}"] = str(p["port"])
        for i, p in enumerate(ports):
            proto = (p.get("protocol") or "TCP").lower()
            url = f"{proto}://{ip}:{p['port']}"
            if i == 0:
                out[f"{prefix}_PORT"] = url
            each = f"{prefix}_PORT_{p['port']}_{proto.upper()}"
            out |= {each: url, f"{each}_PROTO": proto, f"{each}_PORT": str(p["port"]), f"{each}_ADDR": ip}
    return out


def field_value(pod: Obj, path: str) -> str:
    """A fieldRef's value, as the kubelet's downward API gives it."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    for kind in ("labels", "annotations"):
        if path.startswith(f"metadata.{kind}['") and path.endswith("']"):
            return str((meta.get(kind) or {}).get(path[len(kind) + 11 : -2], ""))
    values = {
        "metadata.name": meta["name"], "metadata.namespace": meta["namespace"], "metadata.uid": meta["uid"],
        "spec.nodeName": spec.get("nodeName", ""), "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": status.get("podIP", ""), "status.hostIP": status.get("hostIP", ""),
        "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs") or []),
        "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs") or []),
    }  # fmt: skip
    if path not in values:
        raise Unsupported(f"fieldRef {path!r} is not given by e2e/kubelet.py")
    return str(values[path])


# ---- the pod ----


@dataclass
class ContainerRun:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    spec: Obj

    def logs(self, tail: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-tail:] if self.log.exists() else ""


@dataclass
class PodRun:
    pod: Obj
    dir: Path
    containers: list[ContainerRun] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def ip(self) -> str:
        return str(self.pod["status"]["podIP"])

    def logs(self) -> str:
        return "\n".join(
            f"--- pod {self.name} container {c.name} ({self.ip})\n{c.logs()}" for c in self.containers
        )


class Kubelet:
    """Runs the pods of a namespace and label selector that the fake kubelet marked Running (`sync`), each
    container as a local process, as described above; a context manager that stops them all."""

    def __init__(self, api: client.ApiClient, workdir: Path) -> None:
        self.core = client.CoreV1Api(api)
        self.workdir = workdir
        self.runs: dict[str, PodRun] = {}

    def __enter__(self) -> Kubelet:
        return self

    def __exit__(self, *exc: object) -> None:
        for uid in list(self.runs):
            self.stop(uid)

    def sync(self, namespace: str, selector: str) -> list[PodRun]:
        """Start the Running pods not yet run and stop those deleted; the runs of the selected pods.
        Call it from a thread that lives as long as the pods (their processes die with it)."""
        pods = self.core.list_namespaced_pod(namespace, label_selector=selector).items
        live = {p.metadata.uid: p for p in pods if p.metadata.deletion_timestamp is None
                and p.status.phase == "Running" and p.status.pod_ip}  # fmt: skip
        for uid in [
            u for u, r in self.runs.items() if r.pod["metadata"]["namespace"] == namespace and u not in live
        ]:
            self.stop(uid)
        for uid, pod in live.items():
            if uid not in self.runs:
                self.runs[uid] = self.start(self.core.api_client.sanitize_for_serialization(pod))
        return [self.runs[u] for u in live]

    def start(self, pod: Obj) -> PodRun:
        meta, spec = pod["metadata"], pod["spec"]
        where = f"pod {meta['namespace']}/{meta['name']}"
        if spec.get("initContainers"):
            raise Unsupported(f"{where}: init containers are not run by e2e/kubelet.py")
        run = PodRun(pod, self.workdir / "pods" / f"{meta['name']}-{meta['uid'][:8]}")
        volumes = run.dir / "volumes"
        volumes.mkdir(parents=True, exist_ok=True)
        sources = {v["name"]: self._volume(pod, v, volumes / v["name"]) for v in spec.get("volumes") or []}
        links = self._links(pod)
        cri = self._cri_dir(pod)
        try:
            for c in spec["containers"]:
                run.containers.append(self._container(pod, c, sources, links, d=run.dir, cri=cri))
        except BaseException:
            self._stop_run(run)
            raise
        return run

    def stop(self, uid: str) -> None:
        self._stop_run(self.runs.pop(uid))

    def _stop_run(self, run: PodRun) -> None:
        grace = min(int(run.pod["spec"].get("terminationGracePeriodSeconds") or 30), 30)
        for c in run.containers:
            if c.proc.poll() is None:
                c.proc.send_signal(signal.SIGTERM)
        for c in run.containers:
            try:
                c.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                c.proc.kill()
                c.proc.wait()

    # ---- what the kubelet does for a container ----

    def _container(
        self, pod: Obj, c: Obj, sources: dict[str, Path], links: dict[str, str], *, d: Path, cri: Path | None
    ) -> ContainerRun:
        where = f"pod {pod['metadata']['namespace']}/{pod['metadata']['name']} container {c['name']}"
        if repository(c["image"]) not in IMAGES:
            raise Unsupported(f"{where}: image {c['image']} stands for nothing here (e2e/kubelet.py IMAGES)")
        image = IMAGES[repository(c["image"])]()
        for key in ("envFrom", "lifecycle"):
            if c.get(key):
                raise Unsupported(f"{where}: {key} is not run by e2e/kubelet.py")
        env = self._env(pod, c, links, where)
        argv = [expand(a, env) for a in c.get("command") or image.entrypoint]
        argv += [
            expand(a, env) for a in (c["args"] if "args" in c else [] if c.get("command") else image.cmd)
        ]
        # the command is looked up on the image's PATH: the image's bin folders are this machine's
        found = next(
            (Path(p) / argv[0] for p in env["PATH"].split(":") if (Path(p) / argv[0]).is_file()), None
        )
        if "/" not in argv[0]:
            if found is None:
                raise Unsupported(f"{where}: {argv[0]} is not on the image's PATH ({env['PATH']})")
            argv[0] = str(found)
        script = ["set -e", f"hostname {shlex.quote(pod['spec'].get('hostname') or pod['metadata']['name'])}",
                  f"cd {shlex.quote(str(d / 'volumes'))}"]  # fmt: skip
        # the image's files are this machine's checkout and venv: a mount over one of their parents (an
        # emptyDir at /tmp, when the checkout is under /tmp) would hide them, so they are bound aside first
        # and put back over the mounts at the end
        mounts = [PurePosixPath(m["mountPath"]) for m in c.get("volumeMounts") or []]
        covered = [r for r in image_roots() if any(r == t or t in r.parents for t in mounts)]
        for i, root in enumerate(covered):
            script += [f"mkdir -p .image-{i}", f"mount --bind {shlex.quote(str(root))} .image-{i}"]
        # parents first; each source named relative to the volumes folder, which stays reachable as the
        # working directory once a mount (/tmp, say) covers the path it has on the host
        for m in sorted(c.get("volumeMounts") or [], key=lambda m: m["mountPath"]):
            for key in ("subPathExpr", "mountPropagation", "recursiveReadOnly"):
                if m.get(key) and not (key == "mountPropagation" and m[key] == "None"):
                    raise Unsupported(f"{where}: volumeMount {m['name']} {key} is not run by e2e/kubelet.py")
            if m["name"] not in sources:
                raise Unsupported(f"{where}: volumeMount {m['name']} names no volume of the pod")
            source = sources[m["name"]] / m["subPath"] if m.get("subPath") else sources[m["name"]]
            rel = shlex.quote(str(source.relative_to(d / "volumes")))
            target = shlex.quote(m["mountPath"])
            if source.is_dir():
                script.append(f"mkdir -p {target}")
            else:  # a file's mount point is a file
                script.append(f'[ -e {target} ] || {{ mkdir -p "$(dirname {target})"; : > {target}; }}')
            script.append(f"mount --bind {rel} {target}")
            if m.get("readOnly"):
                script.append(f"mount -o remount,bind,ro {target}")
        for i, root in enumerate(covered):
            script += [
                f"mkdir -p {shlex.quote(str(root))}",
                f"mount --bind .image-{i} {shlex.quote(str(root))}",
            ]
        script.append(f"cd {shlex.quote(c.get('workingDir') or image.workdir)}")
        script.append('exec "$@"')
        log = d / f"{c['name']}.log"
        proc = _spawn_logged(
            ["unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c", "; ".join(script), "sh", *argv],
            log, cri / c["name"] / "0.log" if cri else None,
            env=env, preexec_fn=die_with_parent,  # the caller's thread forks; the pod dies with it
        )  # fmt: skip
        return ContainerRun(c["name"], proc, log, c)

    def _env(self, pod: Obj, c: Obj, links: dict[str, str], where: str) -> dict[str, str]:
        image = IMAGES[repository(c["image"])]()
        env: dict[str, str] = {"PATH": ":".join([*image.path, BASE_PATH]), "HOSTNAME": pod["metadata"]["name"],
                               "HOME": "/", **image.env}  # fmt: skip
        declared: dict[str, str] = {}
        for e in c.get("env") or []:
            value = self._env_value(pod, e, {**links, **declared}, where)
            if value is not None:
                declared[e["name"]] = value
        env |= links | declared
        # what stands in for the image and the pod's network (module docstring)
        env["PYTHONPATH"] = ":".join([*image.pythonpath, str(POD_NETWORK)])
        env["E2E_POD_IP"] = pod["status"]["podIP"]
        return env

    def _env_value(self, pod: Obj, e: Obj, seen: dict[str, str], where: str) -> str | None:
        if "valueFrom" not in e:
            return expand(str(e.get("value", "")), seen)
        source = e["valueFrom"]
        ns = pod["metadata"]["namespace"]
        if "fieldRef" in source:
            return field_value(pod, source["fieldRef"]["fieldPath"])
        for key, read in (("secretKeyRef", self._secret_data), ("configMapKeyRef", self._configmap_data)):
            if key in source:
                ref = source[key]
                data = read(ns, ref["name"])
                if data is None or ref["key"] not in data:
                    if ref.get("optional"):
                        return None
                    raise Unsupported(f"{where}: env {e['name']}: {key} {ref['name']}/{ref['key']} is not there "
                                      "(the kubelet would not start the container)")  # fmt: skip
                return data[ref["key"]].decode()
        raise Unsupported(
            f"{where}: env {e['name']} valueFrom {sorted(source)} is not given by e2e/kubelet.py"
        )

    def _links(self, pod: Obj) -> dict[str, str]:
        """The service links: the pod's namespace's Services (enableServiceLinks, on by default) and the
        `kubernetes` Service, whose ClusterIP leads to the apiserver where e2e/kubeproxy.py runs."""
        ns = pod["metadata"]["namespace"]
        ser = self.core.api_client.sanitize_for_serialization
        services = []
        if pod["spec"].get("enableServiceLinks", True):
            services = [ser(s) for s in self.core.list_namespaced_service(ns).items]
        kubernetes = ser(self.core.read_namespaced_service("kubernetes", "default"))
        return service_links([s for s in services if s["metadata"]["name"] != "kubernetes"]) | service_links(
            [kubernetes]
        )

    # ---- volumes ----

    def _secret_data(self, ns: str, name: str) -> dict[str, bytes] | None:
        try:
            secret = self.core.read_namespaced_secret(name, ns)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}

    def _configmap_data(self, ns: str, name: str) -> dict[str, bytes] | None:
        try:
            cm = self.core.read_namespaced_config_map(name, ns)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return {k: v.encode() for k, v in (cm.data or {}).items()} | {
            k: base64.b64decode(v) for k, v in (cm.binary_data or {}).items()
        }

    def _keyed(self, pod: Obj, kind: str, ref: Obj, where: str) -> dict[str, bytes]:
        """A Secret's or ConfigMap's keys as files (its `items`, if any, pick and name them)."""
        ns = pod["metadata"]["namespace"]
        name = ref.get("secretName") or ref.get("name", "")
        data = (self._secret_data if kind == "secret" else self._configmap_data)(ns, name)
        if data is None:
            if ref.get("optional"):
                return {}
            raise Unsupported(
                f"{where}: {kind} {ns}/{name} is not there (the kubelet would not start the pod)"
            )
        if not ref.get("items"):
            return data
        missing = [i["key"] for i in ref["items"] if i["key"] not in data]
        if missing and not ref.get("optional"):
            raise Unsupported(f"{where}: {kind} {ns}/{name} has no key {missing}")
        return {i["path"]: data[i["key"]] for i in ref["items"] if i["key"] in data}

    def _downward(self, pod: Obj, items: list[Obj], where: str) -> dict[str, bytes]:
        out = {}
        for item in items:
            if "fieldRef" not in item:
                raise Unsupported(f"{where}: downwardAPI item {item['path']} {sorted(item)} is not given")
            out[item["path"]] = field_value(pod, item["fieldRef"]["fieldPath"]).encode()
        return out

    def _volume(self, pod: Obj, volume: Obj, into: Path) -> Path:
        where = f"pod {pod['metadata']['namespace']}/{pod['metadata']['name']} volume {volume['name']}"
        kinds = [k for k in volume if k != "name"]
        kind = kinds[0] if kinds else "emptyDir"
        files: dict[str, bytes] = {}
        if kind == "emptyDir":
            pass
        elif kind in ("secret", "configMap"):
            files = self._keyed(pod, kind, volume[kind], where)
        elif kind == "downwardAPI":
            files = self._downward(pod, volume[kind].get("items") or [], where)
        elif kind == "projected":
            for source in volume[kind].get("sources") or []:
                (skind,) = source
                if skind in ("secret", "configMap"):
                    files |= self._keyed(pod, skind, source[skind], where)
                elif skind == "downwardAPI":
                    files |= self._downward(pod, source[skind].get("items") or [], where)
                elif skind == "serviceAccountToken":
                    token = source[skind]
                    files[token["path"]] = self._token(
                        pod, token.get("audience"), token.get("expirationSeconds")
                    )
                else:
                    raise Unsupported(f"{where}: projected source {skind} is not given by e2e/kubelet.py")
        else:
            raise Unsupported(f"{where}: {kind} volumes are not given by e2e/kubelet.py")
        into.mkdir(parents=True, exist_ok=True)
        for path, data in files.items():
            (into / path).parent.mkdir(parents=True, exist_ok=True)
            (into / path).write_bytes(data)
        return into

    def _token(self, pod: Obj, audience: str | None, expiration: int | None) -> bytes:
        """A token of the pod's ServiceAccount bound to the pod, as the kubelet asks for one; no audience:
        the apiserver's own."""
        meta = pod["metadata"]
        spec: Obj = {"expirationSeconds": int(expiration or 3600),
                     "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]}}  # fmt: skip
        if audience:
            spec["audiences"] = [audience]
        account = pod["spec"].get("serviceAccountName") or "default"
        got = self.core.create_namespaced_service_account_token(account, meta["namespace"], {"spec": spec})
        return str(got.status.token).encode()

    def _cri_dir(self, pod: Obj) -> Path | None:
        """Where the pod's node serves container logs from, if it does."""
        try:
            node = self.core.read_node(pod["spec"].get("nodeName", ""))
        except ApiException:
            return None
        root = (node.metadata.annotations or {}).get(POD_LOG_DIR)
        meta = pod["metadata"]
        return pod_log_dir(Path(root), meta["namespace"], meta["name"], meta["uid"]) if root else None

    # ---- probes ----

    def ready(self, run: PodRun) -> bool:
        """Every container's startup and readiness probes pass (a container without them: started).
        Raises, with its log, when a container exited."""
        for c in run.containers:
            if c.proc.poll() is not None:
                raise AssertionError(
                    f"{run.name} container {c.name} exited with {c.proc.returncode}:\n{c.logs()}"
                )
            for which in ("startupProbe", "readinessProbe"):
                if which in c.spec and not self.probe(run, c.spec, c.spec[which]):
                    return False
        return True

    def probe(self, run: PodRun, container: Obj, probe: Obj) -> bool:
        """One try of an httpGet or tcpSocket probe at the pod's IP (a named port: the container's)."""
        kind = next((k for k in ("httpGet", "tcpSocket", "exec", "grpc") if k in probe), "none")
        if kind not in ("httpGet", "tcpSocket"):
            raise Unsupported(f"pod {run.name}: {kind} probes are not run by e2e/kubelet.py")
        spec = probe[kind]
        port = spec["port"]
        if isinstance(port, str) and not port.isdigit():
            port = next(p["containerPort"] for p in container.get("ports") or [] if p.get("name") == port)
        host = spec.get("host") or run.ip
        try:
            if kind == "tcpSocket":
                with socket.create_connection((host, int(port)), timeout=2):
                    return True
            scheme = (spec.get("scheme") or "HTTP").lower()
            url = f"{scheme}://{host}:{port}{spec.get('path') or '/'}"
            # the kubelet does not verify a probe's certificate
            context = ssl._create_unverified_context() if scheme == "https" else None
            with urllib.request.urlopen(url, timeout=2, context=context) as resp:
                return 200 <= int(resp.status) < 400
        except OSError:
            return False

    def wait_ready(self, runs: list[PodRun], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not all(self.ready(r) for r in runs):
            if time.monotonic() > deadline:
                raise AssertionError("pods not ready: " + "\n".join(r.logs() for r in runs))
            time.sleep(0.5)
