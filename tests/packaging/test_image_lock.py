"""requirements/image.lock and build.lock against pyproject.toml, offline: each was generated from the
requirements pyproject.toml has now (its header's digest), pins a version of each that satisfies it,
holds nothing that nothing needs, and checks every file by its hash. A change to the dependencies
without `make image-lock` fails here; tests/packaging/test_image_install.py installs the lock for real.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

import pytest
from packaging.requirements import Requirement
from scripts.image_lock import (
    BUILD_LOCK,
    IMAGE_EXTRAS,
    LOCK,
    PYPROJECT,
    REGENERATE,
    Pin,
    build_requirements,
    canonical,
    image_requirements,
    input_digest,
    parse_lock,
)

SHA256 = re.compile(r"^sha256:[0-9a-f]{64}$")
IMAGE_ENVIRONMENT = {"python_version": "3.11", "python_full_version": "3.11.14", "sys_platform": "linux",
                     "platform_system": "Linux", "os_name": "posix", "implementation_name": "cpython",
                     "platform_python_implementation": "CPython", "platform_machine": "x86_64", "extra": ""}  # fmt: skip
"""Where the image's requirement markers are evaluated: the Dockerfile's base."""
OURS = "trainguard (pyproject.toml)"


def pyproject() -> dict[str, Any]:
    return tomllib.loads(PYPROJECT.read_text())


LOCKS = {
    LOCK.name: (LOCK, image_requirements),
    BUILD_LOCK.name: (BUILD_LOCK, build_requirements),
}


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_the_lock_was_made_from_the_requirements_pyproject_has_now(name: str) -> None:
    path, requirements = LOCKS[name]
    fields, _ = parse_lock(path.read_text())
    assert fields.get("input") == input_digest(requirements(pyproject())), (
        f"{path.relative_to(PYPROJECT.parent)} was generated from other requirements than pyproject.toml's: "
        f"run `{REGENERATE}` and commit it"
    )


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_each_requirement_is_pinned_to_a_version_it_allows(name: str) -> None:
    path, requirements = LOCKS[name]
    _, pins = parse_lock(path.read_text())
    for text in requirements(pyproject()):
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate(IMAGE_ENVIRONMENT):
            continue
        pin = pins.get(canonical(requirement.name))
        assert pin is not None, f"{text}: not in {path.name}; run `{REGENERATE}`"
        assert requirement.specifier.contains(pin.version, prereleases=True), (
            f"{text}: {path.name} pins {pin.version}; run `{REGENERATE}`"
        )


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_every_pin_is_checked_by_hash(name: str) -> None:
    _, pins = parse_lock(LOCKS[name][0].read_text())
    assert pins
    for pin in pins.values():
        assert pin.hashes and all(SHA256.match(h) for h in pin.hashes), f"{pin.name}: no sha256 hash"


def needed(pins: dict[str, Pin]) -> set[str]:
    """The pins reachable from pyproject.toml through the lock's `# via` lines."""
    found: set[str] = set()
    todo = [key for key, pin in pins.items() if OURS in pin.via]
    while todo:
        key = todo.pop()
        if key in found:
            continue
        found.add(key)
        todo += [k for k, pin in pins.items() if pins[key].name in pin.via or key in map(canonical, pin.via)]
    return found


def test_the_image_lock_holds_exactly_what_trainguard_needs() -> None:
    """Nothing in it that no requirement of pyproject.toml leads to (an entry left from an old resolution)."""
    _, pins = parse_lock(LOCK.read_text())
    orphans = set(pins) - needed(pins)
    assert not orphans, f"{sorted(orphans)}: in {LOCK.name} but needed by nothing; run `{REGENERATE}`"


def test_a_changed_dependency_changes_the_digest() -> None:
    """What makes the first test fail on drift: adding, removing or relaxing a requirement, in an extra
    the image installs or in one it reaches through trainguard[...], moves the digest; an extra the
    image does not install does not."""
    base = pyproject()
    digest = input_digest(image_requirements(base))

    def changed(extra: str, requirements: list[str]) -> str:
        p = tomllib.loads(PYPROJECT.read_text())
        p["project"]["optional-dependencies"][extra] = requirements
        return input_digest(image_requirements(p))

    render = base["project"]["optional-dependencies"]["render"]
    assert changed("exporter", ["prometheus-client>=0.20"]) != digest  # nvidia-ml-py removed
    assert changed("render", [*render, "jinja2>=3"]) != digest  # reached through trainguard[render]
    assert (
        changed("otlp", ["opentelemetry-sdk>=1.45", "opentelemetry-exporter-otlp-proto-http==1.45.2"])
        != digest
    )
    assert changed("dev", ["pytest"]) == digest, "the dev extra is not in the image"


def test_the_image_requirements_expand_the_extras_they_name() -> None:
    reqs = image_requirements(pyproject())
    assert "kopf>=1.37" in reqs and "nvidia-ml-py>=12" in reqs, "operator and exporter"
    assert any(r.startswith("pydantic") for r in reqs), "render, through trainguard[render]"
    assert not any(r.lower().startswith("trainguard") for r in reqs)
    assert not any(r.startswith("pytest") for r in reqs)
    with pytest.raises(ValueError, match="no extra 'gpu'"):
        image_requirements(pyproject(), ("gpu",))
    assert IMAGE_EXTRAS == ("operator", "exporter", "otlp")
