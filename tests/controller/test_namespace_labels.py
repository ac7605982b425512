"""The trainguard.io/monitored label on the namespaces that hold a monitor (the webhook's
namespaceSelector): what one pass adds and removes, and the edge that writes it, on an in-memory API."""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from tests.clock import Clock
from tests.conftest import MONITOR, POLICY, monitor_body
from tests.kube.fakes import FakeKube, refused
from trainguard.catalog.kubernetes import MONITORED
from trainguard.controller.namespace_labels import SEEN_WAIT_S, NamespaceLabels, label_changes, needs_label
from trainguard.controller.reconcile import reconcile_monitor
from trainguard.kube import NotSynced

EXCLUDED = frozenset({"trainguard-system", "kube-system", "kube-node-lease"})


def test_a_namespace_with_a_monitor_is_labelled_and_one_without_is_not() -> None:
    changes = label_changes({"ml", "vision"}, {"vision", "old"}, set(), EXCLUDED)
    assert changes.add == {"ml"}
    assert changes.remove == set(), "found without a monitor once: kept until the next pass"
    assert changes.unmonitored == {"old"}


def test_the_label_goes_when_the_namespace_is_found_without_a_monitor_twice() -> None:
    first = label_changes({"ml"}, {"ml", "old"}, set(), EXCLUDED)
    second = label_changes({"ml"}, {"ml", "old"}, first.unmonitored, EXCLUDED)
    assert second.remove == {"old"} and second.add == set()


def test_a_monitor_created_between_two_passes_keeps_the_label() -> None:
    """The first pass read a monitor cache a moment behind the monitor's reconcile, which had labelled
    the namespace: the second pass finds the monitor, and the label stays."""
    first = label_changes(set(), {"ml"}, set(), EXCLUDED)
    second = label_changes({"ml"}, {"ml"}, first.unmonitored, EXCLUDED)
    assert first.remove == second.remove == set() and second.unmonitored == set()


def test_the_excluded_namespaces_are_never_labelled_and_lose_a_label_found_there() -> None:
    first = label_changes({"kube-system", "trainguard-system"}, {"kube-system"}, set(), EXCLUDED)
    assert first.add == set()
    assert label_changes({"kube-system"}, {"kube-system"}, first.unmonitored, EXCLUDED).remove == {
        "kube-system"
    }
    assert not needs_label("trainguard-system", set(), EXCLUDED)
    assert needs_label("ml", {"vision"}, EXCLUDED) and not needs_label("ml", {"ml"}, EXCLUDED)


class Namespaces:
    """The edge's API and caches: the monitors and labels of a few namespaces."""

    def __init__(self, monitors: list[str], labelled: set[str], refuse: ApiException | None = None) -> None:
        self.monitor_namespaces = monitors
        self.labelled = set(labelled)
        self.refuse = refuse
        self.patches: list[tuple[str, dict[str, str | None]]] = []
        self.synced = True

    def monitors(self) -> list[dict[str, Any]]:
        return [
            {"metadata": {"namespace": ns, "name": f"m{i}"}} for i, ns in enumerate(self.monitor_namespaces)
        ]

    def labelled_namespaces(self, timeout: float | None = None) -> set[str]:
        if not self.synced:
            raise NotSynced("not listed")
        return set(self.labelled)

    def label_namespace(self, name: str, labels: dict[str, str | None]) -> bool:
        self.patches.append((name, labels))
        if self.refuse is not None:
            raise self.refuse
        if labels[MONITORED]:
            self.labelled.add(name)
        else:
            self.labelled.discard(name)
        return True


def test_the_sweep_labels_and_unlabels_through_merge_patches_of_the_one_label() -> None:
    api = Namespaces(["ml", "ml", "vision"], {"vision", "old"})
    edge = NamespaceLabels(api, api, EXCLUDED)
    edge.sweep()
    assert api.patches == [("ml", {MONITORED: "true"})]
    edge.sweep()
    assert api.patches[1:] == [("old", {MONITORED: None})]
    edge.sweep()
    assert len(api.patches) == 2, "nothing left to change: no write"


def test_a_sweep_before_the_caches_listed_changes_nothing() -> None:
    api = Namespaces(["ml"], set())
    api.synced = False
    NamespaceLabels(api, api, EXCLUDED).sweep()
    assert api.patches == []


def test_ensure_writes_only_when_the_label_is_missing_and_says_why_it_could_not() -> None:
    api = Namespaces([], {"vision"})
    edge = NamespaceLabels(api, api, EXCLUDED)
    assert edge.ensure("vision") == "" and api.patches == []
    assert edge.ensure("ml") == "" and api.patches == [("ml", {MONITORED: "true"})]
    api.synced = False  # a starting replica: labelled anyway (the patch is idempotent)
    assert edge.ensure("vision") == "" and api.patches[-1] == ("vision", {MONITORED: "true"})
    forbidden = Namespaces([], set(), refuse=refused(403, 'namespaces "ml" is forbidden'))
    problem = NamespaceLabels(forbidden, forbidden, EXCLUDED).ensure("ml")
    assert problem.startswith("namespace ml could not be labelled trainguard.io/monitored=true (403:")
    assert "start without the exporter" in problem and "patch on namespaces (deploy/rbac.yaml)" in problem


def test_ensure_waits_to_see_the_label_come_back_through_the_watch() -> None:
    """The apiserver matches the webhook's namespaceSelector against its own watch-fed copy of the
    namespace: the monitor is not reported Ready before the label is seen."""
    clock = Clock(1000.0)
    api = Namespaces([], set())
    seen_after = [3]

    class Lagging(Namespaces):
        def labelled_namespaces(self, timeout: float | None = None) -> set[str]:
            seen_after[0] -= 1
            return set(api.labelled) if seen_after[0] <= 0 else set()

    watch = Lagging([], set())
    edge = NamespaceLabels(api, watch, EXCLUDED, clock=clock, sleep=clock.sleep)
    assert edge.ensure("ml") == "" and seen_after[0] == 0, "read until the label was there"
    never = NamespaceLabels(api, Namespaces([], set()), EXCLUDED, clock=clock, sleep=clock.sleep)
    started = clock.now
    assert never.ensure("vision") == "", "a label not seen in time is logged, not a failure"
    assert clock.now - started >= SEEN_WAIT_S


def cond(kube: FakeKube, type_: str) -> dict[str, Any]:
    assert kube.status is not None
    return next(c for c in kube.status["conditions"] if c["type"] == type_)


def test_a_monitor_whose_namespace_cannot_be_labelled_is_degraded_while_ready() -> None:
    kube = FakeKube(POLICY)
    events: list[tuple[str, str]] = []
    labelled: list[str] = []

    def label(namespace: str) -> str:
        labelled.append(namespace)
        return f"namespace {namespace} could not be labelled"

    reconcile_monitor(kube, kube, monitor_body(), announce=lambda r, m: events.append((r, m)),  # type: ignore[arg-type]
                      label_namespace=label)  # fmt: skip
    assert labelled == [MONITOR["metadata"]["namespace"]]
    c = cond(kube, "Degraded")
    assert (c["status"], c["reason"], c["message"]) == (
        "True",
        "NamespaceLabelFailed",
        "namespace ml could not be labelled",
    )
    assert cond(kube, "Ready")["status"] == "True", "the rules and routes are in place"
    assert ("NamespaceLabelFailed", "namespace ml could not be labelled") in events
    body = monitor_body()
    body["status"] = kube.status
    events.clear()
    reconcile_monitor(kube, kube, body, announce=lambda r, m: events.append((r, m)), label_namespace=label)  # type: ignore[arg-type]
    assert [e for e in events if e[0] == "NamespaceLabelFailed"] == [], "announced once per distinct problem"
    reconcile_monitor(kube, kube, body, label_namespace=lambda ns: "")  # type: ignore[arg-type]
    assert (cond(kube, "Degraded")["status"], cond(kube, "Degraded")["reason"]) == ("False", "AsExpected")


def test_the_namespace_is_said_after_a_reconcile_error_and_before_the_workload() -> None:
    body = monitor_body(workloadRef={"kind": "Job", "name": "absent"})
    no_policy, with_policy = FakeKube(), FakeKube(POLICY)
    for kube in (no_policy, with_policy):
        reconcile_monitor(kube, kube, body, label_namespace=lambda ns: "no label")  # type: ignore[arg-type]
    assert cond(no_policy, "Degraded")["reason"] == "PolicyNotFound"
    assert cond(with_policy, "Degraded")["reason"] == "NamespaceLabelFailed", "the workload is unresolved too"
