"""Whole documents: every monitor of the input rendered as one Kubernetes YAML stream, or as the files
a plain Prometheus and Alertmanager read; and the one YAML dumper every output goes through."""

from __future__ import annotations

from typing import Any

import yaml

from trainguard.api.load import Documents
from trainguard.catalog.severity import GRADE
from trainguard.render.alertmanager import alertmanager_yml
from trainguard.render.kubernetes import monitor_objects
from trainguard.render.longterm import DEFAULT_INTERVAL, aggregate_group, remote_write
from trainguard.render.policy import effective_policy
from trainguard.render.prometheus import rule_group
from trainguard.render.shared import PER_MONITOR, SHARED, exposition, monitor_groups, shared_groups

SETTINGS_FILE = "monitor-settings.prom"


def _sorted_monitors(docs: Documents) -> list[Any]:
    return sorted(docs.monitors, key=lambda m: (m.namespace, m.name))


def render_kubernetes(
    docs: Documents, aggregate_interval: str = DEFAULT_INTERVAL, severity_style: str = GRADE
) -> list[dict[str, Any]]:
    """The objects for every monitor, ordered by namespace and name. Each PrometheusRule also holds
    the monitor's long-term aggregate group (render.longterm), evaluated every `aggregate_interval`;
    its alerts' `severity` is in `severity_style` (catalog/severity.py)."""
    out: list[dict[str, Any]] = []
    for m in _sorted_monitors(docs):
        policy = effective_policy(m, docs.policies_for(m))
        out += monitor_objects(
            m, policy, aggregate_interval=aggregate_interval, severity_style=severity_style
        )
    return out


def render_prometheus(
    docs: Documents,
    aggregate_interval: str = DEFAULT_INTERVAL,
    remote_write_url: str | None = None,
    remote_write_events_url: str | None = None,
    *,
    severity_style: str = GRADE,
    rule_form: str = PER_MONITOR,
    shared_rule_groups: int = 1,
    shared_annotation_lookups: bool = False,
) -> dict[str, Any]:
    """`rules.yml` and `alertmanager.yml` for a plain Prometheus and Alertmanager, `aggregates.yml`
    (a second rule file: the long-term aggregates) and, given a URL, `remote_write.yml`: the
    remote_write section for prometheus.yml that ships only the aggregates and the alert history
    (the history to `remote_write_events_url` instead, when given, for a store that keeps it longer).
    The rules' `severity` is in `severity_style`; alertmanager.yml routes on `priority`, in any style.
    With `rule_form` shared, rules.yml holds the shared group (in `shared_rule_groups` groups at most,
    its annotations looked up with `shared_annotation_lookups`)
    and the groups of the monitors it cannot judge (render/shared.py), and monitor-settings.prom the
    series it reads, for the operator to serve or any static endpoint."""
    pairs = [(m, effective_policy(m, docs.policies_for(m))) for m in _sorted_monitors(docs)]
    if rule_form == SHARED:
        groups = shared_groups(severity_style, shared_rule_groups, shared_annotation_lookups) + [
            g for m, p in pairs for g in monitor_groups(m, p, severity_style)
        ]
    else:
        groups = [rule_group(m, p, severity_style) for m, p in pairs]
    files: dict[str, Any] = {
        "rules.yml": {"groups": groups},
        "aggregates.yml": {"groups": [aggregate_group(m, aggregate_interval) for m, _ in pairs]},
        "alertmanager.yml": alertmanager_yml(pairs),
    }
    if rule_form == SHARED:
        files[SETTINGS_FILE] = exposition(pairs)
    if remote_write_url:
        files["remote_write.yml"] = remote_write(remote_write_url, remote_write_events_url)
    return files


class _Dumper(yaml.SafeDumper):
    """Block style, no aliases, multi-line strings as literal blocks: stable, readable output."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(obj: Any) -> str:
    return yaml.dump(
        obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096, allow_unicode=True
    )


def dump_stream(objs: list[dict[str, Any]]) -> str:
    return "".join("---\n" + dump_yaml(o) for o in objs)
