"""A monitor the resync found in place is not rendered again while its inputs stay the same
(controller/in_place.py), and is rendered, and repaired, as soon as one of them moves.

The cluster is tests/controller/test_resync.py's: FakeKube's caches and its API calls counted. Renders
are counted by wrapping the Rehearsal the resync builds."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.clock import Clock
from tests.conftest import POLICY
from tests.controller.test_resync import RECEIVER, Counted, cluster, created
from tests.kube.fakes import FakeKube
from trainguard.controller import handlers
from trainguard.controller.handlers import LOCKS, reconcile, resync
from trainguard.controller.in_place import MAX_AGE_S, InPlace, inputs_of, selects_nodes, settings_key
from trainguard.controller.periodic import Periodic
from trainguard.controller.reconcile import Rehearsal
from trainguard.kube.client import HASH_ANNOTATION


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per Rehearsal the resync builds: a render of the monitor."""
    made: list[int] = []

    class Counting(Rehearsal):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(handlers, "Rehearsal", Counting)
    return made


def passes(kube: FakeKube, api: Counted, memo: InPlace, clock: Clock, n: int = 1) -> None:
    """`n` resync passes of the leader's periodic loop, as controller/run.py wires it."""
    p = Periodic(api, kube, leader=lambda: True, lock=LOCKS, resync_s=60, pods_s=3600, clock=clock,  # type: ignore[arg-type]
                 reconcile=lambda ns, name: reconcile(api, kube, ns, name, receiver=RECEIVER),  # type: ignore[arg-type]
                 resync=lambda body: resync(api, kube, body, receiver=RECEIVER, in_place=memo))  # type: ignore[arg-type]  # fmt: skip
    for _ in range(n):
        clock.now += 60
        p.tick()


def steady() -> tuple[FakeKube, Counted, InPlace, Clock]:
    """A monitor created, then found in place by one pass (which rendered it)."""
    kube, api = cluster()
    created(kube, api)
    clock = Clock(1000.0)
    memo = InPlace(clock=clock)
    passes(kube, api, memo, clock)
    assert api.requests == []
    return kube, api, memo, clock


def test_a_monitor_found_in_place_is_not_rendered_again(renders: list[int]) -> None:
    kube, api, memo, clock = steady()
    assert renders == [1]
    passes(kube, api, memo, clock, n=5)
    assert renders == [1], "five passes, no render"
    assert api.requests == []


def test_the_memory_keeps_each_compared_object_by_name_and_hash_not_its_content() -> None:
    _, _, memo, _ = steady()
    [key] = memo._found
    kept = memo.compared(key)
    assert {o["kind"] for o in kept} >= {"PrometheusRule", "AlertmanagerConfig", "PodMonitor"}
    for obj in kept:
        assert set(obj) == {"apiVersion", "kind", "metadata"}, obj
        assert set(obj["metadata"]) == {"name", "namespace", "annotations"}, obj
        assert obj["metadata"]["annotations"][HASH_ANNOTATION]


def test_a_hand_edit_is_rendered_and_repaired_by_the_next_pass(renders: list[int]) -> None:
    kube, api, memo, clock = steady()
    rule = next(o for k, o in kube.objects.items() if k[0] == "PrometheusRule")
    edited = copy.deepcopy(rule)
    edited["spec"]["groups"] = edited["spec"]["groups"][:1]
    kube.put(edited)
    kube.applies.clear()
    passes(kube, api, memo, clock)
    assert len(renders) == 2 and kube.applies == ["PrometheusRule"]
    assert kube.objects[("PrometheusRule", "ml", rule["metadata"]["name"])] == rule


def test_a_deleted_object_is_put_back_by_the_next_pass(renders: list[int]) -> None:
    kube, api, memo, clock = steady()
    key = next(k for k in kube.objects if k[0] == "PodMonitor")
    del kube.objects[key]
    passes(kube, api, memo, clock)
    assert key in kube.objects and len(renders) == 2


def test_a_policy_or_a_monitor_that_moved_is_rendered_again(renders: list[int]) -> None:
    kube, api, memo, clock = steady()
    changed = copy.deepcopy(POLICY)
    changed["spec"]["receivers"][1]["url"] = "http://127.0.0.1:9102/im"
    kube.put(changed)
    kube.applies.clear()
    passes(kube, api, memo, clock)
    assert len(renders) == 2 and kube.applies, "the new policy's objects are applied"
    passes(kube, api, memo, clock)  # the reconcile wrote the status: the monitor moved, rendered once more
    passes(kube, api, memo, clock, n=3)
    assert len(renders) == 3


def test_a_secret_due_to_be_written_again_is_rendered_and_written(renders: list[int]) -> None:
    kube, api, memo, clock = steady()
    kube.written.clear()  # as after an hour: this process no longer vouches for what it wrote
    passes(kube, api, memo, clock)
    assert api.requests == ["apply Secret"] and len(renders) == 2
    passes(kube, api, memo, clock, n=2)
    assert len(renders) == 2


def test_every_monitor_is_rendered_again_after_the_longest_age(renders: list[int]) -> None:
    kube, api, memo, clock = steady()
    clock.now += MAX_AGE_S
    passes(kube, api, memo, clock)
    assert len(renders) == 2 and api.requests == []


def test_a_policy_that_selects_window_nodes_by_label_is_always_rendered(renders: list[int]) -> None:
    """Its objects depend on the nodes' labels, which the inputs do not hold."""
    kube, api = cluster()
    windowed = copy.deepcopy(POLICY)
    windowed["spec"]["maintenanceWindows"] = [
        {"name": "rack-7", "start": "2026-12-24T00:00:00Z", "end": "2026-12-24T06:00:00Z",
         "nodeSelector": {"matchLabels": {"rack": "7"}}}
    ]  # fmt: skip
    kube.put(windowed)
    created(kube, api)
    clock = Clock(1000.0)
    memo = InPlace(clock=clock)
    passes(kube, api, memo, clock, n=3)
    assert len(renders) == 3 and api.requests == []
    assert selects_nodes(windowed) and not selects_nodes(POLICY)


def test_the_inputs_are_the_caches_word_and_nothing_without_a_version() -> None:
    kube, api = cluster()
    created(kube, api)
    body = kube.monitors()[0]
    compared = [o for k, o in kube.objects.items() if k[0] in ("PrometheusRule", "Secret")]
    one = inputs_of(body, kube, kube, compared, settings_key(RECEIVER))
    assert one is not None and one == inputs_of(body, kube, kube, compared, settings_key(RECEIVER))
    assert one != inputs_of(body, kube, kube, compared, settings_key(RECEIVER, "mapped"))
    unversioned = copy.deepcopy(body)
    del unversioned["metadata"]["resourceVersion"]
    assert inputs_of(unversioned, kube, kube, compared, "") is None
    memo = InPlace(clock=Clock(0.0))
    memo.found(("ml", "x"), one, compared)
    assert memo.still(("ml", "x"), one) and not memo.still(("ml", "x"), None)
    memo.found(("ml", "x"), None, compared)
    assert not memo.still(("ml", "x"), one), "a monitor that could not be told is forgotten"
