"""Rendering helpers shared by the Alertmanager tests, and amtool's word on where an alert is routed."""

from __future__ import annotations

import subprocess
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


def routes_test(amtool: str, config: Path, labels: dict[str, str], expected: list[str]) -> None:
    """amtool's routing of an alert with `labels` in `config` reaches exactly the `expected` receivers."""
    args = [f"{k}={v}" for k, v in labels.items()]
    result = subprocess.run(
        [
            amtool,
            "config",
            "routes",
            "test",
            f"--config.file={config}",
            f"--verify.receivers={','.join(expected)}",
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, (
        f"{labels} went to {result.stdout.strip()}, expected {expected}\n{result.stderr}"
    )
