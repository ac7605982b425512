"""Installing with Argo CD (examples/argocd/): the Application renders the chart, the chart's sync waves
put the CRDs before the RBAC, the operator and the policies, every CRD fits client-side apply's
annotation, and the health check for argocd-cm, run by a real Lua interpreter (Lua 5.1, as Argo CD's
gopher-lua, and 5.4) on statuses the operator's own status code writes, reads trainguard's conditions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lupa.lua51
import lupa.lua54
import pytest
import yaml

from tests.packaging.chart import CHART, GOLDEN_VALUES, REPO, objects, run_helm, template_args
from trainguard.controller.status import Outcome, monitor_status

ARGOCD = REPO / "examples" / "argocd"
HEALTH = ARGOCD / "health.lua"
KINDS = ("TrainingJobMonitor", "AlertPolicy")
WAVE = "argocd.argoproj.io/sync-wave"
LAST_APPLIED_LIMIT = 262_144
"""Bytes of all annotations of an object (kubectl apply's last-applied-configuration, Argo CD's
client-side apply): a CRD over it cannot be applied that way."""
NOW = "2026-01-01T00:00:00Z"
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


# ---- the health check -----------------------------------------------------------------------------


def health(runtime_module: Any, obj: dict[str, Any]) -> tuple[str, str]:
    """Run health.lua as Argo CD does: the object as the global `obj`, the script's return value."""
    lua = runtime_module.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    hs = lua.execute(HEALTH.read_text())
    return str(hs["status"]), str(hs["message"])


def monitor(kind: str, status: dict[str, Any] | None, generation: int = 1) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "trainguard.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": "llama", "namespace": "ml", "generation": generation},
        "spec": {},
    }
    if status is not None:
        obj["status"] = status
    return obj


def written(outcome: Outcome, kind: str) -> dict[str, Any]:
    """The status the operator writes for this outcome (an AlertPolicy keeps Ready and Degraded only,
    as controller/handlers.py does)."""
    status = monitor_status(None, outcome, NOW)
    if kind == "AlertPolicy":
        status["conditions"] = [c for c in status["conditions"] if c["type"] in ("Ready", "Degraded")]
        status["monitors"] = 2
    return status


LUAS = pytest.mark.parametrize("runtime_module", [lupa.lua51, lupa.lua54], ids=["lua5.1", "lua5.4"])


def test_the_interpreters_are_the_versions_argo_cd_and_the_test_name() -> None:
    assert lupa.lua51.LuaRuntime().eval("_VERSION") == "Lua 5.1"
    assert lupa.lua54.LuaRuntime().eval("_VERSION") == "Lua 5.4"


@LUAS
@pytest.mark.parametrize("kind", KINDS)
def test_ready_is_healthy(runtime_module: Any, kind: str) -> None:
    status = written(Outcome(generation=1, rules_applied=True, routes_applied=True), kind)
    assert health(runtime_module, monitor(kind, status)) == ("Healthy", "rules and routes are in place")


@LUAS
@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_reconcile_is_degraded_with_its_reason(runtime_module: Any, kind: str) -> None:
    outcome = Outcome(generation=1, error_reason="PolicyNotFound", error_message="AlertPolicy ml/default named in spec.policyRefs does not exist")  # fmt: skip
    got = health(runtime_module, monitor(kind, written(outcome, kind)))
    assert got == (
        "Degraded",
        "PolicyNotFound: AlertPolicy ml/default named in spec.policyRefs does not exist",
    )


@LUAS
def test_ready_false_alone_is_degraded_with_its_reason(runtime_module: Any) -> None:
    status = {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "False", "reason": "ApplyFailed", "message": ""}]}  # fmt: skip
    assert health(runtime_module, monitor("TrainingJobMonitor", status)) == ("Degraded", "ApplyFailed")


@LUAS
@pytest.mark.parametrize("kind", KINDS)
def test_no_status_yet_is_progressing(runtime_module: Any, kind: str) -> None:
    assert health(runtime_module, monitor(kind, None))[0] == "Progressing"
    assert health(runtime_module, monitor(kind, {"podsMonitored": 0}))[0] == "Progressing"


@LUAS
def test_a_status_of_an_older_generation_is_progressing(runtime_module: Any) -> None:
    """An edited monitor is not Healthy on the strength of its previous spec's Ready."""
    status = written(Outcome(generation=1, rules_applied=True, routes_applied=True), "TrainingJobMonitor")
    state, message = health(runtime_module, monitor("TrainingJobMonitor", status, generation=2))
    assert (state, message) == (
        "Progressing",
        "Waiting for the trainguard operator to reconcile generation 2",
    )


def test_argocd_cm_holds_the_health_check_for_both_kinds() -> None:
    cm = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())
    assert (cm["kind"], cm["metadata"]["name"], cm["metadata"]["namespace"]) == (
        "ConfigMap",
        "argocd-cm",
        "argocd",
    )
    keys = {f"resource.customizations.health.trainguard.io_{kind}" for kind in KINDS}
    assert set(cm["data"]) == keys
    for key in keys:
        assert cm["data"][key] == HEALTH.read_text(), (
            f"{key} differs from examples/argocd/health.lua: copy it in"
        )


# ---- the Application and the chart as Argo CD renders it -------------------------------------------


def application() -> dict[str, Any]:
    app = yaml.safe_load((ARGOCD / "application.yaml").read_text())
    assert (app["apiVersion"], app["kind"]) == ("argoproj.io/v1alpha1", "Application")
    return dict(app)


def argocd_render(helm: str, values: Path) -> str:
    """What Argo CD's repo server runs for a Helm source: helm template with the CRDs included."""
    return run_helm(helm, *template_args(values=values), "--include-crds").stdout


def test_the_application_installs_this_repositorys_chart(helm: str, tmp_path: Path) -> None:
    app = application()
    source = app["spec"]["source"]
    assert REPO / source["path"] == CHART
    assert app["spec"]["destination"]["namespace"] == "trainguard-system"
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(source["helm"]["valuesObject"]))
    kinds = {d["kind"] for d in objects(argocd_render(helm, values))}  # the chart's schema accepts them
    assert {"CustomResourceDefinition", "Deployment", "ServiceMonitor", "PrometheusRule"} <= kinds


def test_argo_cd_renders_the_chart_byte_identically_twice(helm: str, tmp_path: Path) -> None:
    """No random or time-dependent output: Argo CD would show a diff on every refresh."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(application()["spec"]["source"]["helm"]["valuesObject"]))
    assert argocd_render(helm, values) == argocd_render(helm, values)


def wave(obj: dict[str, Any]) -> int:
    return int((obj["metadata"].get("annotations") or {}).get(WAVE, "0"))


def test_sync_waves_apply_the_crds_then_rbac_then_the_operator_then_policies(helm: str) -> None:
    docs = objects(argocd_render(helm, GOLDEN_VALUES / "secret-certs.values.yaml"))
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert {c["spec"]["names"]["kind"] for c in crds} >= {*KINDS, "ClusterKopfPeering"}
    for c in crds:  # an explicit wave below 0: before a user's own unannotated monitors too
        assert WAVE in (c["metadata"].get("annotations") or {}), f"{c['metadata']['name']} has no wave"
    first = max(wave(c) for c in crds)
    assert first < 0
    served = {(c["spec"]["group"], c["spec"]["names"]["kind"]) for c in crds}
    rbac = [d for d in docs if d["kind"] in RBAC_KINDS]
    operator = [d for d in docs if d["kind"] in ("Deployment", "Service", "MutatingWebhookConfiguration")]
    policies = [d for d in docs if d["kind"] == "AlertPolicy"]
    assert rbac and operator and policies
    assert first < min(map(wave, rbac))
    assert max(map(wave, rbac)) < min(map(wave, operator))
    assert max(map(wave, operator)) < min(map(wave, policies))
    for d in docs:  # an object of a kind the chart's CRDs serve comes after them
        if (d["apiVersion"].split("/")[0], d["kind"]) in served:
            assert wave(d) > first, f"{d['kind']} {d['metadata']['name']} applies with its CRD"


# ---- the CRDs fit client-side apply ---------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    sorted([*(REPO / "crds").glob("*.yaml"), *(CHART / "crds").glob("*.yaml")]),
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_every_crd_fits_the_last_applied_annotation(path: Path) -> None:
    (crd,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert crd["kind"] == "CustomResourceDefinition"
    # kubectl stores the object as compact JSON in kubectl.kubernetes.io/last-applied-configuration
    size = len(json.dumps(crd, separators=(",", ":")).encode())
    assert size < LAST_APPLIED_LIMIT, f"{path.name}: {size} bytes; client-side apply refuses it"
