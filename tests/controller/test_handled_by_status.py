"""kopf takes a change as handled from the status the handler wrote (controller/diffbase.py)."""

from __future__ import annotations

from typing import Any

import kopf

from trainguard.controller.diffbase import ObservedGenerationDiffBase, ProgressAnnotations
from trainguard.controller.handlers import CHANGE_HANDLERS
from trainguard.controller.run import configure_kopf

PROGRESS = kopf.AnnotationsProgressStorage(prefix="trainguard.io")


def monitor(generation: int | None = 2, observed: int | None = 2, **annotations: str) -> kopf.Body:
    raw: dict[str, Any] = {
        "apiVersion": "trainguard.io/v1alpha1",
        "kind": "TrainingJobMonitor",
        "metadata": {"name": "llama", "namespace": "ml", "uid": "u1", "annotations": annotations},
        "spec": {"selector": {"matchLabels": {"app": "llama"}}},
    }
    if generation is not None:
        raw["metadata"]["generation"] = generation
    if observed is not None:
        raw["status"] = {"observedGeneration": observed}
    return kopf.Body(raw)


def storage() -> ObservedGenerationDiffBase:
    return ObservedGenerationDiffBase(PROGRESS, CHANGE_HANDLERS)


def test_a_status_that_observed_the_generation_is_handled_with_nothing_changed() -> None:
    body = monitor(2, 2)
    assert storage().fetch(body=body) == storage().build(body=body)


def test_a_new_generation_or_no_status_is_a_change_to_handle() -> None:
    assert storage().fetch(body=monitor(3, 2)) is None
    assert storage().fetch(body=monitor(1, None)) is None
    assert storage().fetch(body=monitor(None, None)) is None


def test_a_handler_kopf_will_call_again_keeps_the_change_unhandled() -> None:
    """A handler that wrote its status and then raised (a transient API error) has a retry recorded by
    kopf's progress storage: kopf must see the change as unhandled to run it again."""
    body = monitor(2, 2)
    patch = kopf.Patch()
    PROGRESS.store(
        key=kopf.HandlerId("monitor"),
        record={"retries": 1, "delayed": "2026-12-04T23:00:00"},
        body=body,
        patch=patch,
    )
    with_retry = monitor(2, 2, **patch["metadata"]["annotations"])
    assert PROGRESS.fetch(key=kopf.HandlerId("monitor"), body=with_retry) is not None
    assert storage().fetch(body=with_retry) is None


def test_other_annotations_and_kopfs_old_record_do_not_hold_it_unhandled() -> None:
    body = monitor(2, 2, **{"trainguard.io/last-handled-configuration": "{}", "team": "ml"})
    assert storage().fetch(body=body) is not None


def test_storing_writes_nothing() -> None:
    patch = kopf.Patch()
    body = monitor(2, 2)
    storage().store(body=body, patch=patch, essence=storage().build(body=body))
    assert not patch


def test_the_operator_uses_it_with_its_progress_storage() -> None:
    settings = kopf.OperatorSettings()
    configure_kopf(settings)
    base = settings.persistence.diffbase_storage
    assert isinstance(base, ObservedGenerationDiffBase)
    assert isinstance(settings.persistence.progress_storage, ProgressAnnotations)
    assert base.progress is settings.persistence.progress_storage
    assert set(base.handlers) == {"monitor", "policy"}


def test_a_success_recorded_and_purged_in_one_patch_leaves_no_patch() -> None:
    """kopf stores each handler's outcome and purges it when all are done: with its stock storage that
    patch still carried its kopf-managed marker, one write per new monitor."""
    body = monitor(1, 1)
    stock, ours = kopf.Patch(), kopf.Patch()
    for storage_, patch in (
        (kopf.AnnotationsProgressStorage(prefix="trainguard.io"), stock),
        (ProgressAnnotations(prefix="trainguard.io"), ours),
    ):
        storage_.store(
            key=kopf.HandlerId("monitor"), record={"started": "t", "success": True}, body=body, patch=patch
        )
        storage_.purge(key=kopf.HandlerId("monitor"), body=body, patch=patch)
    assert stock, "kopf's own storage leaves its marker"
    assert not ours


def test_a_retry_keeps_its_record_and_kopfs_marker() -> None:
    body, patch = monitor(1, 1), kopf.Patch()
    progress = ProgressAnnotations(prefix="trainguard.io")
    progress.store(key=kopf.HandlerId("monitor"), record={"retries": 1}, body=body, patch=patch)
    progress.purge(key=kopf.HandlerId("policy"), body=body, patch=patch)
    assert set(patch["metadata"]["annotations"]) == {"trainguard.io/monitor", "trainguard.io/kopf-managed"}
