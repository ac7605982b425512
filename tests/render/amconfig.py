"""Rendering helpers shared by the Alertmanager tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import monitor, policy
from trainguard.api import AlertPolicy, TrainingJobMonitor
from trainguard.render import dump_yaml
from trainguard.render.alertmanager import alertmanager_yml
from trainguard.render.policy import effective_policy


def write_config(
    tmp: Path,
    pairs: list[tuple[TrainingJobMonitor, AlertPolicy]] | None = None,
    **policy_changes: Any,
) -> Path:
    if pairs is None:
        pairs = [(monitor(), policy(**policy_changes))]
    config = alertmanager_yml([(m, effective_policy(m, [p])) for m, p in pairs])
    path = tmp / "alertmanager.yml"
    path.write_text(dump_yaml(config))
    return path
