"""The launcher's decisions (trainguard/launch/decide.py), pure: a new generation's word stops the trainer
and starts it again from the word's checkpoint, a word already seen changes nothing, a trainer that
fails by itself waits for a word and without one ends the launcher with its status, and a signal is
forwarded, with SIGKILL after the term grace."""

from __future__ import annotations

import signal

from trainguard.launch import decide
from trainguard.launch.decide import Exit, Exited, Say, Settings, Start, State, Stop
from trainguard.launch.word import Word

SETTINGS = Settings(term_grace_s=2.0, word_timeout_s=30.0)
CKPT = {"step": 1000, "kind": "full", "path": "/ckpt/1000"}


def acts(actions: list[decide.Action]) -> list[decide.Action]:
    return [a for a in actions if not isinstance(a, Say)]


def running(generation: int = 0) -> State:
    state, actions = decide.begin(Word(generation) if generation else None)
    assert acts(actions) == [Start(generation, None)]
    return state


def test_the_first_trainer_starts_at_once_and_a_word_held_from_before_is_not_replayed() -> None:
    state = running(3)
    assert (state.generation, state.seen) == (3, 3)
    assert decide.on_word(state, Word(3, resume_from=CKPT), 1.0) == (state, []), "generation 3 is history"


def test_a_new_generation_stops_the_trainer_then_starts_it_from_the_words_checkpoint() -> None:
    word = Word(1, "rec", CKPT)
    state, actions = decide.on_word(running(), word, 10.0)
    assert acts(actions) == [Stop(hard=False)] and state.stopping == decide.RESTART
    again, actions = decide.on_word(state, word, 10.1)
    assert (again, actions) == (state, []), "a re-posted word changes nothing"
    state, actions = decide.on_exit(state, -signal.SIGTERM, 10.3, SETTINGS)
    assert acts(actions) == [Exited("restart", None, signal.SIGTERM), Start(1, word)]
    assert (state.generation, state.running, state.stopping) == (1, True, None)


def test_a_trainer_that_ignores_sigterm_is_killed_after_the_term_grace() -> None:
    state, _ = decide.on_word(running(), Word(1), 10.0)
    assert decide.on_tick(state, 11.9, SETTINGS)[1] == []
    state, actions = decide.on_tick(state, 12.0, SETTINGS)
    assert acts(actions) == [Stop(hard=True)]
    assert decide.on_tick(state, 15.0, SETTINGS)[1] == [], "killed once"


def test_a_newer_word_while_stopping_is_the_one_started() -> None:
    state, _ = decide.on_word(running(), Word(1), 10.0)
    state, actions = decide.on_word(state, Word(2, resume_from=CKPT), 10.1)
    assert acts(actions) == [], "the trainer is already being stopped"
    _, actions = decide.on_exit(state, 0, 10.2, SETTINGS)
    assert acts(actions)[-1] == Start(2, Word(2, resume_from=CKPT))


def test_a_failed_trainer_waits_for_a_word_and_is_restarted_by_it() -> None:
    state, actions = decide.on_exit(running(), 1, 50.0, SETTINGS)
    assert acts(actions) == [Exited("exit", 1, None)] and state.waiting_until == 80.0
    assert decide.on_tick(state, 79.0, SETTINGS)[1] == []
    state, actions = decide.on_word(state, Word(1, resume_from=CKPT), 60.0)
    assert acts(actions) == [Start(1, Word(1, resume_from=CKPT))] and state.waiting_until is None


def test_without_a_word_the_launcher_exits_with_the_trainers_status_never_restarting_on_its_own() -> None:
    state, _ = decide.on_exit(running(), -signal.SIGKILL, 50.0, SETTINGS)  # an OOM kill
    _, actions = decide.on_tick(state, 80.0, SETTINGS)
    assert acts(actions) == [Exit(128 + signal.SIGKILL, actions[0].why)]  # type: ignore[union-attr]
    assert "owner's policy" in actions[0].why  # type: ignore[union-attr]


def test_a_finished_trainer_ends_the_launcher_with_0() -> None:
    _, actions = decide.on_exit(running(), 0, 50.0, SETTINGS)
    assert acts(actions) == [Exited("exit", 0, None), Exit(0, "the trainer finished")]


def test_a_signal_is_forwarded_and_the_launcher_exits_with_the_trainers_status() -> None:
    state, actions = decide.on_signal(running(), signal.SIGTERM, 5.0)
    assert acts(actions) == [Stop(hard=False)]
    assert decide.on_word(state, Word(1), 5.1) == (state, []), "no restart on the way out"
    _, hard = decide.on_signal(state, signal.SIGINT, 5.2)
    assert hard == [Stop(hard=True)], "a second signal: no more grace"
    _, actions = decide.on_exit(state, 143, 5.5, SETTINGS)
    assert acts(actions) == [Exited("signal", 143, None), Exit(143, f"stopped by signal {signal.SIGTERM}")]


def test_a_signal_while_waiting_for_a_word_exits_at_once() -> None:
    state, _ = decide.on_exit(running(), 1, 50.0, SETTINGS)
    _, actions = decide.on_signal(state, signal.SIGTERM, 51.0)
    assert [type(a) for a in actions] == [Exit] and actions[0].status == 128 + signal.SIGTERM  # type: ignore[union-attr]
