"""The image's install step, done here for real (no Docker engine to build the image itself): build
the trainguard wheel as the Dockerfile's build stage does, install it with the Dockerfile's extras
into a clean virtualenv (dependencies from the package index), and run both entrypoints from it."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.packaging.dockerfile import DOCKERFILE, REPO, stages


def _run(
    *args: str | Path, timeout: float = 600, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd
    )
    assert proc.returncode == 0, (
        f"{' '.join(map(str, args))} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )
    return proc


def test_the_wheel_installs_into_a_clean_venv_and_both_entrypoints_run(tmp_path: Path) -> None:
    install = next(r for r in stages(DOCKERFILE.read_text())[0].args("RUN") if "pip install" in r)
    extras = re.search(r"\[([a-z,]+)\]", install)
    assert extras, install
    wheels = tmp_path / "wheels"
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", wheels, REPO)
    (wheel,) = wheels.glob("trainguard-*.whl")

    # everything the source tree has is in the wheel: every subpackage, and py.typed
    names = set(zipfile.ZipFile(wheel).namelist())
    source = REPO / "operator"
    for init in source.glob("trainguard/**/__init__.py"):
        assert str(init.relative_to(source)) in names, f"{init.relative_to(REPO)} is not in the wheel"
    assert "trainguard/py.typed" in names

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    _run(venv / "bin" / "pip", "install", "--quiet", f"{wheel}[{extras.group(1)}]")
    trainguard = venv / "bin" / "trainguard"
    version = _run(trainguard, "--version").stdout
    assert version.strip() == "trainguard 0.1.0"
    assert "--webhook-service" in _run(trainguard, "operator", "--help").stdout
    assert "--backend" in _run(trainguard, "exporter", "--help").stdout
    # the operator's and the exporter's modules import with what the extras installed, the OTLP push
    # (spec.exporter.otlp on the injected sidecar) included
    _run(
        venv / "bin" / "python",
        "-c",
        "import trainguard.controller.run, trainguard.exporter.main, trainguard.exporter.otlp, pynvml, kopf; "
        "import trainguard; assert 'site-packages' in trainguard.__file__, trainguard.__file__",
        cwd=tmp_path,
    )
