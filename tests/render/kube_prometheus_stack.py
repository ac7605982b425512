"""kube-prometheus-stack's default Alertmanager configuration (kube-prometheus-stack-alertmanager.yaml),
a user's own routes on `severity`, and trainguard's AlertmanagerConfig merged into it as
prometheus-operator merges one (pkg/alertmanager/amcfg.go, its default OnNamespace matcher strategy):
the AlertmanagerConfig's top route gets `namespace="<its namespace>"` and `continue: true` and goes
before the configuration's own routes; its receivers and time intervals are named
`<namespace>/<name>/<name>`; each of its inhibit rules gets the namespace matcher on both sides.

Receivers keep only their names: routing and inhibition read nothing else, and no notification leaves.
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
"""A platform's own routes on kube-prometheus-stack's severities, after its Watchdog route."""

_SNAKE = {
    "groupBy": "group_by",
    "groupWait": "group_wait",
    "groupInterval": "group_interval",
    "repeatInterval": "repeat_interval",
    "muteTimeIntervals": "mute_time_intervals",
    "activeTimeIntervals": "active_time_intervals",
}


def default_config(user_routes: bool = True) -> dict[str, Any]:
    """kube-prometheus-stack's default configuration, with USER_ROUTES and their receivers."""
    config: dict[str, Any] = yaml.safe_load(FIXTURE.read_text())
    if user_routes:
        config["route"]["routes"] += copy.deepcopy(USER_ROUTES)
        config["receivers"] += [{"name": PAGER}, {"name": CHAT}]
    return config


def _text(matcher: dict[str, str]) -> str:
    return f'{matcher["name"]}{matcher["matchType"]}"{matcher["value"]}"'


def _route(route: dict[str, Any], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in route.items():
        if key == "receiver":
            out["receiver"] = prefix + value
        elif key == "matchers":
            out["matchers"] = [_text(m) for m in value]
        elif key == "routes":
            out["routes"] = [_route(r, prefix) for r in value]
        elif key in ("muteTimeIntervals", "activeTimeIntervals"):
            out[_SNAKE[key]] = [prefix + v for v in value]
        else:
            out[_SNAKE.get(key, key)] = value
    return out


def merged(base: dict[str, Any], amc: dict[str, Any]) -> dict[str, Any]:
    """`base` with the AlertmanagerConfig object `amc` merged in, as prometheus-operator merges it."""
    meta, spec = amc["metadata"], amc["spec"]
    namespace = meta["namespace"]
    prefix = f"{namespace}/{meta['name']}/"
    assert not spec.get("muteTimeIntervals"), (
        "time intervals are not converted here: use a policy without them"
    )
    config = copy.deepcopy(base)
    top = _route(spec["route"], prefix)
    top["matchers"] = [*top.get("matchers", []), f'namespace="{namespace}"']
    top["continue"] = True
    config["route"]["routes"] = [top, *config["route"].get("routes", [])]
    config["receivers"] += [{"name": prefix + r["name"]} for r in spec["receivers"]]
    ns = f'namespace="{namespace}"'
    config["inhibit_rules"] += [
        {
            "source_matchers": [*(_text(m) for m in rule["sourceMatch"]), ns],
            "target_matchers": [*(_text(m) for m in rule["targetMatch"]), ns],
            "equal": rule["equal"],
        }
        for rule in spec.get("inhibitRules", [])
    ]
    return config


def write(config: dict[str, Any], tmp: Path) -> Path:
    path = tmp / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
