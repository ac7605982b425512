"""The Prometheus and Alertmanager releases that the rule and routing tests run on.

- `debian`: Debian's packages on PATH (Prometheus 2.42, Alertmanager 0.25), what .ci/run installs.
- `upstream`: the releases users run today (Prometheus 3, Alertmanager 0.35, pinned in
  e2e/controlplane/build.sh), built from their Go modules by `build.sh upstream` (`make upstream-tools`,
  which `make unit` runs first: it waits for a build in progress) into the e2e cache.

Prometheus 3 changed what a rule means (left-open range selectors, `.` matching newlines, renamed
functions) and Alertmanager changed how matchers parse: a rule or a route is only right when both agree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from e2e.controlplane.cache import cache_dir

TOOLCHAINS = ("debian", "upstream")

HOW = {
    "debian": ".ci/run installs it: apt-get install prometheus prometheus-alertmanager",
    "upstream": "`make upstream-tools` builds it from its Go module (needs Go)",
}


def upstream_dir() -> Path:
    """build.sh's stable names for the upstream toolchain: toolchains/upstream/<name> -> bin/<name>-<version>."""
    return cache_dir() / "toolchains" / "upstream"


def find_tool(toolchain: str, name: str) -> str | None:
    """The binary `name` (promtool, amtool, prometheus, alertmanager) of `toolchain`, if it is there."""
    if toolchain == "debian":  # Debian names its Alertmanager prometheus-alertmanager
        return shutil.which("prometheus-alertmanager" if name == "alertmanager" else name)
    built = upstream_dir() / name
    return str(built) if built.is_file() and os.access(built, os.X_OK) else None


def required_tool(toolchain: str, name: str) -> str:
    """find_tool, or a skip without it; a failure where CI requires the tools (TRAINGUARD_REQUIRE_TOOLS)."""
    path = find_tool(toolchain, name)
    if path is None:
        if os.environ.get("TRAINGUARD_REQUIRE_TOOLS"):
            pytest.fail(f"{name} ({toolchain}) is required (TRAINGUARD_REQUIRE_TOOLS is set) but not found")
        pytest.skip(f"{name} ({toolchain}) is not installed: {HOW[toolchain]}")
    return path


PROMTOOL_TIMEOUT_S = 900.0
"""A guard against a hang, not a speed test: StragglerRank's cases take 25 s of one core under load 10,
and a CI machine starved further ran past 120 s."""


def promtool_test_rules(promtool: str, directory: Path, what: str = "") -> None:
    """`promtool test rules test.yml` in `directory`; fails with promtool's own output (for `what`)."""
    result = subprocess.run([promtool, "test", "rules", "test.yml"], cwd=directory, capture_output=True,
                            text=True, timeout=PROMTOOL_TIMEOUT_S, check=False)  # fmt: skip
    assert result.returncode == 0, (
        f"promtool test rules failed{f' for {what}' if what else ''}:\n{result.stdout}\n{result.stderr}"
    )
