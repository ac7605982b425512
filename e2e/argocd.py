"""What Argo CD does with an Application of examples/argocd/, done step by step with the tools it runs,
for e2e/test_install_argocd.py. Argo CD itself is not run: its Go module (github.com/argoproj/argo-cd/v3
and gitops-engine v3.6) needs Go 1.27 and does not build from this machine's module proxy, and its
controller needs Redis, its repo-server and a Git server besides. Each function names the Argo CD code it
follows (argo-cd v3.6, read, not vendored); what it leaves out is said there.

- render: the repo-server's `helm template` of a Helm source (reposerver/repository/repository.go
  helmTemplate, util/helm/cmd.go template), with the cluster's API versions and Kubernetes version as
  the application controller passes them (controller/state.go, util/argo/argo.go APIResourcesToStrings).
- desired: the controller's tracking annotation (util/argo/resource_tracking.go, `annotation` tracking,
  Argo CD 3's default) and the destination namespace on namespaced objects that name none.
- sync_waves: gitops-engine's task order (pkg/sync/sync_tasks.go: phase, wave, kind, name; CRDs before
  their objects), each wave applied with client-side apply as field manager argocd-controller
  (pkg/utils/kube/resource_ops.go; strict field validation) and waited on until healthy
  (pkg/sync/sync_context.go) before the next.
- health: gitops-engine's built-in checks (pkg/health) and the Lua checks Argo CD ships
  (resource_customizations/) for the kinds the chart renders, ported to Python; trainguard's own kinds
  by the Lua checks of examples/argocd/argocd-cm.yaml, run by Lua 5.1 as Argo CD's gopher-lua runs them.
- drift: the server-side diff (the ServerSideDiff compare option: a server-side apply dry-run as
  argocd-controller, compared with the live object) and the default diff's question (does every field of
  the desired object have its value live?), both less the Application's ignoreDifferences."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lupa.lua51
import yaml

REPO = Path(__file__).resolve().parents[1]
WAVE = "argocd.argoproj.io/sync-wave"
TRACKING = "argocd.argoproj.io/tracking-id"
MANAGER = "argocd-controller"
"""common.ArgoCDSSAManager: the field manager of every apply of the controller."""
HEALTH_KEY = re.compile(r"resource\.customizations\.health\.(?P<group>[^_]*)_(?P<kind>.+)")

KIND_ORDER = {
    kind: i - 35
    for i, kind in enumerate(
        [
            "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy",
            "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass",
            "PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole",
            "ClusterRoleList", "ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList",
            "RoleBinding", "RoleBindingList", "Service", "DaemonSet", "Pod", "ReplicationController",
            "ReplicaSet", "Deployment", "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob",
            "IngressClass", "Ingress", "APIService",
        ]
    )
}  # fmt: skip
"""gitops-engine pkg/sync/sync_tasks.go kindOrder: within a wave, these kinds first in this order, every
other kind (custom resources, admission policies, webhook configurations) after them (0)."""


@dataclass(frozen=True)
class Kubectl:
    """The kubectl e2e/controlplane/build.sh builds, against one cluster."""

    binary: Path
    kubeconfig: Path

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.binary), "--kubeconfig", str(self.kubeconfig), *args], input=stdin,
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        return proc

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)

    def raw(self, path: str) -> Any:
        return json.loads(self.run("get", "--raw", path).stdout)


# ---- what the controller reads from the destination cluster ---------------------------------------


@dataclass(frozen=True)
class ClusterInfo:
    kube_version: str
    api_versions: list[str]
    namespaced: dict[tuple[str, str], bool]
    """(group, kind) -> whether its objects live in a namespace."""


def cluster_info(kubectl: Kubectl) -> ClusterInfo:
    """The controller's cluster cache: discovery's preferred version of every group, the resources that
    can be listed and watched (gitops-engine pkg/utils/kube/ctl.go filterAPIResources, preferred=true),
    as "group/version" and "group/version/Kind" (util/argo APIResourcesToStrings with kinds), and the
    server's version as the repo-server parses it (reposerver parseKubeVersion: ParseGeneric, no "v")."""
    groups = kubectl.raw("/apis")["groups"]
    versions = ["v1", *(g["preferredVersion"]["groupVersion"] for g in groups)]
    found: set[str] = set()
    namespaced: dict[tuple[str, str], bool] = {}
    for gv in versions:
        path = "/api/v1" if gv == "v1" else f"/apis/{gv}"
        for r in kubectl.raw(path)["resources"]:
            if "/" in r["name"] or not {"list", "watch"} <= set(r.get("verbs") or []):
                continue
            found |= {gv, f"{gv}/{r['kind']}"}
            namespaced[(gv.rpartition("/")[0], r["kind"])] = bool(r["namespaced"])
    git = kubectl.json("version")["serverVersion"]["gitVersion"]
    kube_version = re.match(r"v?(\d+\.\d+\.\d+)", git)
    assert kube_version, git
    return ClusterInfo(kube_version.group(1), sorted(found), namespaced)


# ---- the repo-server ---------------------------------------------------------------------------------


def helm_template_args(app: dict[str, Any], values_file: Path | None, info: ClusterInfo) -> list[str]:
    """util/helm/cmd.go template(): `template <path> --name-template <release> --namespace <ns>
    --kube-version <v> [--set/--set-string per parameter] [--values <valuesObject file>]
    --api-versions ... --include-crds` (no --include-crds with skipCrds)."""
    source = app["spec"]["source"]
    helm = source.get("helm") or {}
    args = ["template", source["path"], "--name-template", helm.get("releaseName") or app["metadata"]["name"],
            "--namespace", helm.get("namespace") or app["spec"]["destination"]["namespace"],
            "--kube-version", source.get("kubeVersion") or info.kube_version]  # fmt: skip
    for p in helm.get("parameters") or []:
        args += ["--set-string" if p.get("forceString") else "--set", f"{p['name']}={p['value']}"]
    for f in helm.get("valueFiles") or []:
        args += ["--values", f]
    if values_file is not None:
        args += ["--values", str(values_file)]
    for v in source.get("apiVersions") or info.api_versions:
        args += ["--api-versions", v]
    if not helm.get("skipCrds"):
        args.append("--include-crds")
    return args


def render(helm: Path, app: dict[str, Any], info: ClusterInfo, repo: Path = REPO) -> str:
    """One manifest generation: the valuesObject written to a file of a random (uuid) name in the temp
    folder, `helm` run as a process of its own from the repository root with a helm home of its own
    (XDG_* and HELM_CONFIG_HOME under a fresh temporary folder), as util/helm/cmd.go run() does."""
    helm_values = (app["spec"]["source"].get("helm") or {}).get("valuesObject")
    with tempfile.TemporaryDirectory(prefix="helm") as home:
        values_file = None
        if helm_values:
            values_file = Path(tempfile.gettempdir()) / str(uuid.uuid4())
            values_file.write_text(yaml.safe_dump(helm_values))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "XDG_CACHE_HOME": f"{home}/cache",
               "XDG_CONFIG_HOME": f"{home}/config", "XDG_DATA_HOME": f"{home}/data",
               "HELM_CONFIG_HOME": f"{home}/config", "KUBECONFIG": "/nonexistent"}  # fmt: skip
        try:
            proc = subprocess.run([str(helm), *helm_template_args(app, values_file, info)], cwd=repo, env=env,
                                  capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        finally:
            if values_file is not None:
                values_file.unlink()
    assert proc.returncode == 0, f"helm template ({proc.returncode}):\n{proc.stderr}"
    return proc.stdout


# ---- the controller ------------------------------------------------------------------------------------


def group_of(obj: dict[str, Any]) -> str:
    return str(obj["apiVersion"]).rpartition("/")[0]


def desired(app: dict[str, Any], manifests: str, info: ClusterInfo) -> list[dict[str, Any]]:
    """The target objects: the destination namespace on a namespaced object that names none, and the
    tracking annotation `<app>:<group>/<kind>:<namespace>/<name>` (resource_tracking.go
    BuildAppInstanceValue)."""
    objs = [d for d in yaml.safe_load_all(manifests) if d]
    # a kind the cluster does not serve yet: its scope from a CRD among the objects (the controller's
    # sync does the same for a CRD it is about to create)
    scopes = dict(info.namespaced) | {
        (c["spec"]["group"], c["spec"]["names"]["kind"]): c["spec"]["scope"] == "Namespaced"
        for c in objs
        if c["kind"] == "CustomResourceDefinition"
    }
    out = []
    for obj in objs:
        meta = obj["metadata"]
        key = (group_of(obj), obj["kind"])
        assert key in scopes, f"{key}: the cluster does not serve it and no CRD here defines it"
        if scopes[key]:
            meta.setdefault("namespace", app["spec"]["destination"]["namespace"])
        track = f"{app['metadata']['name']}:{key[0]}/{key[1]}:{meta.get('namespace', '')}/{meta['name']}"
        meta.setdefault("annotations", {})[TRACKING] = track
        out.append(obj)
    return out


def wave(obj: dict[str, Any]) -> int:
    return int((obj["metadata"].get("annotations") or {}).get(WAVE, "0"))


def sync_waves(objs: list[dict[str, Any]]) -> list[tuple[int, list[dict[str, Any]]]]:
    """The Sync phase's tasks (no object here is a hook) in gitops-engine's order, grouped by wave. The
    order puts a CRD before the objects of its kind where the waves do not already (adjustDeps): the test
    asserts they do, so that holds without it."""
    ordered = sorted(objs, key=lambda o: (wave(o), KIND_ORDER.get(o["kind"], 0), o["metadata"]["name"]))
    waves: dict[int, list[dict[str, Any]]] = {}
    for o in ordered:
        waves.setdefault(wave(o), []).append(o)
    return sorted(waves.items())


def apply(kubectl: Kubectl, objs: list[dict[str, Any]]) -> None:
    """Client-side apply as argocd-controller with strict field validation (no ServerSideApply or
    Validate=false in the Application's syncOptions): what resource_ops.go runs per task."""
    text = yaml.safe_dump_all(objs)
    kubectl.run("apply", "--field-manager", MANAGER, "--validate=strict", "-f", "-", stdin=text)


def live(kubectl: Kubectl, obj: dict[str, Any]) -> dict[str, Any] | None:
    meta = obj["metadata"]
    ns = ["--namespace", meta["namespace"]] if meta.get("namespace") else []
    kind = f"{obj['kind']}.{obj['apiVersion'].split('/')[0]}" if "/" in obj["apiVersion"] else obj["kind"]
    proc = kubectl.run("get", kind, meta["name"], *ns, "-o", "json", check=False)
    if proc.returncode != 0:
        if "NotFound" in proc.stderr:
            return None
        raise AssertionError(proc.stderr)
    return dict(json.loads(proc.stdout))


# ---- health --------------------------------------------------------------------------------------------


Health = tuple[str, str] | None
"""(status, message); None for a kind Argo CD has no health for (it counts as done in a sync)."""


LuaChecks = dict[tuple[str, str], str]
"""(group, kind) -> the Lua script of argocd-cm's resource.customizations.health.<group>_<kind>."""


def lua_checks(argocd_cm: dict[str, Any]) -> LuaChecks:
    """The health checks of an argocd-cm ConfigMap (util/settings: the key's group and kind)."""
    checks = {}
    for key, script in (argocd_cm.get("data") or {}).items():
        if m := HEALTH_KEY.fullmatch(key):
            checks[(m["group"], m["kind"])] = script
    return checks


def lua_health(script: str, obj: dict[str, Any]) -> tuple[str, str]:
    """A resource.customizations.health script as Argo CD's gopher-lua (Lua 5.1) runs it: the live
    object as the global `obj`, the returned table's status and message."""
    lua = lupa.lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    hs = lua.execute(script)
    return str(hs["status"]), str(hs["message"] or "")


def _conditions(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list((obj.get("status") or {}).get("conditions") or [])


def deployment_health(obj: dict[str, Any]) -> tuple[str, str]:
    """gitops-engine pkg/health/health_deployment.go getAppsv1DeploymentHealth."""
    spec, status = obj["spec"], obj.get("status") or {}
    if spec.get("paused"):
        return "Suspended", "Deployment is paused"
    if obj["metadata"].get("generation", 0) > status.get("observedGeneration", 0):
        return (
            "Progressing",
            "Waiting for rollout to finish: observed deployment generation less than desired",
        )
    progressing = next((c for c in _conditions(obj) if c["type"] == "Progressing"), None)
    updated, available = status.get("updatedReplicas", 0), status.get("availableReplicas", 0)
    if progressing and progressing.get("reason") == "ProgressDeadlineExceeded":
        return "Degraded", f"Deployment {obj['metadata']['name']!r} exceeded its progress deadline"
    if spec.get("replicas", 1) > updated:
        return "Progressing", f"{updated} out of {spec.get('replicas', 1)} new replicas have been updated"
    if status.get("replicas", 0) > updated:
        return "Progressing", "old replicas are pending termination"
    if available < updated:
        return "Progressing", f"{available} of {updated} updated replicas are available"
    return "Healthy", ""


def crd_health(obj: dict[str, Any]) -> tuple[str, str]:
    """resource_customizations/apiextensions.k8s.io/CustomResourceDefinition/health.lua."""
    if obj["metadata"].get("deletionTimestamp"):
        return "Progressing", "CRD is terminating"
    conditions = _conditions(obj)
    if not conditions:
        return "Progressing", "Status conditions not found"
    established = False
    for c in conditions:
        if c["type"] == "NamesAccepted" and c["status"] == "False":
            return "Degraded", f"CRD names have not been accepted: {c.get('message')}"
        if c["type"] == "NonStructuralSchema" and c["status"] == "True":
            return "Degraded", f"Schema violations found: {c.get('message')}"
        if c["type"] == "Established":
            if c["status"] == "True":
                established = True
            elif c.get("reason") == "Installing":
                return "Progressing", "CRD is being installed"
    return ("Healthy", "CRD is healthy") if established else ("Degraded", "CRD is not established")


def pdb_health(obj: dict[str, Any]) -> tuple[str, str]:
    """resource_customizations/policy/PodDisruptionBudget/health.lua."""
    state = ("Progressing", "Waiting for status")
    for c in _conditions(obj):
        if c["status"] == "False" and c.get("reason") != "InsufficientPods":
            return "Degraded", f"PodDisruptionBudget has {c.get('reason')}"
        state = ("Healthy", f"PodDisruptionBudget has {c.get('reason')}")
    return state


def service_health(obj: dict[str, Any]) -> tuple[str, str]:
    """gitops-engine pkg/health/health_service.go: only a LoadBalancer waits (for its ingress)."""
    if obj["spec"].get("type") == "LoadBalancer" and not (obj.get("status") or {}).get(
        "loadBalancer", {}
    ).get("ingress"):
        return "Progressing", "waiting for the load balancer"
    return "Healthy", ""


BUILT_IN: dict[tuple[str, str], Callable[[dict[str, Any]], tuple[str, str]]] = {
    ("apps", "Deployment"): deployment_health,
    ("apiextensions.k8s.io", "CustomResourceDefinition"): crd_health,
    ("policy", "PodDisruptionBudget"): pdb_health,
    ("", "Service"): service_health,
}
"""The kinds the chart renders that Argo CD has a health check for; every other kind it renders
(RBAC, ConfigMaps, admission policies, ServiceMonitor, PrometheusRule, ClusterKopfPeering) has none."""


def health(obj: dict[str, Any], overrides: LuaChecks) -> Health:
    """health.go GetResourceHealth: a deleted object is Progressing; argocd-cm's Lua override first,
    then the built-in check."""
    if obj["metadata"].get("deletionTimestamp"):
        return "Progressing", "Pending deletion"
    key = (group_of(obj), obj["kind"])
    if key in overrides:
        return lua_health(overrides[key], obj)
    check = BUILT_IN.get(key)
    return check(obj) if check else None


# ---- the diff --------------------------------------------------------------------------------------------


Path_ = tuple[str | int, ...]


def differences(want: Any, have: Any, at: Path_ = ()) -> Iterator[Path_]:
    """The paths where `want` (the desired object's fields, all of them) differs from `have`."""
    if isinstance(want, dict) and isinstance(have, dict):
        for key, value in want.items():
            yield from differences(value, have.get(key), (*at, key))
    elif isinstance(want, list) and isinstance(have, list) and len(want) == len(have):
        for i, (a, b) in enumerate(zip(want, have, strict=True)):
            yield from differences(a, b, (*at, i))
    elif want != have:
        yield at


def changed(before: Any, after: Any, at: Path_ = ()) -> Iterator[Path_]:
    """Every path that differs between two whole objects, either way."""
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(set(before) | set(after)):
            yield from changed(before.get(key), after.get(key), (*at, key))
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for i, (a, b) in enumerate(zip(before, after, strict=True)):
            yield from changed(a, b, (*at, i))
    elif before != after:
        yield at


VOLATILE = {("metadata", "managedFields"), ("metadata", "resourceVersion"), ("metadata", "generation")}
"""What a dry-run apply changes on any object it does not change (Argo CD's server-side diff drops the
managed fields and compares the rest)."""


def server_side_diff(kubectl: Kubectl, obj: dict[str, Any]) -> list[Path_]:
    """The ServerSideDiff compare option: the object applied server-side as argocd-controller in a
    dry run (the apiserver defaults and admits it as it would a sync), compared with the live object."""
    current = live(kubectl, obj)
    assert current is not None, f"{obj['kind']} {obj['metadata']['name']} is missing"
    predicted = json.loads(
        kubectl.run(
            "apply",
            "--server-side",
            "--dry-run=server",
            "--force-conflicts",
            "--field-manager",
            MANAGER,
            "-o",
            "json",
            "-f",
            "-",
            stdin=json.dumps(obj),
        ).stdout
    )
    return [p for p in changed(current, predicted) if p[:2] not in VOLATILE]


def ignore_patterns(app: dict[str, Any], obj: dict[str, Any]) -> list[tuple[str, ...]]:
    """The Application's ignoreDifferences that select this object (group, kind, name, namespace), as
    path patterns ("*" for any list item): jsonPointers, and jqPathExpressions of the plain `.a[]?.b`
    form (the only form the example uses; another fails here)."""
    patterns = []
    for rule in app["spec"].get("ignoreDifferences") or []:
        if (rule.get("group", ""), rule["kind"]) != (group_of(obj), obj["kind"]):
            continue
        if rule.get("name") not in (None, obj["metadata"]["name"]):
            continue
        if rule.get("namespace") not in (None, obj["metadata"].get("namespace")):
            continue
        for pointer in rule.get("jsonPointers") or []:
            patterns.append(tuple(p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]))
        for expr in rule.get("jqPathExpressions") or []:
            assert re.fullmatch(r"(\.[A-Za-z_][A-Za-z0-9_]*(\[\]\??)?)+", expr), f"{expr}: not a plain path"
            pattern: list[str] = []
            for name, items in re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)(\[\]\??)?", expr):
                pattern += [name, "*"] if items else [name]
            patterns.append(tuple(pattern))
    return patterns


def ignored(path: Path_, patterns: list[tuple[str, ...]]) -> bool:
    def matches(pattern: tuple[str, ...]) -> bool:
        return len(path) >= len(pattern) and all(
            p == "*" or p == str(q) for p, q in zip(pattern, path[: len(pattern)], strict=True)
        )

    return any(matches(p) for p in patterns)


def directory_render(app: dict[str, Any], repo: Path = REPO) -> str:
    """A directory source: the YAML files of its path that match directory.include (a glob), as the
    repo-server reads them (no recursion: directory.recurse is not set)."""
    source = app["spec"]["source"]
    folder = repo / source["path"]
    include = (source.get("directory") or {}).get("include") or "*"
    files = sorted(p for p in folder.glob(include.strip("{}")) if p.suffix in (".yaml", ".yml", ".json"))
    assert files, f"{folder}: nothing matches {include}"
    return "\n---\n".join(p.read_text() for p in files)
