"""A version of an object read from the cluster is validated once: the passes over every monitor in the
watch cache (detect, every second) read the model of an unchanged monitor without pydantic."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.conftest import MONITOR
from trainguard.api import InvalidInput, TrainingJobMonitor
from trainguard.api.load import ParsedVersions


def cached(name: str = "llama-pretrain", uid: str = "u-1", version: str = "7", **spec: Any) -> dict[str, Any]:
    body = copy.deepcopy(MONITOR)
    body["metadata"].update(name=name, uid=uid, resourceVersion=version)
    body["spec"].update(spec)
    return body


def test_the_same_version_is_parsed_once_and_a_new_one_again() -> None:
    parsed = ParsedVersions()
    first = parsed.parse(cached(), "cache")
    assert isinstance(first, TrainingJobMonitor)
    assert parsed.parse(cached(), "cache") is first
    assert (parsed.parses, parsed.hits) == (1, 1)
    moved = parsed.parse(cached(version="8", checkpoint={"timeout": "9m"}), "cache")
    assert isinstance(moved, TrainingJobMonitor) and moved.spec.checkpoint.timeout == "9m"
    assert parsed.parses == 2


def test_a_monitor_recreated_under_its_name_is_parsed_again() -> None:
    parsed = ParsedVersions()
    parsed.parse(cached(), "cache")
    again = parsed.parse(cached(uid="u-2", checkpoint={"timeout": "9m"}), "cache")
    assert isinstance(again, TrainingJobMonitor) and again.spec.checkpoint.timeout == "9m"


def test_a_body_without_a_version_is_never_remembered() -> None:
    """An object not read from the cluster (a file, a test's dict) has no version to key on."""
    parsed = ParsedVersions()
    body = cached()
    del body["metadata"]["resourceVersion"]
    parsed.parse(body, "file")
    body["spec"]["checkpoint"] = {"timeout": "9m"}
    again = parsed.parse(body, "file")
    assert isinstance(again, TrainingJobMonitor) and again.spec.checkpoint.timeout == "9m"
    assert parsed.hits == 0


def test_an_invalid_version_raises_each_time_and_is_not_remembered() -> None:
    parsed = ParsedVersions()
    for _ in range(2):
        with pytest.raises(InvalidInput, match="timeout"):
            parsed.parse(cached(checkpoint={"timeout": "soon"}), "cache")
    assert parsed.hits == 0


def test_the_least_recently_read_objects_go_first() -> None:
    parsed = ParsedVersions(size=2)
    parsed.parse(cached("a"), "cache")
    parsed.parse(cached("b"), "cache")
    parsed.parse(cached("a"), "cache")  # read again: b is now the oldest
    parsed.parse(cached("c"), "cache")
    parses = parsed.parses
    parsed.parse(cached("a"), "cache")
    assert parsed.parses == parses, "a was kept"
    parsed.parse(cached("b"), "cache")
    assert parsed.parses == parses + 1, "b had gone"
