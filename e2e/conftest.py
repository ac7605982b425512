"""e2e fixtures: a cluster (the local control plane, or TRAINGUARD_E2E_KUBECONFIG) with trainguard's
CRDs and RBAC installed, and the operator running under its ServiceAccount."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.cluster import Cluster, new_workdir
from e2e.controlplane.controllers import (
    JOBSET,
    KUEUE,
    TRAINER,
    TRAINING_OPERATOR,
    Controller,
    Spec,
    run_controller,
)
from e2e.controlplane.local import local_control_plane, prometheus_operator_crds
from e2e.nodes import restore
from e2e.pipeline import Monitoring, Sink, operator_stack


def pytest_configure(config: pytest.Config) -> None:
    """`make e2e` runs the suite in several processes, each starting a control plane of its own; a cluster
    named by TRAINGUARD_E2E_KUBECONFIG would be shared by them (its nodes, cordons and cluster-wide
    objects), so the tests would step on each other: refuse before anything starts."""
    workers = getattr(config.option, "numprocesses", None)
    if os.environ.get("TRAINGUARD_E2E_KUBECONFIG") and workers not in (None, 0):
        raise pytest.UsageError(
            f"TRAINGUARD_E2E_KUBECONFIG names one cluster, which the {workers} e2e processes (-n {workers}) "
            "would share: run the suite in one process (`pytest e2e` without -n, or make e2e E2E_WORKERS=0)"
        )


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    workdir = new_workdir()
    external = os.environ.get("TRAINGUARD_E2E_KUBECONFIG")
    try:
        if external:
            # any cluster (kind on a laptop, say): the same suite, with fake GPU nodes registered there
            c = Cluster(Path(external), workdir)
            c.install(prometheus_operator_crds())
            kubelet = c.start_fake_nodes(prefix="gpu-node-", count=3)
            try:
                yield c
            finally:
                c.stop_all_operators()
                c.stop_prometheus_operator()
                kubelet.terminate()
                c.delete_fake_nodes()
        else:
            # pytest-xdist's gw0, gw1, ...: each process's pods get IPs of their own (127.N.x.y)
            worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
            with local_control_plane(nodes=3, pod_network=1 + int(worker.removeprefix("gw"))) as plane:
                c = Cluster(plane.kubeconfig, workdir, audit_log=plane.audit_log)
                c.install(prometheus_operator_crds())
                try:
                    yield c
                finally:
                    c.stop_all_operators()
                    c.stop_prometheus_operator()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def operator(cluster: Cluster) -> Iterator[Cluster]:
    """One operator replica for the session (tests that restart or add replicas manage their own)."""
    cluster.start_operator(priority=100)
    yield cluster


@pytest.fixture
def ns(cluster: Cluster) -> Iterator[str]:
    name = cluster.namespace(f"e2e-{uuid.uuid4().hex[:8]}")
    yield name
    # free the fake GPUs before the next test: the tests' Jobs ask for whole nodes, and pods of a
    # namespace being deleted would hold them while the next test's gang waits to be scheduled
    batch = client.BatchV1Api(cluster.api)
    for job in batch.list_namespaced_job(name).items:
        try:  # a JobSet's child Job may go between the list and the delete (its owner deletes it too)
            batch.delete_namespaced_job(job.metadata.name, name, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise
    cluster.core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    deadline = time.monotonic() + 30
    while cluster.core.list_namespaced_pod(name).items and time.monotonic() < deadline:
        time.sleep(0.5)
    cluster.core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture(scope="module")
def stack(cluster: Cluster) -> Iterator[tuple[Cluster, Monitoring, Sink]]:
    """The full pipeline (e2e/pipeline.py) for a test module: Prometheus, Alertmanager, the sink and an
    operator that knows where Alertmanager is, in place of the session's operator until the module ends."""
    with operator_stack(cluster) as s:
        yield s


@pytest.fixture
def clean_nodes(cluster: Cluster) -> Iterator[None]:
    restore(cluster.core)
    yield
    restore(cluster.core)


@pytest.fixture
def spare(cluster: Cluster) -> Iterator[str]:
    """gpu-node-2 as a warm spare: labelled and tainted so that ordinary work stays off it."""
    name = "gpu-node-2"
    cluster.core.patch_node(name, {"metadata": {"labels": {"trainguard.io/spare": "true"}},
                                   "spec": {"taints": [{"key": "trainguard.io/spare", "value": "true",
                                                        "effect": "NoSchedule"}]}})  # fmt: skip
    yield name
    node = cluster.core.read_node(name)
    keep = [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.spec.taints or []
            if t.key != "trainguard.io/spare"]  # fmt: skip
    cluster.core.patch_node(name, {"metadata": {"labels": {"trainguard.io/spare": None}},
                                   "spec": {"taints": [{k: v for k, v in t.items() if v is not None} for t in keep] or None}},
                            _content_type="application/merge-patch+json")  # fmt: skip
    restore(cluster.core)


def training_controller(cluster: Cluster, spec: Spec) -> contextlib.AbstractContextManager[Controller]:
    """run_controller, where it can run: on the local control plane (a cluster named by
    TRAINGUARD_E2E_KUBECONFIG cannot call webhooks on this machine's loopback), and as root where the
    controller needs its fixed paths mounted (Kueue, the training-operator); a skip elsewhere, a
    failure under TRAINGUARD_REQUIRE_TOOLS=1 (CI)."""
    why = None
    if os.environ.get("TRAINGUARD_E2E_KUBECONFIG"):
        why = (
            "the training controllers run beside the local control plane only: their webhooks are on loopback"
        )
    elif spec.needs_root and os.geteuid() != 0:
        why = f"{spec.name} reads fixed paths that the harness bind-mounts in a mount namespace, which needs root"
    if why and os.environ.get("TRAINGUARD_REQUIRE_TOOLS"):
        pytest.fail(f"{why} (TRAINGUARD_REQUIRE_TOOLS is set)")
    if why:
        pytest.skip(why)
    return run_controller(cluster, spec)


@pytest.fixture(scope="class")
def jobset_controller(cluster: Cluster) -> Iterator[Controller]:
    """The JobSet controller (e2e/controlplane/controllers.py) for a test class: its CRD, its webhooks on
    loopback; unregistered and stopped when the test class (or module) ends, so that its webhooks
    see no other test's objects."""
    with training_controller(cluster, JOBSET) as ctl:
        yield ctl


@pytest.fixture(scope="class")
def kueue_controller(cluster: Cluster) -> Iterator[Controller]:
    """Kueue, managing batch Jobs and JobSets (its other integrations off), for a test class; with
    `jobset_controller` for JobSets (both run at once: e2e/test_kueue_workloads.py)."""
    with training_controller(cluster, KUEUE) as ctl:
        yield ctl


@pytest.fixture(scope="class")
def trainer_controller(cluster: Cluster, jobset_controller: Controller) -> Iterator[Controller]:
    """Kubeflow Trainer v2, with the JobSet controller its TrainJobs run on, for a test class."""
    with training_controller(cluster, TRAINER) as ctl:
        yield ctl


@pytest.fixture(scope="class")
def training_operator_controller(cluster: Cluster) -> Iterator[Controller]:
    """The Kubeflow training-operator (PyTorchJob and the other v1 jobs), for a test class."""
    with training_controller(cluster, TRAINING_OPERATOR) as ctl:
        yield ctl


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    """On a failure, show the operator's log: the first thing anyone debugging e2e wants."""
    if call.when == "call" and call.excinfo is not None:
        for value in getattr(item, "funcargs", {}).values():
            if isinstance(value, Cluster):
                item.add_report_section("call", "operator log", value.operator_logs())
                return
