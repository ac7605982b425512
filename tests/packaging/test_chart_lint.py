"""`helm lint --strict` on the chart, with its defaults and with every option on."""

from __future__ import annotations

import pytest

from tests.packaging.chart import CHART, GOLDEN_VALUES, run_helm


@pytest.mark.parametrize("case", ["default", "secret-certs"])
def test_helm_lint_passes_strictly(helm: str, case: str) -> None:
    proc = run_helm(
        helm, "lint", "--strict", str(CHART), "--values", str(GOLDEN_VALUES / f"{case}.values.yaml")
    )
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout, proc.stdout


def test_helm_lint_reports_a_broken_value(helm: str) -> None:
    proc = run_helm(helm, "lint", "--strict", str(CHART), "--set", "replicas=-1", check=False)
    assert proc.returncode != 0
    assert "/replicas" in proc.stdout + proc.stderr
