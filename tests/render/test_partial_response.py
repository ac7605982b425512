"""The partial response strategy (render/kubernetes.py): every group of every PrometheusRule the operator
applies sets `warn`, which a ThanosRuler reads and prometheus-operator removes for a Prometheus; the plain
rule files leave it out, since Prometheus refuses a field it does not know (docs/distributed.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import monitor, policy
from trainguard.api import load_documents
from trainguard.render import render_prometheus
from trainguard.render.kubernetes import prometheus_rule, shared_prometheus_rule
from trainguard.render.policy import effective_policy
from trainguard.render.shared import PER_MONITOR, SHARED

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"


@pytest.mark.parametrize("form", [PER_MONITOR, SHARED])
def test_every_group_the_operator_applies_evaluates_on_what_answers(form: str) -> None:
    m = monitor()
    groups = prometheus_rule(m, effective_policy(m, [policy()]), rule_form=form)["spec"]["groups"]
    if form == SHARED:
        groups += shared_prometheus_rule("trainguard")["spec"]["groups"]
    assert groups
    assert {g["name"]: g["partial_response_strategy"] for g in groups} == {g["name"]: "warn" for g in groups}


@pytest.mark.parametrize("form", [PER_MONITOR, SHARED])
def test_plain_rule_files_leave_it_out(form: str) -> None:
    files = render_prometheus(load_documents([(str(QUICKSTART), QUICKSTART.read_text())]), rule_form=form)
    for name in ("rules.yml", "aggregates.yml"):
        assert [g["name"] for g in files[name]["groups"] if "partial_response_strategy" in g] == [], name
