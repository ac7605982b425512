"""Where build.sh keeps what it builds: $TRAINGUARD_E2E_CACHE, by default ~/.cache/trainguard-e2e (the
control plane's binaries and CRDs, and the tools the tests and benchmarks run: helm, victoria-metrics,
node_exporter, kubectl)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("TRAINGUARD_E2E_CACHE", Path.home() / ".cache" / "trainguard-e2e"))
