"""The e2e suite's refusal to share one named cluster between its processes (e2e/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_e2e(*args: str, kubeconfig: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRAINGUARD_E2E_KUBECONFIG"}
    if kubeconfig:
        env["TRAINGUARD_E2E_KUBECONFIG"] = kubeconfig
    return subprocess.run(
        [sys.executable, "-m", "pytest", "e2e", "-p", "no:cacheprovider", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_named_cluster_with_several_processes_is_refused_before_anything_starts(tmp_path: Path) -> None:
    out = run_e2e("-n", "3", kubeconfig=str(tmp_path / "kubeconfig"))
    assert out.returncode == 4, out.stdout + out.stderr  # pytest's usage error
    assert "TRAINGUARD_E2E_KUBECONFIG names one cluster, which the 3 e2e processes" in out.stderr
    assert "E2E_WORKERS=0" in out.stderr


def test_a_named_cluster_in_one_process_is_accepted(tmp_path: Path) -> None:
    # collected only: a named cluster with -n 0 gets past configuration
    out = run_e2e("-n", "0", "--collect-only", "-q", kubeconfig=str(tmp_path / "kubeconfig"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "test_pipeline_alerts.py::test_gradient_explosion_advice" in out.stdout
