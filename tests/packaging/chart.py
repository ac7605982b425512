"""Running the real helm on charts/trainguard, and reading what it renders."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from e2e.controlplane.cache import cache_dir
from e2e.controlplane.local import K8S_VERSION

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "trainguard"
NAMESPACE = "trainguard-system"
RELEASE = "trainguard"
GOLDEN_VALUES = Path(__file__).parent / "golden"


def find_helm() -> str | None:
    """The helm that e2e/controlplane/build.sh builds (`make helm`), else one on PATH."""
    built = cache_dir() / "bin" / "current" / "helm"
    if built.is_file() and os.access(built, os.X_OK):
        return str(built)
    return shutil.which("helm")


def run_helm(helm: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`helm ARGS`; template and lint assume the e2e control plane's Kubernetes unless told another
    --kube-version: a helm built from source without the release's link flags assumes 1.20, which the
    chart's kubeVersion refuses (a released helm assumes the Kubernetes of its client libraries)."""
    if args and args[0] in ("template", "lint") and "--kube-version" not in args:
        args = (*args, "--kube-version", K8S_VERSION)
    # no repositories, plugins or caches of the user's: the chart is rendered from the tree alone
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "HELM_CONFIG_HOME": "/nonexistent/helm-config",
        "HELM_DATA_HOME": "/nonexistent/helm-data",
        "HELM_CACHE_HOME": "/nonexistent/helm-cache",
        "KUBECONFIG": "/nonexistent/kubeconfig",
    }
    proc = subprocess.run([helm, *args], capture_output=True, text=True, env=env, timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
    return proc


def template_args(*sets: str, values: Path | None = None, namespace: str = NAMESPACE) -> list[str]:
    args = ["template", RELEASE, str(CHART), "--namespace", namespace]
    if values is not None:
        args += ["--values", str(values)]
    for s in sets:
        args += ["--set", s]
    return args


def template(helm: str, *sets: str, values: Path | None = None, namespace: str = NAMESPACE) -> str:
    return run_helm(helm, *template_args(*sets, values=values, namespace=namespace)).stdout


def objects(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
    return found[0]
