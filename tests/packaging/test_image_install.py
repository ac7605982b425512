"""The image's install steps, done here for real (no Docker engine to build the image itself): the
build backend from requirements/build.lock and the dependencies from requirements/image.lock, both with
--require-hashes --no-deps (from the package index, so every hash is checked against the real files),
the trainguard wheel built without build isolation and installed without dependencies, then `pip
check`, both entrypoints, and the set installed: exactly the lock, exactly what trainguard's extras
need."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from scripts.image_lock import BUILD_LOCK, IMAGE_EXTRAS, LOCK, canonical, parse_lock

from tests.packaging.dockerfile import REPO

PACKAGING_TOOLS = {"pip", "setuptools", "wheel"}
"""What a virtualenv starts with (the image removes pip): not dependencies."""


def _run(
    *args: str | Path, timeout: float = 600, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    # no PYTHONPATH, as in the image: one naming the source tree (where a build leaves
    # trainguard.egg-info) would show pip a trainguard already installed, and it would install none
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd, env=env
    )
    assert proc.returncode == 0, (
        f"{' '.join(map(str, args))} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )
    return proc


def closure(dists: dict[str, metadata.Distribution], root: str, extras: Iterable[str]) -> set[str]:
    """The distributions `root` with `extras` needs, transitively, by its metadata (markers for this
    interpreter: CPython 3.11 on Linux, as the image)."""
    found: set[str] = set()
    todo = [(canonical(root), set(extras))]
    while todo:
        name, wanted = todo.pop()
        for text in dists[name].requires or []:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is not None and not any(marker.evaluate({"extra": e}) for e in wanted | {""}):
                continue
            key = canonical(requirement.name)
            if key == canonical(root):  # trainguard[render] from trainguard[operator]
                todo.append((key, set(requirement.extras)))
                continue
            if key not in found:
                found.add(key)
                todo.append((key, set(requirement.extras)))
    return found


def test_the_locked_image_install_works_and_holds_exactly_what_trainguard_needs(tmp_path: Path) -> None:
    build = tmp_path / "build"
    _run(sys.executable, "-m", "venv", build)
    _run(build / "bin" / "pip", "install", "--quiet", "--require-hashes", "--no-deps", "-r", BUILD_LOCK)
    wheels = tmp_path / "wheels"
    _run(
        build / "bin" / "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--wheel-dir",
        wheels,
        REPO,
    )
    (wheel,) = wheels.glob("trainguard-*.whl")

    # everything the source tree has is in the wheel: every subpackage, and py.typed
    names = set(zipfile.ZipFile(wheel).namelist())
    source = REPO / "operator"
    for init in source.glob("trainguard/**/__init__.py"):
        assert str(init.relative_to(source)) in names, f"{init.relative_to(REPO)} is not in the wheel"
    assert "trainguard/py.typed" in names

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    _run(venv / "bin" / "pip", "install", "--quiet", "--require-hashes", "--no-deps", "-r", LOCK)
    _run(venv / "bin" / "pip", "install", "--quiet", "--no-deps", wheel)
    _run(venv / "bin" / "pip", "check")
    trainguard = venv / "bin" / "trainguard"
    version = _run(trainguard, "--version").stdout
    assert version.strip() == "trainguard 0.1.0"
    assert "--webhook-service" in _run(trainguard, "operator", "--help").stdout
    assert "--backend" in _run(trainguard, "exporter", "--help").stdout
    # the operator's and the exporter's modules import with what the lock installed, the OTLP push
    # (spec.exporter.otlp on the injected sidecar) included
    _run(
        venv / "bin" / "python",
        "-c",
        "import trainguard.controller.run, trainguard.exporter.main, trainguard.exporter.otlp, pynvml, kopf; "
        "import trainguard; assert 'site-packages' in trainguard.__file__, trainguard.__file__",
        cwd=tmp_path,
    )

    (site,) = (venv / "lib").glob("python3.*/site-packages")
    dists = {canonical(d.metadata["Name"]): d for d in metadata.distributions(path=[str(site)])}
    installed = set(dists) - PACKAGING_TOOLS - {"trainguard"}
    _, pins = parse_lock(LOCK.read_text())
    assert installed == set(pins)
    assert closure(dists, "trainguard", IMAGE_EXTRAS) == set(pins), "the lock is exactly what the extras need"
