"""Chart.yaml's kubeVersion: helm refuses a cluster older than the oldest the chart works on, says so
before anything is applied, and accepts the providers' version strings."""

from __future__ import annotations

import pytest
import yaml

from tests.packaging.chart import CHART, REPO, run_helm, template_args


def test_the_minimum_is_the_first_minor_whose_crd_validation_rules_name_a_field() -> None:
    """The CRDs' CEL rules carry fieldPath and reason, which apiservers before 1.28 do not know."""
    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"] == ">=1.28.0-0"
    crds = "".join(p.read_text() for p in sorted((REPO / "crds").glob("*.yaml")))
    assert "- fieldPath: ." in crds


@pytest.mark.parametrize("version", ["1.27.16", "v1.27.3-gke.100"])
def test_an_older_cluster_is_refused(helm: str, version: str) -> None:
    proc = run_helm(helm, *template_args(), "--kube-version", version, check=False)
    assert proc.returncode != 0
    assert "chart requires kubeVersion: >=1.28.0-0" in proc.stderr, proc.stderr


@pytest.mark.parametrize("version", ["1.28.0", "v1.28.5-eks-1234", "1.36.0"])
def test_a_supported_cluster_is_accepted(helm: str, version: str) -> None:
    run_helm(helm, *template_args("rbac.secretWritePolicy=false"), "--kube-version", version)
