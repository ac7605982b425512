"""The platform's labels on every object applied for a monitor (--object-labels, the chart's objectLabels):
what a kube-prometheus-stack Prometheus selects rules and pod monitors by. trainguard's own labels cannot
be overridden, and a wrong flag is refused at parse time naming the fix."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import POLICY, monitor_body
from tests.kube.fakes import FakeKube
from trainguard.cli import build_parser
from trainguard.controller.reconcile import ReceiverSettings, reconcile_monitor
from trainguard.remediation import tokens
from trainguard.render.kubernetes import with_labels


def labels_of(flags: list[str]) -> Any:
    return build_parser().parse_args(["operator", *flags]).object_labels


def test_by_default_what_a_default_kube_prometheus_stack_release_selects() -> None:
    assert labels_of([]) == {"release": "kube-prometheus-stack"}
    assert labels_of(["--object-labels", "release=prom,team=ml"]) == {"release": "prom", "team": "ml"}
    assert labels_of(["--object-labels", ""]) == {}


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("release", "is not KEY=VALUE"),
        ("bad key!=x", "not a valid label key"),
        ("release=no spaces", "not a valid label value"),
        ("app.kubernetes.io/managed-by=helm", "trainguard's own label"),
        ("trainguard.io/training-job=x", "trainguard's own label"),
    ],
)
def test_a_wrong_flag_is_refused_naming_it_and_the_fix(
    value: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        labels_of(["--object-labels", value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--object-labels" in err and says in err and "release=kube-prometheus-stack" in err


def test_every_applied_object_carries_them_and_trainguards_own_labels_win() -> None:
    kube = FakeKube(POLICY)
    settings = ReceiverSettings(key=tokens.new_key(), url="https://op.trainguard-system.svc:8443", ca="CA")
    extra = {"release": "kube-prometheus-stack"}
    reconcile_monitor(kube, kube, monitor_body(), receiver=settings, object_labels=extra)  # type: ignore[arg-type]
    applied = {k: o for k, o in kube.objects.items() if k[0] != "AlertPolicy"}
    assert {k[0] for k in applied} >= {"PrometheusRule", "PodMonitor", "AlertmanagerConfig", "Secret"}
    for key, obj in applied.items():
        labels = obj["metadata"]["labels"]
        assert labels["release"] == "kube-prometheus-stack", key
        assert labels["app.kubernetes.io/managed-by"] == "trainguard", key
    got = with_labels([{"metadata": {"labels": {"app.kubernetes.io/managed-by": "trainguard"}}}],
                      {"app.kubernetes.io/managed-by": "helm"})  # fmt: skip
    assert got[0]["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "trainguard"


def test_changing_them_reapplies_every_object() -> None:
    kube = FakeKube(POLICY)
    reconcile_monitor(kube, kube, monitor_body(), object_labels={"release": "a"})  # type: ignore[arg-type]
    kube.applies.clear()
    reconcile_monitor(kube, kube, monitor_body(), object_labels={"release": "b"})  # type: ignore[arg-type]
    assert kube.applies == ["PrometheusRule", "AlertmanagerConfig", "PodMonitor"]
