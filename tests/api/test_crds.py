"""The committed CRDs are generated from the models, structural, and carry the CEL rules."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from trainguard.api.crd import crds
from trainguard.catalog import ALERT_NAMES
from trainguard.render import dump_yaml

ROOT = Path(__file__).resolve().parents[2]


def test_committed_crds_match_the_models() -> None:
    for name, crd in crds().items():
        committed = (ROOT / "crds" / name).read_text()
        assert committed == dump_yaml(crd), f"crds/{name} is stale: run `make crds`"


def walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, schema)]
    for key, sub in schema.get("properties", {}).items():
        out += walk(sub, f"{path}.{key}")
    if "items" in schema:
        out += walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        out += walk(schema["additionalProperties"], f"{path}{{}}")
    return out


def test_schemas_are_structural() -> None:
    for crd in crds().values():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for path, node in walk(schema):
            assert "type" in node, f"{path} has no type"
            assert not {"$ref", "anyOf", "allOf", "oneOf", "title"} & set(node), f"{path}: {sorted(node)}"


def test_cel_rules_and_defaults_are_carried_over() -> None:
    monitor = crds()["trainguard.io_trainingjobmonitors.yaml"]
    schema = monitor["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    rules = [r["rule"] for r in spec["properties"]["checkpoint"]["x-kubernetes-validations"]]
    assert "self.fullEverySteps % self.incrementalEverySteps == 0" in rules
    assert spec["properties"]["baseline"]["properties"]["sigma"]["default"] == 3.0
    assert spec["properties"]["baseline"]["default"] == {
        "sigma": 3.0,
        "window": "1h",
        "offset": "10m",
        "minStddevRatio": 0.05,
    }
    assert spec["properties"]["checkpoint"]["default"]["fullEverySteps"] == 1000
    assert spec["properties"]["mode"]["enum"] == ["training", "finetuning", "inference"]
    assert "warmupSteps" not in spec["properties"]["baseline"].get("required", [])
    assert monitor["spec"]["versions"][0]["subresources"] == {"status": {}}
    columns = [c["name"] for c in monitor["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["Mode", "Backend", "Pods", "Unmonitored", "Ready", "Age"]


def test_alert_names_are_an_enum_in_the_policy_crd() -> None:
    policy = crds()["trainguard.io_alertpolicies.yaml"]
    spec = policy["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    names = spec["properties"]["alerts"]["items"]["properties"]["name"]["enum"]
    assert "GPUCriticalXid" in names and names == list(ALERT_NAMES)


def test_every_crd_applies_before_the_objects_of_its_argo_cd_application() -> None:
    """Argo CD applies lower waves first; the chart's objects sit at 1-3 and a user's own, unannotated
    TrainingJobMonitor at 0, so the CRD needs a wave below them all, written by the generator."""
    for name, crd in crds().items():
        wave = crd["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]
        assert int(wave) < 0, f"{name}: sync wave {wave}"
        committed = yaml.safe_load((ROOT / "crds" / name).read_text())
        assert committed["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"] == wave


def test_crd_yaml_round_trips() -> None:
    for name in crds():
        assert yaml.safe_load((ROOT / "crds" / name).read_text())["kind"] == "CustomResourceDefinition"


def test_cel_regular_expressions_are_raw_strings() -> None:
    """CEL rejects escapes such as `\\.` in a plain string literal, and the apiserver then refuses the CRD."""
    for crd in crds().values():
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for path, node in walk(schema):
            for rule in node.get("x-kubernetes-validations", []):
                plain = re.findall(r"(?<![rR])'([^']*)'", rule["rule"])
                assert not [s for s in plain if "\\" in s], f"{path}: {rule['rule']}"
