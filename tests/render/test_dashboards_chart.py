"""The chart ships the generated dashboards as ConfigMaps that Grafana's sidecar picks up by label."""

from __future__ import annotations

import json
import os

import pytest

from tests.packaging.chart import CHART, by_kind, find_helm, objects, run_helm, template
from trainguard.render.dashboards import render_dashboards


@pytest.fixture(scope="module")
def helm() -> str:
    path = find_helm()
    if path is None:
        if os.environ.get("TRAINGUARD_REQUIRE_TOOLS"):
            pytest.fail("helm is required (TRAINGUARD_REQUIRE_TOOLS is set) but neither built nor on PATH")
        pytest.skip("helm is not built: `make helm` builds it from its Go module (needs Go)")
    return path


def dashboard_maps(text: str) -> dict[str, dict[str, object]]:
    return {
        cm["metadata"]["name"]: cm
        for cm in by_kind(objects(text), "ConfigMap")
        if cm["metadata"]["name"].startswith("trainguard-dashboard-")
    }


def test_each_dashboard_is_a_configmap_labelled_for_the_sidecar(helm: str) -> None:
    maps = dashboard_maps(template(helm))
    expected = render_dashboards()
    assert set(maps) == {f"trainguard-dashboard-{n.removesuffix('.json')}" for n in expected}
    for cm in maps.values():
        meta = cm["metadata"]
        assert isinstance(meta, dict)
        assert meta["labels"]["grafana_dashboard"] == "1"
        assert meta["namespace"] == "trainguard-system"
        data = cm["data"]
        assert isinstance(data, dict)
        ((name, text),) = data.items()
        # the JSON Grafana loads is the generated file, byte for byte but the final newline
        assert text + "\n" == expected[name]
        assert json.loads(text)["uid"].startswith("trainguard-")


def test_label_namespace_and_annotations_follow_the_values(helm: str) -> None:
    maps = dashboard_maps(
        template(
            helm,
            "dashboards.label=grafana.example.com/dashboard",
            "dashboards.labelValue=trainguard",
            "dashboards.namespace=monitoring",
            "dashboards.annotations.grafana_folder=GPU",
        )
    )
    assert maps
    for cm in maps.values():
        meta = cm["metadata"]
        assert isinstance(meta, dict)
        assert meta["labels"]["grafana.example.com/dashboard"] == "trainguard"
        assert "grafana_dashboard" not in meta["labels"]
        assert meta["namespace"] == "monitoring"
        assert meta["annotations"] == {"grafana_folder": "GPU"}


def test_disabled_renders_no_dashboards(helm: str) -> None:
    assert dashboard_maps(template(helm, "dashboards.enabled=false")) == {}


@pytest.mark.parametrize(
    ("setting", "path"),
    [
        ("dashboards.labelValue=1", "/dashboards/labelValue"),
        ("dashboards.enabled=yes", "/dashboards/enabled"),
    ],
)
def test_a_wrong_dashboards_value_is_refused_with_its_path(helm: str, setting: str, path: str) -> None:
    proc = run_helm(helm, "template", "trainguard", str(CHART), "--set", setting, check=False)
    assert proc.returncode != 0
    assert path in proc.stderr, proc.stderr
