"""CustomResourceDefinitions generated from the models, so schema and code cannot drift apart.

pydantic's JSON Schema is turned into a Kubernetes structural schema: references inlined, optional
fields unwrapped, titles dropped, OpenAPI v3.0 exclusive bounds, `default: {}` on nested objects so
that the apiserver applies nested defaults, and the models' CEL rules carried over.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from trainguard.api.common import GROUP, K8S_NAME_PATTERN, VERSION, cel_string
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.api.policy import AlertPolicy

_KEEP = {
    "type",
    "description",
    "default",
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "maxProperties",
    "format",
    "x-kubernetes-validations",
}

SYNC_WAVE_ANNOTATION = "argocd.argoproj.io/sync-wave"
CRD_SYNC_WAVE = "-1"
"""Argo CD applies a CRD before everything else of its Application: the chart's own objects sit at
waves 1-3, and a TrainingJobMonitor or AlertPolicy a user adds without a wave (0) still comes after."""


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        merged: dict[str, Any] = copy.deepcopy(defs[name])
        merged.update({k: v for k, v in schema.items() if k != "$ref"})
        return merged
    return schema


def _structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    schema = _resolve(schema, defs)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express a union in a structural schema: {schema}")
        inner = dict(schema)
        del inner["anyOf"]
        merged = _resolve(options[0], defs) | {
            k: v for k, v in inner.items() if k != "default" or v is not None
        }
        if merged.get("default", 0) is None:
            del merged["default"]
        return _structural(merged, defs)
    if "const" in schema:
        schema = {**schema, "enum": [schema["const"]]}
        if "type" not in schema:
            schema["type"] = "string"
    out: dict[str, Any] = {k: v for k, v in schema.items() if k in _KEEP}
    if "exclusiveMinimum" in schema:
        out["minimum"] = schema["exclusiveMinimum"]
        out["exclusiveMinimum"] = True
    if "exclusiveMaximum" in schema:
        out["maximum"] = schema["exclusiveMaximum"]
        out["exclusiveMaximum"] = True
    if out.get("default") is None:
        out.pop("default", None)
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        out["type"] = "object"
        props = schema.get("properties", {})
        if props:
            out["properties"] = {}
            for name, sub in props.items():
                prop = _structural(sub, defs)
                optional = name not in schema.get("required", []) and "anyOf" not in sub
                if optional and "default" not in prop and prop.get("type") in ("object", "array"):
                    # A default_factory: a default lets the apiserver fill the field, so CEL rules can
                    # read it without has(); it is spelled out in full because the apiserver checks a
                    # default against the CEL rules without applying the nested defaults first.
                    prop["default"] = _filled_default(prop)
                out["properties"][name] = prop
        if schema.get("required"):
            out["required"] = list(schema["required"])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            out["additionalProperties"] = _structural(extra, defs)
    if kind == "array":
        out["items"] = _structural(schema.get("items", {}), defs)
    return out


def _filled_default(schema: dict[str, Any]) -> Any:
    if "default" in schema:
        return schema["default"]
    if schema.get("type") == "array":
        return []
    if schema.get("type") == "object" and "properties" in schema:
        return {k: _filled_default(v) for k, v in schema["properties"].items() if "default" in v}
    return {}


def schema_for(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return _structural(raw, defs)


def _crd(
    model: type[BaseModel],
    kind: str,
    plural: str,
    short_names: list[str],
    columns: list[dict[str, Any]],
) -> dict[str, Any]:
    schema = schema_for(model)
    props = schema["properties"]
    top: dict[str, Any] = {
        "type": "object",
        "description": (model.__doc__ or "").strip().splitlines()[0] if model.__doc__ else kind,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": props["spec"],
            "status": props["status"],
        },
        "x-kubernetes-validations": [
            {
                "rule": "size(self.metadata.name) <= 63",
                "message": "metadata.name must be at most 63 characters: it becomes a label value",
            },
            {
                "rule": f"self.metadata.name.matches({cel_string(K8S_NAME_PATTERN)})",
                "message": "metadata.name must be a DNS label (lowercase letters, digits and '-', no dots): "
                "it becomes a label value and part of the generated objects' names",
            },
        ],
    }
    top["properties"]["spec"].pop("default", None)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "trainguard"},
            "annotations": {SYNC_WAVE_ANNOTATION: CRD_SYNC_WAVE},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["trainguard"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": top},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def _ready_column() -> dict[str, Any]:
    return {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'}


def _age_column() -> dict[str, Any]:
    return {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def crds() -> dict[str, dict[str, Any]]:
    """File name -> CRD object, for every custom resource."""
    return {
        f"{GROUP}_trainingjobmonitors.yaml": _crd(
            TrainingJobMonitor,
            "TrainingJobMonitor",
            "trainingjobmonitors",
            ["tjm"],
            [
                {"name": "Mode", "type": "string", "jsonPath": ".spec.mode"},
                {"name": "Backend", "type": "string", "jsonPath": ".spec.exporter.gpuBackend"},
                {"name": "Pods", "type": "integer", "jsonPath": ".status.podsMonitored"},
                {
                    "name": "Unmonitored",
                    "type": "integer",
                    "jsonPath": ".status.podsUnmonitored",
                    "priority": 1,
                },
                _ready_column(),
                _age_column(),
            ],
        ),
        f"{GROUP}_alertpolicies.yaml": _crd(
            AlertPolicy,
            "AlertPolicy",
            "alertpolicies",
            ["tgpolicy"],
            [
                {"name": "Monitors", "type": "integer", "jsonPath": ".status.monitors"},
                _ready_column(),
                _age_column(),
            ],
        ),
    }
