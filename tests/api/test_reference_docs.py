"""docs/reference/ is the CR reference generated from the models: committed as generated, and every
field of each CRD's schema is there with its type, default, description and validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainguard.api.crd import crds
from trainguard.api.reference import reference_markdown
from trainguard.cli import main

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
PAGES = {
    "trainingjobmonitor.md": "trainguard.io_trainingjobmonitors.yaml",
    "alertpolicy.md": "trainguard.io_alertpolicies.yaml",
}


def test_committed_reference_matches_the_models() -> None:
    generated = reference_markdown()
    assert {p.name for p in REFERENCE.glob("*.md")} == set(generated), "run `trainguard reference`"
    for name, text in generated.items():
        assert (REFERENCE / name).read_text() == text, (
            f"docs/reference/{name} is stale: run `trainguard reference --out-dir docs/reference`"
        )


def rows(page: str) -> dict[str, list[str]]:
    """Field path -> its cells (type, default, description, validation), from the page's tables."""
    out: dict[str, list[str]] = {}
    for line in reference_markdown()[page].splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            out[cells[0].strip("`")] = cells[1:]
    return out


def walk(schema: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    out = [(path, schema)]
    for key, sub in schema.get("properties", {}).items():
        out += walk(sub, f"{path}.{key}")
    if "items" in schema:
        out += walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        out += walk(schema["additionalProperties"], f"{path}.*")
    return out


def top(crd_file: str) -> dict[str, Any]:
    schema: dict[str, Any] = crds()[crd_file]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize("page", PAGES)
def test_every_field_of_the_crd_has_a_row_with_its_description(page: str) -> None:
    schema = top(PAGES[page])
    table = rows(page)
    fields = walk(schema["properties"]["spec"], "spec") + walk(schema["properties"]["status"], "status")
    assert {path for path, _ in fields} | {"metadata.name"} == set(table)
    for path, node in fields:
        kind, _, description, _ = table[path]
        expected = "map of" if isinstance(node.get("additionalProperties"), dict) else node["type"]
        assert kind.startswith(expected), (path, kind)
        assert " ".join(node.get("description", "").split()).replace("|", "\\|") == description, path


@pytest.mark.parametrize("page", PAGES)
def test_every_cel_message_is_at_the_field_it_names(page: str) -> None:
    schema = top(PAGES[page])
    table = rows(page)
    fields = [("metadata.name", schema), *walk(schema["properties"]["spec"], "spec")]
    for path, node in fields:
        for rule in node.get("x-kubernetes-validations", []):
            at = path if path == "metadata.name" else path + rule.get("fieldPath", "")
            assert rule["message"] in table[at][3], (at, rule["message"])


def test_defaults_enums_ranges_and_patterns_are_spelled_out() -> None:
    monitor = rows("trainingjobmonitor.md")
    assert monitor["spec.mode"][1] == "`training`"
    assert monitor["spec.mode"][3] == "one of `training`, `finetuning`, `inference`"
    assert monitor["spec.baseline.sigma"][1:] == [
        "`3.0`",
        "How many deviations count as anomalous.",
        "> 0; <= 20",
    ]
    assert monitor["spec.baseline"][1] == "its fields' defaults"
    assert monitor["spec.exporter.dcgmJobLabel"][1] == '`""`'
    assert monitor["spec.workloadRef.name"][3].startswith("at least 1 character; at most 63 characters; matches `^")  # fmt: skip
    assert monitor["spec.selector"][0] == "object, required"
    assert "selector must name at least one label" in monitor["spec.selector"][3]
    policy = rows("alertpolicy.md")
    assert policy["spec.alerts[].name"][0] == "string, required"
    assert "`GPUCriticalXid`" in policy["spec.alerts[].name"][3]
    assert policy["spec.customRules[].labels"][0] == "map of string to string"
    # a | inside a CEL regular expression does not split the table's row
    assert "\\|^_[a-zA-Z0-9]" in policy["spec.customRules[].labels"][3]


def test_the_index_links_every_page() -> None:
    index = reference_markdown()["README.md"]
    for page in PAGES:
        assert f"]({page})" in index


def test_the_cli_writes_the_reference_and_its_check_fails_on_drift(tmp_path: Path) -> None:
    assert main(["reference", "--out-dir", str(tmp_path)]) == 0
    assert main(["reference", "--out-dir", str(tmp_path), "--check"]) == 0
    page = tmp_path / "alertpolicy.md"
    page.write_text(page.read_text().replace("`P0`", "`P9`"))
    with pytest.raises(SystemExit) as exc:
        main(["reference", "--out-dir", str(tmp_path), "--check"])
    assert exc.value.code != 0
