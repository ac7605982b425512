"""When the demo runs its operator act (e2e/operator_act.py `choose`): on its own only with the local
control plane cached, built first when asked for, never asked to build without Go."""

from __future__ import annotations

import pytest

from e2e.operator_act import choose


@pytest.mark.parametrize("go", [True, False])
def test_a_cached_control_plane_runs_the_act_without_building(go: bool) -> None:
    for asked in (None, True):
        choice = choose(asked=asked, cached=True, go=go)
        assert (choice.build, choice.run, choice.failed) == (False, True, False)


def test_a_fresh_machine_runs_act_one_and_says_how_to_get_the_operator_act() -> None:
    choice = choose(asked=None, cached=False, go=True)
    assert (choice.build, choice.run, choice.failed) == (False, False, False)
    assert "make controlplane" in choice.note and "DEMO_ARGS=--with-operator" in choice.note
    assert "8 minutes" in choice.note


def test_asking_for_the_operator_act_builds_the_control_plane_first_and_says_how_long() -> None:
    choice = choose(asked=True, cached=False, go=True)
    assert (choice.build, choice.run, choice.failed) == (True, True, False)
    assert "8 minutes" in choice.note


def test_asking_for_it_without_go_fails_naming_go() -> None:
    choice = choose(asked=True, cached=False, go=False)
    assert choice.failed and not choice.run and not choice.build
    assert "Go" in choice.note


@pytest.mark.parametrize("cached", [True, False])
def test_no_operator_skips_the_act_even_when_cached(cached: bool) -> None:
    choice = choose(asked=False, cached=cached, go=True)
    assert (choice.build, choice.run, choice.failed) == (False, False, False)
