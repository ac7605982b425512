"""The word as the launcher reads it from the sidecar's control view, and the environment of the trainer
it starts: TRAINGUARD_GENERATION always, TRAINGUARD_RESUME_FROM and the rank, world and master overrides
only for a trainer started on a word."""

from __future__ import annotations

import json

import pytest

from trainguard.launch.word import BadWord, Word, child_env, word_of

CKPT = {"step": 1000.0, "kind": "full", "path": "/ckpt/1000", "ts": 1.0}


def test_a_word_is_read_from_the_view_and_unknown_keys_are_ignored() -> None:
    view = {"pause": False, "restart": {"generation": 2, "record": "r", "resume_from": CKPT, "rank": 1,
                                        "world_size": 4, "master_addr": "10.0.0.3", "master_port": 29502, "x": 1}}  # fmt: skip
    assert word_of(view) == Word(2, "r", CKPT, 1, 4, "10.0.0.3", 29502)
    assert word_of({"pause": False}) is None and word_of({"restart": None}) is None


@pytest.mark.parametrize(
    ("restart", "field"),
    [({"record": "r"}, "generation"), ({"generation": 0}, "generation"), ({"generation": 1, "rank": -1}, "rank"),
     ({"generation": 1, "resume_from": {"step": "x"}}, "resume_from"), ({"generation": 1, "master_addr": 3}, "master_addr")],
)  # fmt: skip
def test_a_word_it_cannot_use_is_refused_naming_the_field(restart: dict[str, object], field: str) -> None:
    with pytest.raises(BadWord, match=field):
        word_of({"restart": restart})


def test_the_environment_of_a_generation() -> None:
    base = {"PATH": "/bin", "TRAINGUARD_RESUME_FROM": '{"step": 1}', "RANK": "0"}
    first = child_env(base, 0, None)
    assert first == {**base, "TRAINGUARD_GENERATION": "0"}, "the first trainer: the container's own"
    env = child_env(base, 3, Word(3, resume_from=CKPT, rank=1, world_size=2, master_port=29503))
    assert json.loads(env["TRAINGUARD_RESUME_FROM"]) == CKPT and env["TRAINGUARD_GENERATION"] == "3"
    assert (env["RANK"], env["PET_NODE_RANK"], env["WORLD_SIZE"], env["PET_NNODES"]) == ("1", "1", "2", "2")
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "29503" and "MASTER_ADDR" not in env
    assert "TRAINGUARD_RESUME_FROM" not in child_env(base, 4, Word(4)), "no checkpoint: the sidecar is asked"
