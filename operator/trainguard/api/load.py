"""Turning YAML documents into validated models, with every problem reported by field path."""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from trainguard.api.common import API_VERSION
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.api.policy import AlertPolicy

KINDS: dict[str, type[TrainingJobMonitor] | type[AlertPolicy]] = {
    "TrainingJobMonitor": TrainingJobMonitor,
    "AlertPolicy": AlertPolicy,
}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input: where, which field, and what is allowed."""

    source: str
    path: str
    message: str
    obj: str = ""

    def __str__(self) -> str:
        where = self.source + (f" {self.obj}" if self.obj else "")
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class InvalidInput(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems

    def fields(self) -> str:
        """Every problem as `path: message`, on one line, for a status condition (where is implied)."""
        return "; ".join(f"{p.path}: {p.message}" if p.path else p.message for p in self.problems)


@dataclass
class Documents:
    monitors: list[TrainingJobMonitor] = field(default_factory=list)
    policies: list[AlertPolicy] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    sources: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """(kind, namespace, name) -> where the object was read, for error messages."""

    def policy(self, namespace: str, name: str) -> AlertPolicy | None:
        for p in self.policies:
            if p.namespace == namespace and p.name == name:
                return p
        return None

    def policies_for(self, monitor: TrainingJobMonitor) -> list[AlertPolicy]:
        """The monitor's policies in the order it names them; missing ones are left out."""
        found = (self.policy(monitor.namespace, ref.name) for ref in monitor.spec.policy_refs)
        return [p for p in found if p is not None]

    def reference_problems(self) -> list[Problem]:
        problems = []
        for m in self.monitors:
            for i, ref in enumerate(m.spec.policy_refs):
                if self.policy(m.namespace, ref.name) is None:
                    problems.append(
                        Problem(
                            self.sources.get((m.kind, m.namespace, m.name), "input"),
                            f"spec.policyRefs[{i}].name",
                            f"AlertPolicy {m.namespace}/{ref.name} is not in the input; "
                            f"add it, or remove the reference",
                            f"TrainingJobMonitor {m.namespace}/{m.name}",
                        )
                    )
        return problems


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith("function-") or part in ("literal[...]",):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out


def _message(err: Mapping[str, Any]) -> str:
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return "unknown field; check its spelling (kubectl explain trainingjobmonitor.spec, or crds/)"
    if err["type"] == "missing":
        return "required field is missing"
    value = err.get("input")
    if (
        err["type"] not in ("model_type", "dict_type")
        and value is not None
        and not isinstance(value, dict | list)
    ):
        msg += f" (got {_without_credentials(value)!r})"
    return msg


_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")


def _without_credentials(value: object) -> object:
    """An echoed URL loses its `user:password@`: a refused endpoint's password must not reach a log."""
    return _USERINFO.sub(r"\g<scheme>***@", value) if isinstance(value, str) else value


def parse_object(doc: Mapping[str, Any], source: str = "input") -> TrainingJobMonitor | AlertPolicy:
    """Validate one object; raises InvalidInput listing every problem in it."""
    kind = doc.get("kind")
    raw_meta = doc.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    label = f"{kind} {meta.get('namespace', 'default')}/{meta.get('name', '?')}"
    if doc.get("apiVersion") != API_VERSION:
        raise InvalidInput(
            [Problem(source, "apiVersion", f"must be {API_VERSION} (got {doc.get('apiVersion')!r})", label)]
        )
    model = KINDS.get(str(kind))
    if model is None:
        raise InvalidInput([Problem(source, "kind", f"must be one of {', '.join(KINDS)} (got {kind!r})")])
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise InvalidInput(
            [Problem(source, _path(e["loc"]), _message(e), label) for e in exc.errors(include_url=False)]
        ) from None


class ParsedVersions:
    """The model of each object's version last read from the cluster, by kind, namespace and name, with
    the uid and resourceVersion it was parsed at. A version never changes and the models are frozen, so
    a pass over 2,000 monitors from the watch cache validates only those that changed since (the
    detect pass validated each every second). One entry per object, the newest version read: bounded by
    `size` objects, the least recently read go first (a deleted monitor's with them)."""

    def __init__(self, size: int = 16384) -> None:
        self.size = size
        self._entries: OrderedDict[
            tuple[str, str, str], tuple[str, str, TrainingJobMonitor | AlertPolicy]
        ] = OrderedDict()
        self._guard = threading.Lock()
        self.hits = 0
        self.parses = 0

    def parse(self, body: Mapping[str, Any], source: str) -> TrainingJobMonitor | AlertPolicy:
        meta = body.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not (isinstance(uid, str) and uid and isinstance(version, str) and version):
            return _parse_spec(body, source)  # not read from the cluster: no version to trust
        key = (str(body.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        with self._guard:
            found = self._entries.get(key)
            if found is not None and found[0] == uid and found[1] == version:
                self._entries.move_to_end(key)
                self.hits += 1
                return found[2]
        parsed = _parse_spec(body, source)  # an invalid version raises, and is parsed again next time
        with self._guard:
            self.parses += 1
            self._entries[key] = (uid, version, parsed)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return parsed


PARSED = ParsedVersions()


def parse_spec(body: Mapping[str, Any], source: str = "input") -> TrainingJobMonitor | AlertPolicy:
    """An object read from the cluster as a model, its status left out: the status is the operator's
    own record, read raw, and a status the model would refuse must not make the spec unreadable. A
    version parsed before is not validated again (ParsedVersions)."""
    return PARSED.parse(body, source)


def _parse_spec(body: Mapping[str, Any], source: str) -> TrainingJobMonitor | AlertPolicy:
    return parse_object({k: v for k, v in body.items() if k != "status"}, source)


def monitor_of(body: Mapping[str, Any] | None) -> TrainingJobMonitor | None:
    """The body's monitor, or None when there is none or it is invalid (its reconcile reports why)."""
    if body is None:
        return None
    try:
        parsed = parse_spec(body)
    except InvalidInput:
        return None
    return parsed if isinstance(parsed, TrainingJobMonitor) else None


class PolicyProblem(Exception):
    """A policy a monitor names is missing or invalid: the monitor's reconcile marks it Degraded with
    this reason and message, and every other pass leaves that monitor alone until it is mended."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def policies_for(
    monitor: TrainingJobMonitor, lookup: Callable[[str, str], Mapping[str, Any] | None]
) -> list[AlertPolicy]:
    """The policies `monitor` names, in its order, read through `lookup(namespace, name)` (a watch
    cache, the API, or a test's dict). Raises PolicyProblem for the first that is missing or invalid."""
    out: list[AlertPolicy] = []
    ns = monitor.namespace
    for ref in monitor.spec.policy_refs:
        raw = lookup(ns, ref.name)
        if raw is None:
            raise PolicyProblem(
                "PolicyNotFound",
                f"AlertPolicy {ns}/{ref.name} named in spec.policyRefs does not exist; create it or remove "
                "the reference. Rules and routes are left as they were.",
            )
        try:
            parsed = parse_spec(raw, f"{ns}/{ref.name}")
        except InvalidInput as exc:
            raise PolicyProblem("InvalidPolicy", f"AlertPolicy {ns}/{ref.name}: {exc.fields()}") from None
        if not isinstance(parsed, AlertPolicy):
            raise PolicyProblem("InvalidPolicy", f"AlertPolicy {ns}/{ref.name}: not an AlertPolicy")
        out.append(parsed)
    return out


def load_documents(sources: Iterable[tuple[str, str]]) -> Documents:
    """Parse (name, YAML text) pairs. Objects of other kinds are skipped; problems are all collected."""
    docs = Documents()
    problems: list[Problem] = []
    for name, text in sources:
        try:
            parsed = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            problems.append(Problem(name, "", f"not valid YAML: {exc}"))
            continue
        for index, doc in enumerate(parsed, start=1):
            if doc is None:
                continue
            where = f"{name}#{index}" if len(parsed) > 1 else name
            if not isinstance(doc, dict):
                problems.append(Problem(where, "", "each document must be a mapping (a Kubernetes object)"))
                continue
            if doc.get("kind") == "List" and isinstance(doc.get("items"), list):
                items = doc["items"]
            else:
                items = [doc]
            for item in items:
                api_version = str(item.get("apiVersion", ""))
                if not api_version.startswith("trainguard.io/") or item.get("kind") not in KINDS:
                    if api_version.startswith("trainguard.io/"):
                        problems.append(
                            Problem(
                                where, "kind", f"must be one of {', '.join(KINDS)} (got {item.get('kind')!r})"
                            )
                        )
                    else:
                        docs.skipped.append(f"{where}: {item.get('kind', '?')}")
                    continue
                try:
                    obj = parse_object(item, where)
                except InvalidInput as exc:
                    problems.extend(exc.problems)
                    continue
                key = (obj.kind, obj.namespace, obj.name)
                if key in docs.sources:
                    problems.append(
                        Problem(
                            where,
                            "metadata.name",
                            f"{obj.kind} {obj.namespace}/{obj.name} is defined twice (also in {docs.sources[key]})",
                        )
                    )
                    continue
                docs.sources[key] = where
                if isinstance(obj, TrainingJobMonitor):
                    docs.monitors.append(obj)
                else:
                    docs.policies.append(obj)
    problems.extend(docs.reference_problems())
    if problems:
        raise InvalidInput(problems)
    return docs
