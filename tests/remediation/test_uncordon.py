"""`trainguard uncordon`'s decision: only trainguard's cordon is undone, with who and when recorded;
a person's cordon is refused with why."""

from __future__ import annotations

import re
from typing import Any

import pytest

from trainguard.catalog.kubernetes import (
    CORDON_REASON,
    CORDONED_AT,
    CORDONED_BY,
    FAULT_HISTORY,
    FAULTY_TAINT,
    LEMON_LABEL,
    LEMON_REASON,
)
from trainguard.remediation.lemon import Fault, encode
from trainguard.remediation.uncordon import (
    UNCORDON_REASON,
    UNCORDONED_AT,
    UNCORDONED_BY,
    Refused,
    decide,
    event,
)

NOW = 1_700_000_000.0
OURS = {CORDONED_AT: "1699990000", CORDONED_BY: "rec-ml-llama-1", CORDON_REASON: "GPUCriticalXid"}
FAULTY = {"key": FAULTY_TAINT, "value": "GPUCriticalXid", "effect": "NoSchedule"}
OTHER = {"key": "example.com/maintenance", "value": "planned", "effect": "PreferNoSchedule"}


def node(
    annotations: dict[str, str] | None = None,
    unschedulable: bool = False,
    taints: list[Any] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"unschedulable": True} if unschedulable else {}
    if taints:
        spec["taints"] = taints
    return {
        "metadata": {
            "name": "gpu-a",
            "uid": "u-1",
            "resourceVersion": "42",
            "annotations": annotations or {},
            "labels": labels or {},
        },
        "spec": spec,
    }


def test_a_node_trainguard_cordoned_is_uncordoned_untainted_and_signed() -> None:
    d = decide(node(OURS, True, [OTHER, FAULTY]), "alice@laptop", NOW, "PSU replaced")
    assert d.patch == {
        "metadata": {
            "resourceVersion": "42",
            "annotations": {
                CORDONED_AT: None,
                CORDONED_BY: None,
                CORDON_REASON: None,
                UNCORDONED_BY: "alice@laptop",
                UNCORDONED_AT: "1700000000",
                UNCORDON_REASON: "PSU replaced",
                # a cordon made before the history: its fault is kept when the cordon's annotations go
                FAULT_HISTORY: encode([Fault(1699990000, "GPUCriticalXid", "rec-ml-llama-1")]),
            },
        },
        "spec": {"unschedulable": None, "taints": [OTHER]},
    }
    assert "alice@laptop" in d.message and "rec-ml-llama-1" in d.message and "GPUCriticalXid" in d.message
    assert "2023-11-14T19:26:40Z" in d.message, "when trainguard cordoned it, readable"


def test_the_last_taint_removed_drops_the_list_and_other_taints_are_untouched() -> None:
    d = decide(node(OURS, True, [FAULTY]), "bob", NOW)
    assert d.patch is not None
    assert d.patch["spec"] == {"unschedulable": None, "taints": None}
    assert d.patch["metadata"]["annotations"][UNCORDON_REASON] is None
    untainted = decide(node(OURS, True, [OTHER]), "bob", NOW)
    assert untainted.patch is not None and "taints" not in untainted.patch["spec"], "not rewritten"


def test_a_node_someone_else_cordoned_is_refused_with_why() -> None:
    with pytest.raises(Refused, match=r"cordoned by someone other than trainguard.*kubectl uncordon gpu-a"):
        decide(node({}, True), "alice", NOW)
    with pytest.raises(Refused, match=re.escape(f"kubectl taint nodes gpu-a {FAULTY_TAINT}-")):
        decide(node({}, True, [FAULTY]), "alice", NOW)  # the operator tainted a node a person cordoned
    with pytest.raises(Refused, match=r"carries the trainguard\.io/faulty taint"):
        decide(node({}, False, [FAULTY]), "alice", NOW)
    with pytest.raises(Refused, match="not cordoned by trainguard"):
        decide(node({"other": "x"}), "alice", NOW)


def test_a_person_cordoning_after_an_uncordon_is_still_refused() -> None:
    # the uncordon dropped trainguard's cordon annotations: its signature alone is no licence
    returned = {UNCORDONED_BY: "alice", UNCORDONED_AT: "1700000000"}
    with pytest.raises(Refused, match="someone other than trainguard"):
        decide(node(returned, True), "bob", NOW)


def test_uncordoning_twice_changes_nothing_and_says_who_returned_it() -> None:
    d = decide(node({UNCORDONED_BY: "alice@laptop", UNCORDONED_AT: "1700000000"}), "bob", NOW + 60)
    assert d.patch is None
    assert "already back in service" in d.message and "alice@laptop" in d.message
    assert "2023-11-14T22:13:20Z" in d.message


def test_a_cordon_a_person_already_lifted_still_drops_the_taint_and_annotations() -> None:
    d = decide(node(OURS, False, [FAULTY]), "bob", NOW)
    assert d.patch is not None and d.patch["spec"]["taints"] is None
    assert "was already schedulable" in d.message


def test_the_event_is_about_the_node_and_names_who() -> None:
    e = event(node(OURS, True), "returned", "alice@laptop", NOW)
    assert e["metadata"]["namespace"] == "default" and e["metadata"]["name"].startswith("gpu-a.")
    assert e["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-a", "uid": "u-1"}
    assert (e["reason"], e["type"], e["message"]) == ("Uncordoned", "Normal", "returned")
    assert e["reportingInstance"] == "alice@laptop"
    assert e["firstTimestamp"] == e["lastTimestamp"] == "2023-11-14T22:13:20Z"


HISTORY = [Fault(1699000000, "GPULost", "rec-a"), Fault(1699500000, "GPUCriticalXid", "rec-b"),
           Fault(1699990000, "GPUCriticalXid", "rec-ml-llama-1")]  # fmt: skip
LEMON = {**OURS, FAULT_HISTORY: encode(HISTORY), LEMON_REASON: "3 fault(s) in the last 30d"}


def test_a_lemon_is_refused_naming_its_faults_and_the_way_to_force_it() -> None:
    with pytest.raises(Refused) as refused:
        decide(node(LEMON, True, [FAULTY], labels={LEMON_LABEL: "true"}), "alice", NOW)
    text = str(refused.value)
    assert "gpu-a is a lemon (3 fault(s) in the last 30d)" in text
    assert "rec-a" in text and "rec-b" in text and "2023-11-03T08:26:40Z GPULost" in text
    assert "trainguard nodes --lemons" in text and "trainguard uncordon gpu-a --force" in text
    # the same node, history and all, without the leader's label: returned as any other
    assert decide(node(LEMON, True, [FAULTY]), "alice", NOW).patch is not None


def test_a_forced_lemon_is_returned_says_so_and_keeps_its_history() -> None:
    d = decide(node(LEMON, True, [FAULTY], labels={LEMON_LABEL: "true"}), "alice", NOW, force=True)
    assert d.patch is not None and d.patch["spec"]["unschedulable"] is None
    assert FAULT_HISTORY not in d.patch["metadata"]["annotations"], "the history already holds this cordon"
    assert "labels" not in d.patch["metadata"], "the label is the leader's: it stays"
    assert "forced: it is a lemon (3 fault(s) in the last 30d)" in d.message
