"""The helm binary for the chart tests: built by `make helm` (e2e/controlplane/build.sh helm)."""

from __future__ import annotations

import os

import pytest

from tests.packaging.chart import find_helm


@pytest.fixture(scope="session")
def helm() -> str:
    path = find_helm()
    if path is None:
        if os.environ.get("TRAINGUARD_REQUIRE_TOOLS"):
            pytest.fail("helm is required (TRAINGUARD_REQUIRE_TOOLS is set) but neither built nor on PATH")
        pytest.skip("helm is not built: `make helm` builds it from its Go module (needs Go)")
    return path
