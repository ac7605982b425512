"""Lemon nodes: the fault history on the node (bounded, once per record, written with the cordon), the
score against the platform's threshold at the window's edges, the leader's label, reason and spare
taint, and the spares that leave a lemon out."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.kube.fakes import merge_patch
from trainguard.catalog.kubernetes import (
    CORDON_REASON,
    CORDONED_AT,
    CORDONED_BY,
    FAULT_HISTORY,
    LEMON_LABEL,
    LEMON_REASON,
    SPARE_LABEL,
)
from trainguard.kube import ApiError
from trainguard.remediation.cluster import Cluster, spares
from trainguard.remediation.lemon import (
    DAY_S,
    HISTORY_MAX,
    Fault,
    LemonPolicy,
    cordon_fields,
    encode,
    fleet,
    history_of,
    node_patch,
    parse_history,
    scores,
    verdict,
    with_fault,
)
from trainguard.remediation.lemon_labels import LemonLabels

NOW = 1_700_000_000.0
POLICY = LemonPolicy(faults=3, window_s=30 * DAY_S)


def faults(*ages_days: float) -> list[Fault]:
    return [Fault(NOW - age * DAY_S, "GPUCriticalXid", f"rec-{i}") for i, age in enumerate(ages_days)]


def node(
    name: str = "gpu-a",
    *,
    history: list[Fault] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    unschedulable: bool = False,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    notes = dict(annotations or {})
    if history is not None:
        notes[FAULT_HISTORY] = encode(history)
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "7",
            "labels": dict(labels or {}),
            "annotations": notes,
        },
        "spec": spec,
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


# ---- the score ----


def test_three_faults_within_the_window_make_a_lemon_and_two_do_not() -> None:
    assert verdict(faults(1, 10, 29), NOW, POLICY).lemon
    assert verdict(faults(1, 10, 29), NOW, POLICY).faults == 3
    assert not verdict(faults(1, 10), NOW, POLICY).lemon
    assert verdict(faults(1, 10), NOW, POLICY).reason == ""
    found = verdict(faults(1, 2, 3, 4), NOW, POLICY)
    assert found.lemon and found.faults == 4
    assert found.reason == "4 fault(s) in the last 30d, the platform's threshold is 3 fault(s) in 30d"


def test_a_fault_exactly_a_window_old_has_aged_out() -> None:
    edge = [*faults(1, 2), Fault(NOW - 30 * DAY_S, "GPULost", "rec-old")]
    assert verdict(edge, NOW, POLICY).faults == 2 and not verdict(edge, NOW, POLICY).lemon
    inside = [*faults(1, 2), Fault(NOW - 30 * DAY_S + 1, "GPULost", "rec-old")]
    assert verdict(inside, NOW, POLICY).lemon
    future = [*faults(1, 2), Fault(NOW + 60, "GPULost", "rec-skew")]  # another writer's clock ahead
    assert verdict(future, NOW, POLICY).lemon


def test_the_threshold_is_the_platforms_and_zero_turns_it_off() -> None:
    assert verdict(faults(1), NOW, LemonPolicy(faults=1)).lemon
    assert not verdict(faults(1, 2, 3, 4, 5), NOW, LemonPolicy(faults=0)).lemon
    assert verdict(faults(1, 2, 40), NOW, LemonPolicy(faults=3, window_s=60 * DAY_S)).lemon
    with pytest.raises(ValueError, match="--lemon-faults 21"):
        LemonPolicy(faults=HISTORY_MAX + 1)
    with pytest.raises(ValueError, match="--lemon-window"):
        LemonPolicy(window_s=0)


# ---- the history ----


def test_a_fault_is_recorded_once_per_record_and_the_history_stays_bounded() -> None:
    history = faults(3, 2)
    again = Fault(NOW, "GPUCriticalXid", "rec-1")  # the same record's step redone after a restart
    assert with_fault(history, again) is None
    added = with_fault(history, Fault(NOW, "GPULost", "rec-9"))
    assert added is not None and [f.record for f in added] == ["rec-0", "rec-1", "rec-9"]
    long = [Fault(NOW - i, "x", f"r{i}") for i in range(HISTORY_MAX)]
    bounded = with_fault(long, Fault(NOW + 1, "y", "newest"))
    assert bounded is not None and len(bounded) == HISTORY_MAX
    assert bounded[-1].record == "newest" and "r19" not in {f.record for f in bounded}, "the oldest dropped"


def test_a_hand_edited_history_keeps_what_it_can() -> None:
    text = json.dumps(
        [{"ts": NOW, "cause": "GPULost", "record": "r1"}, {"cause": "no time"}, "junk", {"ts": "x"}]
    )
    assert parse_history(text) == [Fault(NOW, "GPULost", "r1")]
    assert parse_history("not json") == [] and parse_history(None) == []


def test_a_cordon_made_before_the_history_counts_once() -> None:
    legacy = {CORDONED_AT: str(int(NOW)), CORDONED_BY: "rec-7", CORDON_REASON: "GPULost"}
    assert history_of(node(annotations=legacy)) == [Fault(NOW, "GPULost", "rec-7")]
    both = node(history=[Fault(NOW, "GPULost", "rec-7")], annotations=legacy)
    assert history_of(both) == [Fault(NOW, "GPULost", "rec-7")]


def test_the_cordon_that_reaches_the_threshold_labels_the_node_at_once() -> None:
    two = node(history=faults(5, 3))
    fields = cordon_fields(two, Fault(NOW, "GPULost", "rec-new"), NOW, POLICY)
    assert [f["record"] for f in json.loads(fields["annotations"][FAULT_HISTORY])] == [
        "rec-0",
        "rec-1",
        "rec-new",
    ]
    assert fields["labels"] == {LEMON_LABEL: "true"} and "3 fault(s)" in fields["annotations"][LEMON_REASON]
    assert cordon_fields(two, Fault(NOW, "GPULost", "rec-1"), NOW, POLICY) == {}, "its record is there"
    one = cordon_fields(node(), Fault(NOW, "GPULost", "rec-new"), NOW, POLICY)
    assert "labels" not in one and LEMON_REASON not in one["annotations"]


# ---- the cordon writes it ----


class NodeStore:
    """kube.Kube's node calls over one node: merge patches, 409 on a stale resourceVersion."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.patches: list[dict[str, Any]] = []

    def read_node(self, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.body)

    def patch_node(self, name: str, patch: dict[str, Any]) -> None:
        self.patches.append(patch)
        version = (patch.get("metadata") or {}).get("resourceVersion")
        if version is not None and version != self.body["metadata"]["resourceVersion"]:
            raise ApiError(status=409, reason="Conflict")
        self.body = merge_patch(self.body, patch)
        self.body["metadata"]["resourceVersion"] = str(int(self.body["metadata"]["resourceVersion"]) + 1)

    def nodes(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(self.body)]


def test_the_cordon_records_the_fault_in_its_own_write_and_a_redo_adds_nothing() -> None:
    store = NodeStore(node(history=faults(9, 4)))
    edge = Cluster(store, reads=None, clock=lambda: NOW, lemons=POLICY)  # type: ignore[arg-type]
    assert edge.cordon("gpu-a", "GPUCriticalXid: Xid 79", "rec-3").startswith("cordoned (a lemon now")
    assert len(store.patches) == 1, "history, label and cordon in one write"
    meta = store.body["metadata"]
    assert store.body["spec"]["unschedulable"] is True and meta["labels"][LEMON_LABEL] == "true"
    assert [f.record for f in parse_history(meta["annotations"][FAULT_HISTORY])] == [
        "rec-0",
        "rec-1",
        "rec-3",
    ]
    assert edge.cordon("gpu-a", "GPUCriticalXid: Xid 79", "rec-3").startswith("already cordoned by rec-3")
    assert (
        len(store.patches) == 1
        and len(parse_history(store.body["metadata"]["annotations"][FAULT_HISTORY])) == 3
    )


def test_a_fault_on_a_node_a_person_cordoned_is_recorded_and_the_cordon_left_theirs() -> None:
    store = NodeStore(node(unschedulable=True))
    edge = Cluster(store, reads=None, clock=lambda: NOW, lemons=POLICY)  # type: ignore[arg-type]
    assert edge.cordon("gpu-a", "GPULost", "rec-1") == "already cordoned, not by trainguard: left as is"
    annotations = store.body["metadata"]["annotations"]
    assert CORDONED_BY not in annotations and parse_history(annotations[FAULT_HISTORY])[0].record == "rec-1"
    edge.cordon("gpu-a", "GPULost", "rec-1")
    assert len(store.patches) == 1, "the redo writes nothing"


# ---- the leader keeps the label current ----


def test_the_leader_labels_a_lemon_taints_it_if_spare_and_unlabels_it_once_faults_age_out() -> None:
    spare = {SPARE_LABEL: "true"}
    other = {"key": SPARE_LABEL, "value": "true", "effect": "NoSchedule"}
    patch = node_patch(node(history=faults(1, 2, 3), labels=spare, taints=[other]), NOW, POLICY)
    assert patch is not None
    assert (
        patch["metadata"]["labels"] == {LEMON_LABEL: "true"} and patch["metadata"]["resourceVersion"] == "7"
    )
    assert patch["spec"]["taints"] == [other, {"key": LEMON_LABEL, "value": "true", "effect": "NoSchedule"}]
    labelled = merge_patch(node(history=faults(1, 2, 3), labels=spare, taints=[other]), patch)
    assert node_patch(labelled, NOW, POLICY) is None, "current: nothing to write"
    aged = node_patch(labelled, NOW + 29 * DAY_S, POLICY)  # two of its faults are older than 30 days now
    assert aged is not None and aged["metadata"]["labels"] == {LEMON_LABEL: None}
    assert aged["metadata"]["annotations"] == {LEMON_REASON: None} and aged["spec"]["taints"] == [other]
    not_spare = node_patch(node(history=faults(1, 2, 3)), NOW, POLICY)
    assert not_spare is not None and "spec" not in not_spare, "a lemon in service is labelled, not tainted"
    assert node_patch(node(), NOW, POLICY) is None


def test_the_pass_patches_only_what_changed_and_leaves_a_conflict_to_the_next_pass() -> None:
    store = NodeStore(node(history=faults(1, 2, 3)))
    leading = [True]
    labels = LemonLabels(store, store, POLICY, leader=lambda: leading[0], clock=lambda: NOW)
    assert labels.run() == 1 and store.body["metadata"]["labels"][LEMON_LABEL] == "true"
    assert labels.run() == 0
    leading[0] = False
    store.body["metadata"]["labels"] = {}
    assert labels.run() == 0, "a standby writes nothing"
    leading[0] = True
    stale = NodeStore(node(history=faults(1, 2, 3)))
    stale.body["metadata"]["resourceVersion"] = "8"  # the cache is behind the API
    behind = LemonLabels(
        type("Cache", (), {"nodes": lambda self: [node(history=faults(1, 2, 3))]})(),
        stale,
        POLICY,
        leader=lambda: True,
        clock=lambda: NOW,
    )
    assert behind.run() == 0 and LEMON_LABEL not in stale.body["metadata"]["labels"]


# ---- spares and the listing ----


def test_a_lemon_is_never_a_spare() -> None:
    spare = {SPARE_LABEL: "true"}
    healthy = node("gpu-s1", labels=spare)
    lemon = node("gpu-s2", history=faults(1, 2, 3), labels={**spare, LEMON_LABEL: "true"})
    assert spares([healthy, lemon]) == ["gpu-s1"]


def test_the_listing_and_the_scores_read_the_nodes() -> None:
    lemon = node("gpu-b", history=faults(1, 2, 3), labels={LEMON_LABEL: "true"},
                 annotations={LEMON_REASON: "3 fault(s)"}, unschedulable=True)  # fmt: skip
    once = node("gpu-a", history=faults(40))
    rows = fleet([node("gpu-c"), once, lemon])
    assert [(r.node, r.lemon, r.cordoned, len(r.faults)) for r in rows] == [
        ("gpu-a", False, False, 1),
        ("gpu-b", True, True, 3),
    ]
    assert rows[1].reason == "3 fault(s)"
    assert [(n, v.faults, v.lemon) for n, v in scores([node("gpu-c"), once, lemon], NOW, POLICY)] == [
        ("gpu-a", 0, False),
        ("gpu-b", 3, True),
    ]
