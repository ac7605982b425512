"""docs/reference/, the CR reference, written from the same structural schema as the CRDs.

Reading the schema `crd.py` builds from the models (rather than the models' own JSON Schema) means
the reference says exactly what the apiserver enforces: defaults as it fills them, enums, ranges,
patterns and the CEL rules' messages, each at the field it names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from trainguard.api.crd import crds

_CEL = "x-kubernetes-validations"


@dataclass
class _Row:
    path: str
    schema: dict[str, Any]
    required: bool
    rules: list[dict[str, Any]] = field(default_factory=list)


def _cell(text: str) -> str:
    """One Markdown table cell: no line breaks, no column separators."""
    return " ".join(text.split()).replace("|", "\\|")


def _code(value: Any) -> str:
    plain = isinstance(value, str) and value
    text = value if plain else json.dumps(value, separators=(", ", ": "))
    return f"`{text}`" if "`" not in text else f"`` {text} ``"


def _type(schema: dict[str, Any]) -> str:
    kind = str(schema.get("type", "object"))
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of string to {_type(schema['additionalProperties'])}"
    if "format" in schema:
        return f"{kind} ({schema['format']})"
    return kind


def _default(schema: dict[str, Any]) -> str:
    if "default" not in schema:
        return ""
    value = schema["default"]
    if schema.get("type") == "object" and "properties" in schema and isinstance(value, dict) and value:
        return "its fields' defaults"
    return _code(value)


def _bound(schema: dict[str, Any], key: str, strict: str, inclusive: str) -> str:
    exclusive = schema.get(f"exclusive{key.capitalize()}") is True
    return f"{strict if exclusive else inclusive} {schema[key]}"


def _validation(row: _Row) -> str:
    s = row.schema
    parts: list[str] = []
    if "enum" in s:
        parts.append("one of " + ", ".join(_code(v) for v in s["enum"]))
    if "minimum" in s:
        parts.append(_bound(s, "minimum", ">", ">="))
    if "maximum" in s:
        parts.append(_bound(s, "maximum", "<", "<="))
    for key, what in (
        ("minLength", "at least {} character"),
        ("maxLength", "at most {} character"),
        ("minItems", "at least {} item"),
        ("maxItems", "at most {} item"),
        ("maxProperties", "at most {} key"),
    ):
        if key in s:
            parts.append(what.format(s[key]) + ("" if s[key] == 1 else "s"))
    if "pattern" in s:
        parts.append(f"matches {_code(s['pattern'])}")
    for rule in row.rules:
        parts.append(f"{rule['message']} (CEL {_code(rule['rule'])})")
    return "; ".join(parts)


def _rows(schema: dict[str, Any], path: str, required: bool) -> list[_Row]:
    """Every node under `schema`, depth first, with each CEL rule moved to the field its fieldPath names."""
    rows = [_Row(path, schema, required)]
    by_path = {path: rows[0]}
    needed = set(schema.get("required", []))
    for name, sub in schema.get("properties", {}).items():
        for row in _rows(sub, f"{path}.{name}", name in needed):
            rows.append(row)
            by_path.setdefault(row.path, row)
    if "items" in schema:
        rows += _rows(schema["items"], f"{path}[]", False)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        rows += _rows(extra, f"{path}.*", False)
    for rule in schema.get(_CEL, []):
        target = by_path.get(path + rule.get("fieldPath", ""), rows[0])
        target.rules.append(rule)
    return rows


def _table(rows: list[_Row]) -> list[str]:
    lines = [
        "| field | type | default | description | validation |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        kind = _type(row.schema) + (", required" if row.required else "")
        cells = [
            _code(row.path),
            kind,
            _default(row.schema),
            row.schema.get("description", ""),
            _validation(row),
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines


def _page(crd: dict[str, Any]) -> str:
    spec = crd["spec"]
    version = spec["versions"][0]
    top = version["schema"]["openAPIV3Schema"]
    kind = spec["names"]["kind"]
    lines = [
        f"# {kind}",
        "",
        "Generated from `operator/trainguard/api/` by `trainguard reference --out-dir docs/reference`; do not",
        "edit by hand (a test fails on drift).",
        "",
        f"- apiVersion: `{spec['group']}/{version['name']}`, {spec['scope'].lower()}",
        f"- plural `{spec['names']['plural']}`, short names "
        + ", ".join(f"`{n}`" for n in spec["names"]["shortNames"]),
        f"- CRD: `crds/{spec['group']}_{spec['names']['plural']}.yaml`",
        "",
        "Paths: `a[]` is an item of the list `a`, `m.*` a value of the map `m`. A CEL rule's message",
        "is the apiserver's answer when the rule fails; it is listed at the field the rule names.",
        "The few checks the apiserver cannot make (the operator's own validation) are listed in",
        "[Rendering](../rendering.md#checks-the-apiserver-does-not-make).",
        "",
        "## metadata",
        "",
    ]
    meta = _Row("metadata.name", {"type": "string"}, True, list(top.get(_CEL, [])))
    lines += _table([meta])
    for section in ("spec", "status"):
        lines += ["", f"## {section}", ""]
        if section == "status":
            lines += ["Written by the operator; read-only for users.", ""]
        lines += _table(_rows(top["properties"][section], section, section in top.get("required", [])))
    return "\n".join(lines) + "\n"


def reference_markdown() -> dict[str, str]:
    """File name -> Markdown, a page per custom resource and an index."""
    pages = {f"{crd['spec']['names']['singular']}.md": crd for crd in crds().values()}
    index = [
        "# trainguard CR reference",
        "",
        "Generated from the pydantic models (`operator/trainguard/api/`) by",
        "`trainguard reference --out-dir docs/reference`; do not edit by hand.",
        "",
    ]
    for name, crd in sorted(pages.items()):
        top = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        index.append(f"- [{crd['spec']['names']['kind']}]({name}): {top.get('description', '')}")
    out = {name: _page(crd) for name, crd in sorted(pages.items())}
    out["README.md"] = "\n".join(index) + "\n"
    return out
