"""An Event said twice (the reconcile and the pod-count pass both find pods without an exporter) is posted
once within the window; a failed post is tried again; other objects, reasons and messages are their own."""

from __future__ import annotations

from typing import Any

from tests.clock import Clock
from trainguard.controller import handlers
from trainguard.controller.events import RecentEvents


class Posts:
    def __init__(self, fail: int = 0) -> None:
        self.posted: list[tuple[str, str, str]] = []
        self.fail = fail

    def post_event(self, body: dict[str, Any], reason: str, message: str, type_: str = "Normal") -> None:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("apiserver unavailable")
        self.posted.append((body["metadata"]["uid"], reason, type_))


def body(uid: str) -> dict[str, Any]:
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "TrainingJobMonitor",
            "metadata": {"name": "m", "namespace": "ns", "uid": uid}}  # fmt: skip


def test_the_same_event_twice_is_posted_once_until_the_window_ends() -> None:
    clock, kube = Clock(), Posts()
    recent = RecentEvents(window_s=60, clock=clock)
    for _ in range(2):  # the reconcile, then the pass reading a cache that lags the status
        handlers.announcer(kube, body("u1"), recent)("PodsWithoutExporter", "2 pods: a, b")  # type: ignore[arg-type]
    assert kube.posted == [("u1", "PodsWithoutExporter", "Warning")]
    handlers.announcer(kube, body("u1"), recent)("PodsWithoutExporter", "3 pods: a, b, c")  # type: ignore[arg-type]
    handlers.announcer(kube, body("u2"), recent)("PodsWithoutExporter", "2 pods: a, b")  # type: ignore[arg-type]
    assert len(kube.posted) == 3, "another message, another object: posted"
    clock.sleep(61)
    handlers.announcer(kube, body("u1"), recent)("PodsWithoutExporter", "2 pods: a, b")  # type: ignore[arg-type]
    assert len(kube.posted) == 4, "said again after the window"


def test_a_failed_post_is_tried_again() -> None:
    kube = Posts(fail=1)
    recent = RecentEvents(clock=Clock())
    post = handlers.announcer(kube, body("u1"), recent)  # type: ignore[arg-type]
    post("Applied", "applied PodMonitor")
    post("Applied", "applied PodMonitor")
    assert kube.posted == [("u1", "Applied", "Normal")]


def test_an_object_without_a_uid_is_never_taken_for_another() -> None:
    recent = RecentEvents(clock=Clock())
    assert recent.first("", "Applied", "x") and recent.first("", "Applied", "x")


def test_cleared_nothing_is_remembered() -> None:
    recent = RecentEvents(clock=Clock())
    assert recent.first("u1", "Applied", "x") and not recent.first("u1", "Applied", "x")
    recent.clear()
    assert recent.first("u1", "Applied", "x")
