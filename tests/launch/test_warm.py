"""The warm trainer's command (trainguard/launch/warm.py): which commands are a Python program a warm
interpreter can run, and the order it is handed at a restart."""

from __future__ import annotations

import json

from trainguard.launch.warm import Entry, entry_of, order


def test_a_python_program_is_recognised_and_anything_else_starts_cold() -> None:
    assert entry_of(["python3", "-u", "-X", "dev", "train.py", "--lr", "1"]) == Entry(
        ("python3", "-u", "-X", "dev"), "train.py", None, ("--lr", "1")
    )
    assert entry_of(["/usr/bin/python", "-m", "pkg.train", "-x"]) == Entry(
        ("/usr/bin/python",), None, "pkg.train", ("-x",)
    )
    for cold in (["torchrun", "train.py"], ["python", "-c", "print(1)"], ["python"], ["bash", "-c", "x"], []):
        assert entry_of(cold) is None, cold


def test_the_order_carries_the_generations_environment_and_the_trainers_argv() -> None:
    script = entry_of(["python", "train.py", "--lr", "1"])
    module = entry_of(["python", "-m", "pkg.train", "--lr", "1"])
    assert script is not None and module is not None
    assert json.loads(order(script, {"A": "1"})) == {
        "env": {"A": "1"},
        "argv": ["train.py", "--lr", "1"],
        "module": None,
    }
    assert json.loads(order(module, {}))["argv"] == ["pkg.train", "--lr", "1"]
