"""docs/install.md's path without Helm, followed as written on a local control plane of its own: every
`kubectl apply` line of "The operator without Helm" is run from the repository root, then its
`trainguard operator ... --self-managed-certs` line (the one that needs no certificate files), and the
embedded quickstart (examples/quickstart.yaml) becomes Ready, its rules, routes and pod monitor applied.

What the test adds to the page: KUBECONFIG (the page's commands use the current context), and the
operator's four listening ports moved off their defaults (--liveness, --metrics-addr, --webhook-port,
--receiver-port), so that it never meets another process of the machine there. The Helm paths are
followed by e2e/test_helm_install.py and e2e/test_kube_prometheus_stack.py.

A control plane of its own (about 8 s): the page installs deploy/'s cluster-wide objects, which the session
cluster holds already, and its operator must be the only one acting."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.cluster import REPO, Cluster, load_all
from e2e.controlplane.local import local_control_plane, prometheus_operator_crds
from e2e.docpages import commands
from e2e.monitors import ready
from tests.processes import free_port, stop, wait_for

pytestmark = pytest.mark.e2e

PAGE = REPO / "docs" / "install.md"
SECTION = "## The operator without Helm"


def test_the_page_has_the_commands_this_test_follows() -> None:
    cmds = commands(PAGE, SECTION)
    assert any(c.startswith("kubectl apply") for c in cmds), cmds
    assert any(c.startswith("trainguard operator") and "--self-managed-certs" in c for c in cmds), cmds


@pytest.fixture(scope="module")
def followed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, subprocess.Popen[bytes]]]:
    if os.environ.get("TRAINGUARD_E2E_KUBECONFIG"):
        pytest.skip("the install page's test starts a control plane of its own (cluster-wide names)")
    workdir = tmp_path_factory.mktemp("install-docs")
    with local_control_plane(nodes=1, pod_network=250) as plane:
        env = os.environ | {
            "KUBECONFIG": str(plane.kubeconfig),
            "PATH": f"{plane.bin}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        }
        for cmd in commands(PAGE, SECTION):
            if not cmd.startswith("kubectl"):
                continue
            done = subprocess.run(shlex.split(cmd, comments=True), cwd=REPO, env=env, capture_output=True, text=True,
                                  timeout=120, check=False)  # fmt: skip
            assert done.returncode == 0, f"{cmd}:\n{done.stdout}{done.stderr}"
        cluster = Cluster(plane.kubeconfig, workdir)
        # the quickstart's monitor is turned into prometheus-operator objects: their CRDs, as on a cluster
        # with prometheus-operator
        cluster.apply([o for p in prometheus_operator_crds() for o in load_all(p)])
        (line,) = [
            c
            for c in commands(PAGE, SECTION)
            if c.startswith("trainguard operator") and "--self-managed-certs" in c
        ]
        health = free_port()
        ports = ["--liveness", f"http://127.0.0.1:{health}/healthz", "--metrics-addr", f"127.0.0.1:{free_port()}",
                 "--webhook-port", str(free_port()), "--receiver-port", str(free_port())]  # fmt: skip
        log = (workdir / "operator.log").open("ab")
        proc = subprocess.Popen([*shlex.split(line, comments=True), *ports], cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT)  # fmt: skip
        try:
            yield cluster, proc
        finally:
            stop([proc])


def test_the_operator_the_page_installs_makes_the_quickstart_ready(
    followed: tuple[Cluster, subprocess.Popen[bytes]],
) -> None:
    cluster, proc = followed
    cluster.namespace("ml")
    cluster.apply_file(REPO / "examples" / "quickstart.yaml")

    def is_ready() -> object:
        if proc.poll() is not None:
            raise AssertionError(f"the operator exited with {proc.returncode}")
        return ready(cluster, "ml")

    try:
        wait_for("the quickstart's monitor Ready", is_ready, timeout=90)
    except AssertionError as exc:
        log = (cluster.workdir / "operator.log").read_text(errors="replace")[-4000:]
        raise AssertionError(f"{exc}\n{log}") from None
    for kind in ("PrometheusRule", "AlertmanagerConfig", "PodMonitor"):
        assert cluster.get(f"monitoring.coreos.com/{'v1alpha1' if kind == 'AlertmanagerConfig' else 'v1'}", kind,
                           "ml", "trainguard-llama-pretrain"), kind  # fmt: skip
    # --self-managed-certs: the operator made its certificates and pointed the webhook at its Service
    secret = cluster.core.read_namespaced_secret("trainguard-operator-webhook-tls", "trainguard-system")
    assert {"tls.crt", "tls.key", "ca.crt"} <= set(secret.data or {})
