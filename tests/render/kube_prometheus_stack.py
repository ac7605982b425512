"""kube-prometheus-stack's default Alertmanager configuration (kube-prometheus-stack-alertmanager.yaml)
with a platform's own routes on `severity`, and trainguard's AlertmanagerConfigs merged into it as
prometheus-operator merges them: e2e/prometheus_operator.py converts them (receivers and time
intervals named `<namespace>/<name>/<name>`, the top route with `namespace="<ns>"` and
`continue: true`, inhibit rules with the namespace matcher on both sides), and their routes go before
the configuration's own (pkg/alertmanager/amcfg.go, AddAlertmanagerConfigs).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from e2e import prometheus_operator

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


def merged(
    base: dict[str, Any], amcs: list[dict[str, Any]], secrets: dict[tuple[str, str], Any], files: Path
) -> dict[str, Any]:
    """`base` with the AlertmanagerConfigs `amcs` merged in (their Secrets keyed by namespace and name;
    `files` where the CA files they reference are written)."""
    ours = prometheus_operator.alertmanager_yml(amcs, secrets, files)
    config = copy.deepcopy(base)
    config["route"]["routes"] = [*ours["route"]["routes"], *config["route"].get("routes", [])]
    config["receivers"] += [r for r in ours["receivers"] if r["name"] != "null"]
    config["inhibit_rules"] = [*config.get("inhibit_rules", []), *ours["inhibit_rules"]]
    if ours.get("time_intervals"):
        config["time_intervals"] = [*config.get("time_intervals", []), *ours["time_intervals"]]
    return config


def write(config: dict[str, Any], tmp: Path) -> Path:
    path = tmp / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
