"""Shared building blocks of the custom resources: the base model, durations, selectors, conditions."""

from __future__ import annotations

import datetime as dt
import functools
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

GROUP = "trainguard.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

_DURATION_RE = re.compile(
    r"^((?P<y>[0-9]+)y)?((?P<w>[0-9]+)w)?((?P<d>[0-9]+)d)?((?P<h>[0-9]+)h)?"
    r"((?P<m>[0-9]+)m)?((?P<s>[0-9]+)s)?((?P<ms>[0-9]+)ms)?$"
)
DURATION_PATTERN = re.sub(r"\?P<[a-z]+>", "", _DURATION_RE.pattern)
"""The same pattern without group names, for the CRD schema (RE2 and ECMA alike)."""
_UNIT_SECONDS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}

Duration = Annotated[
    str,
    Field(
        pattern=DURATION_PATTERN,
        min_length=2,
        max_length=32,
        description="A Prometheus duration such as 30s, 5m, 1h30m.",
    ),
]
"""A Prometheus duration string; kept as text so rendered rules show what the user wrote."""


@functools.lru_cache(maxsize=4096)
def duration_seconds(text: str) -> float:
    """Seconds in a Prometheus duration such as `1h30m`; raises ValueError on anything else. Remembered:
    a few dozen distinct durations are read for every monitor on every render."""
    match = _DURATION_RE.match(text)
    if not text or match is None:
        raise ValueError(f"{text!r} is not a duration; use a number with a unit, such as 30s, 5m or 1h")
    return sum(int(v) * _UNIT_SECONDS[k] for k, v in match.groupdict().items() if v)


def format_duration(seconds: float) -> str:
    """The shortest Prometheus duration for whole seconds (`90` -> `1m30s`)."""
    total = round(seconds)
    if total <= 0:
        return "0s"
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if total >= size:
            out.append(f"{total // size}{unit}")
            total %= size
    return "".join(out)


K8S_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
K8sName = Annotated[
    str,
    Field(
        pattern=K8S_NAME_PATTERN,
        min_length=1,
        max_length=63,
        description="A Kubernetes object name (DNS label).",
    ),
]


def cel(rule: str, message: str, field_path: str | None = None) -> dict[str, JsonValue]:
    """A CEL rule for the CRD schema; the model's own validator must say the same in Python."""
    out: dict[str, JsonValue] = {"rule": rule, "message": message}
    if field_path:
        out["fieldPath"] = field_path
    return out


def cel_string(pattern: str) -> str:
    """A regular expression as a CEL raw string literal: CEL rejects escapes such as `\\.` in plain ones."""
    if "'" in pattern:
        raise ValueError(f"cannot quote {pattern!r} as a CEL raw string")
    return f"r'{pattern}'"


def cel_rules(*rules: dict[str, JsonValue]) -> ConfigDict:
    """model_config carrying CEL rules into the generated CRD (pydantic merges it with the base config)."""
    return ConfigDict(json_schema_extra={"x-kubernetes-validations": list(rules)})


class Model(BaseModel):
    """Base of every CR model: camelCase on the wire, unknown fields rejected, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        validate_default=True,
    )


_LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
LABEL_VALUE_PATTERN = rf"^({_LABEL_NAME})?$"
"""Kubernetes' label value syntax (at most 63 characters, checked apart): empty, or alphanumerics at both
ends with `-`, `_` and `.` between."""
LABEL_KEY_PATTERN = rf"^({_DNS_SUBDOMAIN}/)?{_LABEL_NAME}$"
"""Kubernetes' label key syntax: an optional DNS-subdomain prefix and `/`, then a name like a value."""
LABEL_KEY_LENGTHS = r"^([^/]{1,253}/)?[^/]{1,63}$"
"""The key's lengths: prefix at most 253, name at most 63 (RE2 has no lookahead, so a second pattern)."""
LABEL_KEY_ALLOWED = (
    "a label key is an optional DNS-subdomain prefix (lowercase, at most 253 characters) and '/', "
    "then a name of at most 63 letters, digits, '-', '_' or '.' that starts and ends with a letter or digit"
)
LABEL_VALUE_ALLOWED = (
    "a label value is empty or at most 63 letters, digits, '-', '_' or '.' "
    "that starts and ends with a letter or digit"
)
LABEL_KEY_CEL = f"k.matches({cel_string(LABEL_KEY_PATTERN)}) && k.matches({cel_string(LABEL_KEY_LENGTHS)})"
"""A CEL test of a label key bound to `k` (structural schemas cannot constrain map keys)."""


def label_key_problem(key: str) -> str | None:
    """Why `key` is not a Kubernetes label key, or None when it is one."""
    if re.fullmatch(LABEL_KEY_PATTERN, key) and re.fullmatch(LABEL_KEY_LENGTHS, key):
        return None
    return f"{key!r} is not a valid label key: {LABEL_KEY_ALLOWED}"


def label_value_problem(value: str) -> str | None:
    """Why `value` is not a Kubernetes label value, or None when it is one."""
    if len(value) <= 63 and re.fullmatch(LABEL_VALUE_PATTERN, value):
        return None
    return f"{value!r} is not a valid label value: {LABEL_VALUE_ALLOWED}"


def _check_label_key(key: str) -> str:
    problem = label_key_problem(key)
    if problem:
        raise ValueError(problem)
    return key


def _check_label_value(value: str) -> str:
    if len(value) > 63 or not re.fullmatch(LABEL_VALUE_PATTERN, value):
        raise ValueError(f"{value!r} is not a valid label value: {LABEL_VALUE_ALLOWED}")
    return value


LabelKey = Annotated[
    str,
    AfterValidator(_check_label_key),
    WithJsonSchema({"type": "string", "maxLength": 317, "pattern": LABEL_KEY_PATTERN}),
]
LabelValue = Annotated[
    str,
    AfterValidator(_check_label_value),
    WithJsonSchema({"type": "string", "maxLength": 63, "pattern": LABEL_VALUE_PATTERN}),
]
"""A Kubernetes label value; the schema carries the same pattern, the model a message saying what is allowed."""


class LabelSelectorRequirement(Model):
    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[LabelValue] = Field(default_factory=list, max_length=64)

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"values must be non-empty when operator is {self.operator}")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"values must be empty when operator is {self.operator}")
        return self

    model_config = cel_rules(
        cel(
            "self.operator in ['In', 'NotIn'] ? size(self.values) > 0 : size(self.values) == 0",
            "values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist",
        ),
        cel(f"self.key.matches({cel_string(LABEL_KEY_LENGTHS)})", LABEL_KEY_ALLOWED, ".key"),
    )


class LabelSelector(Model):
    """A Kubernetes label selector; an empty selector matches nothing here, never everything."""

    match_labels: dict[str, LabelValue] = Field(default_factory=dict, max_length=32)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list, max_length=16)

    @field_validator("match_labels")
    @classmethod
    def _keys_are_label_keys(cls, v: dict[str, str]) -> dict[str, str]:
        problems = [p for p in map(label_key_problem, v) if p]
        if problems:
            raise ValueError("; ".join(problems))
        return v

    model_config = cel_rules(
        cel(f"self.matchLabels.all(k, {LABEL_KEY_CEL})", LABEL_KEY_ALLOWED, ".matchLabels"),
    )

    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def key(self) -> tuple[Any, ...]:
        """The selector as a hashable value: equal for selectors that match the same labels alike."""
        return (
            tuple(sorted(self.match_labels.items())),
            tuple((r.key, r.operator, tuple(r.values)) for r in self.match_expressions),
        )

    def matches(self, labels: dict[str, str]) -> bool:
        if self.is_empty():
            return False
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for req in self.match_expressions:
            present = req.key in labels
            value = labels.get(req.key)
            ok = {
                "In": present and value in req.values,
                "NotIn": not present or value not in req.values,
                "Exists": present,
                "DoesNotExist": not present,
            }[req.operator]
            if not ok:
                return False
        return True

    def to_selector_string(self) -> str:
        """The `labelSelector` query form: `app=x,tier in (a,b),!canary`."""
        parts = [f"{k}={v}" for k, v in sorted(self.match_labels.items())]
        for r in self.match_expressions:
            if r.operator == "In":
                parts.append(f"{r.key} in ({','.join(r.values)})")
            elif r.operator == "NotIn":
                parts.append(f"{r.key} notin ({','.join(r.values)})")
            elif r.operator == "Exists":
                parts.append(r.key)
            else:
                parts.append(f"!{r.key}")
        return ",".join(parts)

    def to_kubernetes(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.match_labels:
            out["matchLabels"] = dict(sorted(self.match_labels.items()))
        if self.match_expressions:
            out["matchExpressions"] = [
                r.model_dump(by_alias=True, exclude_defaults=True) | {"operator": r.operator}
                for r in self.match_expressions
            ]
        return out


class SecretKeyRef(Model):
    """A key of a Secret in the resource's own namespace."""

    name: K8sName
    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")


class Condition(Model):
    """A standard Kubernetes condition (metav1.Condition)."""

    type: str = Field(min_length=1, max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    message: str = Field(default="", max_length=32768)
    last_transition_time: str = Field(description="RFC 3339 time of the last status change.")
    observed_generation: int | None = Field(default=None, ge=0)


class Metadata(Model):
    """The part of ObjectMeta that trainguard reads; other metadata is kept but ignored."""

    name: K8sName
    namespace: K8sName = "default"
    generation: int | None = None
    uid: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    model_config = ConfigDict(extra="ignore")


def instant(text: str) -> float:
    """Unix seconds from a flag that takes unix seconds or an RFC 3339 time (a naive one is UTC);
    raises ValueError naming both forms."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"takes unix seconds or an RFC 3339 time, got {text!r}") from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp()
