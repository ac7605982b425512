"""kube-prometheus-stack's default Alertmanager configuration (kube-prometheus-stack-alertmanager.yaml)
with a platform's own routes on `severity`: the base configuration the real prometheus-operator merges
trainguard's AlertmanagerConfigs into in e2e/test_severity_kube_prometheus_stack.py.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

FIXTURE = Path(__file__).with_name("kube-prometheus-stack-alertmanager.yaml")

PAGER = "pager"
CHAT = "chat"
USER_ROUTES: list[dict[str, Any]] = [
    {"receiver": PAGER, "matchers": ['severity="critical"']},
    {"receiver": CHAT, "matchers": ['severity="warning"']},
]
"""A platform's own routes on kube-prometheus-stack's severities, after its Watchdog route. Their
receivers notify no one: routing and inhibition read only their names."""


def default_config(user_routes: bool = True) -> dict[str, Any]:
    """kube-prometheus-stack's default configuration, with USER_ROUTES and their receivers."""
    config: dict[str, Any] = yaml.safe_load(FIXTURE.read_text())
    if user_routes:
        config["route"]["routes"] += copy.deepcopy(USER_ROUTES)
        config["receivers"] += [{"name": PAGER}, {"name": CHAT}]
    return config


def write(config: dict[str, Any], tmp: Path) -> Path:
    path = tmp / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
