"""The kopf settings the operator starts with (controller/run.py configure_kopf)."""

from __future__ import annotations

import logging

import kopf

from trainguard.controller.run import KOPF_CONSISTENCY_S, configure_kopf


def test_kopf_waits_for_its_own_patch_long_enough_not_to_handle_a_creation_twice() -> None:
    """kopf's default 5 s was exceeded under the 2,000-monitor burst: it handled 3,445 creations for
    2,006 monitors, a reconcile each (bench/scale.py)."""
    settings = kopf.OperatorSettings()
    assert settings.persistence.consistency_timeout < KOPF_CONSISTENCY_S
    configure_kopf(settings)
    assert settings.persistence.consistency_timeout == KOPF_CONSISTENCY_S >= 60


def test_kopf_keeps_its_state_under_trainguards_prefix_and_posts_only_warnings() -> None:
    settings = kopf.OperatorSettings()
    configure_kopf(settings)
    assert isinstance(settings.persistence.diffbase_storage, kopf.AnnotationsDiffBaseStorage)
    assert settings.persistence.diffbase_storage.prefix == "trainguard.io"
    assert settings.persistence.finalizer == "trainguard.io/finalizer"
    assert settings.posting.level == logging.WARNING
