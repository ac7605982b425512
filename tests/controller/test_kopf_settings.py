"""The kopf settings the operator starts with (controller/run.py configure_kopf)."""

from __future__ import annotations

import logging

import kopf

from trainguard.controller.run import configure_kopf


def test_kopf_keeps_its_state_under_trainguards_prefix_and_posts_only_warnings() -> None:
    settings = kopf.OperatorSettings()
    configure_kopf(settings)
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert settings.persistence.progress_storage.prefix == "trainguard.io"
    assert settings.persistence.finalizer == "trainguard.io/finalizer"
    assert settings.posting.level == logging.WARNING


def test_the_handlers_threads_are_kopfs_default_unless_given() -> None:
    default = kopf.OperatorSettings()
    configure_kopf(default)
    assert default.execution.max_workers is None, "Python's own default pool"
    given = kopf.OperatorSettings()
    configure_kopf(given, 16)
    assert given.execution.max_workers == 16
    assert given.execution.executor._max_workers == 16  # type: ignore[attr-defined]
