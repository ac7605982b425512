"""Shared fixtures: small valid objects, the real promtool/amtool binaries when installed (each test
that runs them runs once per toolchain: Debian's and upstream's current releases), and the certificates
of the operator's receiver."""

from __future__ import annotations

import copy
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.remediation.intake import make_certs
from tests.toolchains import TOOLCHAINS
from tests.toolchains import required_tool as toolchain_tool
from trainguard.api import AlertPolicy, TrainingJobMonitor, parse_object
from trainguard.controller.events import RECENT_EVENTS

MONITOR: dict[str, Any] = {
    "apiVersion": "trainguard.io/v1alpha1",
    "kind": "TrainingJobMonitor",
    "metadata": {"name": "llama-pretrain", "namespace": "ml"},
    "spec": {
        "selector": {"matchLabels": {"app": "llama-pretrain"}},
        "exporter": {"gpuBackend": "simulated", "scrapeInterval": "15s"},
        "checkpoint": {"timeout": "5m"},
        "policyRefs": [{"name": "default"}],
    },
}

POLICY: dict[str, Any] = {
    "apiVersion": "trainguard.io/v1alpha1",
    "kind": "AlertPolicy",
    "metadata": {"name": "default", "namespace": "ml"},
    "spec": {
        "receivers": [
            {
                "name": "oncall-phone",
                "type": "webhook",
                "roles": ["phone", "sms"],
                "url": "http://127.0.0.1:9101/phone",
            },
            {"name": "im", "type": "webhook", "roles": ["im"], "url": "http://127.0.0.1:9101/im"},
            {"name": "email", "type": "webhook", "roles": ["email"], "url": "http://127.0.0.1:9101/email"},
            {"name": "ticket", "type": "webhook", "roles": ["ticket"], "url": "http://127.0.0.1:9101/ticket"},
        ]
    },
}


def merged(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of `base` with dotted paths replaced: merged(MONITOR, **{"spec.mode": "inference"})."""
    out = copy.deepcopy(base)
    for path, value in changes.items():
        node = out
        *parents, last = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def monitor_body(**spec: Any) -> dict[str, Any]:
    """MONITOR as the apiserver holds it (a generation, a uid), its spec updated with `spec`."""
    body = copy.deepcopy(MONITOR)
    body["metadata"].update(generation=1, uid="u-1")
    body["spec"].update(spec)
    return body


def monitor(**changes: Any) -> TrainingJobMonitor:
    obj = parse_object(merged(MONITOR, **changes))
    assert isinstance(obj, TrainingJobMonitor)
    return obj


def policy(**changes: Any) -> AlertPolicy:
    obj = parse_object(merged(POLICY, **changes))
    assert isinstance(obj, AlertPolicy)
    return obj


def required_tool(name: str) -> str:
    """The binary `name` on PATH: skips the test without it, or fails it where CI requires the tools
    (TRAINGUARD_REQUIRE_TOOLS)."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("TRAINGUARD_REQUIRE_TOOLS"):
            pytest.fail(f"{name} is required (TRAINGUARD_REQUIRE_TOOLS is set) but not on PATH")
        pytest.skip(
            f"{name} is not installed (.ci/run installs it: apt-get install prometheus prometheus-alertmanager)"
        )
    return path


@pytest.fixture(autouse=True)
def no_events_remembered() -> Iterator[None]:
    """Every test starts with no Event remembered as posted: the announcers' memory is the process's
    (controller/events.py), and a test in the same worker posting the same Event of the same uid
    within a minute would silence another's."""
    RECENT_EVENTS.clear()
    yield


@pytest.fixture(scope="session", params=TOOLCHAINS)
def toolchain(request: pytest.FixtureRequest) -> str:
    """Each test that runs promtool or amtool runs on Debian's releases and on upstream's current ones
    (tests/toolchains.py): a rule or a route must mean the same on both."""
    name: str = request.param
    return name


@pytest.fixture(scope="session")
def promtool(toolchain: str) -> str:
    return toolchain_tool(toolchain, "promtool")


@pytest.fixture(scope="session")
def amtool(toolchain: str) -> str:
    return toolchain_tool(toolchain, "amtool")


@pytest.fixture(scope="session")
def am_binary(toolchain: str) -> str:
    """The toolchain's Alertmanager, for the tests that route through a real one."""
    return toolchain_tool(toolchain, "alertmanager")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and a serving certificate for 127.0.0.1 it signed, for the operator's receiver over real TLS
    (tests/remediation/intake.py)."""
    return make_certs(tmp_path_factory.mktemp("certs"))
