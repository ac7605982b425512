"""A started operator freezes what it holds at start out of the cycle collector's full passes, which
would otherwise pause the admission webhook for tens of milliseconds (bench/admission.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from trainguard.controller.run import freeze_startup_objects


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_a_full_collection_no_longer_walks_the_startup_objects(unfrozen: None) -> None:
    before = len(gc.get_objects())  # what a full collection walks
    freeze_startup_objects()
    assert gc.get_freeze_count() >= before * 0.9, "frozen: out of every collection's walk"
    assert len(gc.get_objects()) < before * 0.1
