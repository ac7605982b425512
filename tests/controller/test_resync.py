"""The periodic resync decides from the watch caches: a monitor whose objects and status are in place
costs no request, and one that differs gets the reconcile, which writes only the difference.

The API edge is tests/kube/fakes.py's in-memory FakeKube, serving the caches' reads as it is, and its
API calls through `Counted`, a fake that records each request a kube.Kube would make (reads by name,
lists, applies, creates, status patches, Events, namespace labels): these tests are about which requests
the resync makes, not about how the apiserver answers them. e2e/test_watch_caches.py counts the real
apiserver's requests from the operator during a steady pass.
"""

from __future__ import annotations

import copy
from typing import Any

from prometheus_client import CollectorRegistry

from tests.clock import Clock
from tests.conftest import MONITOR, POLICY, monitor_body
from tests.kube.fakes import FakeKube, pod
from trainguard.controller.handlers import LOCKS, MonitorSettings, reconcile, resync
from trainguard.controller.in_place import InPlace
from trainguard.controller.metrics import OperatorMetrics
from trainguard.controller.periodic import Periodic
from trainguard.controller.reconcile import ReceiverSettings
from trainguard.controller.run import OperatorOptions, apply_shared_rules
from trainguard.render.shared import SHARED, SHARED_RULE_NAME

SELECTED = MONITOR["spec"]["selector"]["matchLabels"]
RECEIVER = ReceiverSettings(key=b"k" * 32, url="https://trainguard-operator:8443", ca="CA")
REQUESTS = ("get_monitor", "get_policy", "list_monitors", "apply", "create_if_absent", "patch_status",
            "post_event", "label_namespace")  # fmt: skip
"""kube.Kube's calls that are requests to the API; the rest of FakeKube is the watch caches."""
SHARED_FORM = MonitorSettings(rule_form=SHARED)


class Counted:
    """FakeKube's API calls, each recorded by name (and the kind, for an apply) before it is served; an
    apply of an object in place is no request (kube.Kube.apply answers it from the watch cache)."""

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube
        self.requests: list[str] = []

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.kube, name)
        if name not in REQUESTS:
            return found

        def counted(*args: Any, **kwargs: Any) -> Any:
            if name != "apply":
                self.requests.append(name)
            elif not self.kube.unchanged(args[0]):  # kube.Kube answers one in place from its cache
                self.requests.append(f"apply {args[0]['kind']}")
            return found(*args, **kwargs)

        return counted


def cluster() -> tuple[FakeKube, Counted]:
    pods = [pod("ml", f"llama-{i}", SELECTED, "trainer", "trainguard-exporter") for i in range(2)]
    kube = FakeKube(monitor_body(), POLICY, *pods)
    return kube, Counted(kube)


def created(kube: FakeKube, api: Counted) -> None:
    """The monitor's first reconcile (kopf's create handler), after which the pass is steady."""
    reconcile(api, kube, "ml", "llama-pretrain", receiver=RECEIVER)  # type: ignore[arg-type]
    assert api.requests.count("patch_status") == 1 and "apply PrometheusRule" in api.requests
    api.requests.clear()


def resync_pass(kube: FakeKube, api: Counted, clock: Clock) -> None:
    """One resync pass of the leader's periodic loop, as controller/run.py wires it."""
    p = Periodic(api, kube, leader=lambda: True, lock=LOCKS, resync_s=60, pods_s=3600, clock=clock,  # type: ignore[arg-type]
                 reconcile=lambda ns, n: reconcile(api, kube, ns, n, receiver=RECEIVER),  # type: ignore[arg-type]
                 resync=lambda body: resync(api, kube, body, receiver=RECEIVER))  # type: ignore[arg-type]  # fmt: skip
    clock.now += 60
    p.tick()


def test_a_steady_resync_pass_makes_no_request() -> None:
    kube, api = cluster()
    created(kube, api)
    clock = Clock(1000.0)
    for _ in range(3):
        resync_pass(kube, api, clock)
    assert api.requests == [], "no read by name, no list, no apply, no status patch, no Event"


def test_a_hand_edit_is_applied_alone_by_the_next_pass() -> None:
    kube, api = cluster()
    created(kube, api)
    rule = next(o for k, o in kube.objects.items() if k[0] == "PrometheusRule")
    edited = copy.deepcopy(rule)
    edited["spec"]["groups"] = edited["spec"]["groups"][:1]
    kube.put(edited)
    kube.applies.clear()
    resync_pass(kube, api, Clock(1000.0))
    assert kube.applies == ["PrometheusRule"], "only the edited object is written"
    assert kube.objects[("PrometheusRule", "ml", rule["metadata"]["name"])] == rule
    assert [r for r in api.requests if r.startswith("apply")] == ["apply PrometheusRule"]
    assert "patch_status" not in api.requests, "the status already said Ready at this input"
    api.requests.clear()
    resync_pass(kube, api, Clock(2000.0))
    assert api.requests == []


def test_a_policy_changed_in_its_cache_is_rendered_by_the_pass() -> None:
    kube, api = cluster()
    created(kube, api)
    changed = copy.deepcopy(POLICY)
    changed["spec"]["receivers"][1]["url"] = "http://127.0.0.1:9102/im"
    kube.put(changed)
    kube.applies.clear()
    resync_pass(kube, api, Clock(1000.0))
    assert kube.applies, "the new policy's objects are applied"
    assert "patch_status" in api.requests, "a new input hash"
    api.requests.clear()
    resync_pass(kube, api, Clock(2000.0))
    assert api.requests == []


def test_a_secret_due_to_be_written_again_is_written_alone() -> None:
    """The operator cannot read Secrets, so kube.Kube writes each again after a while (or after a
    restart, when it cannot know what it wrote): a blind write, with no read of the monitor."""
    kube, api = cluster()
    created(kube, api)
    kube.written.clear()  # FakeKube's memory of this process's writes: as after a restart
    resync_pass(kube, api, Clock(1000.0))
    assert api.requests == ["apply Secret"]


def test_a_steady_resync_pass_of_a_shared_monitor_keeps_its_shared_form() -> None:
    """The resync renders the monitor in the operator's rule form: rendered per monitor instead, it would
    find the PrometheusRule different and put the whole per-monitor group back on every pass."""
    kube, api = cluster()
    reconcile(api, kube, "ml", "llama-pretrain", receiver=RECEIVER, settings=SHARED_FORM)  # type: ignore[arg-type]
    api.requests.clear()
    clock = Clock(1000.0)
    p = Periodic(api, kube, leader=lambda: True, lock=LOCKS, resync_s=60, pods_s=3600, clock=clock,  # type: ignore[arg-type]
                 reconcile=lambda ns, n: reconcile(api, kube, ns, n, receiver=RECEIVER, settings=SHARED_FORM),  # type: ignore[arg-type]
                 resync=lambda body: resync(api, kube, body, receiver=RECEIVER, settings=SHARED_FORM))  # type: ignore[arg-type]  # fmt: skip
    for _ in range(2):
        clock.now += 60
        p.tick()
    assert api.requests == []


def test_the_resync_puts_the_shared_rule_group_back_and_a_steady_pass_writes_nothing() -> None:
    """The shared group is the operator's own object, applied at startup and again at each resync pass
    (Periodic.operator_objects, as controller/run.py wires it): deleted or edited by hand, it comes back
    at the next pass; in place, the pass makes no request for it."""
    kube, api = cluster()
    opts = OperatorOptions(namespace="trainguard-system", rule_form=SHARED)
    reconcile(api, kube, "ml", "llama-pretrain", receiver=RECEIVER, settings=SHARED_FORM)  # type: ignore[arg-type]
    assert apply_shared_rules(api, opts), "applied at startup"  # type: ignore[arg-type]
    key = ("PrometheusRule", "trainguard-system", SHARED_RULE_NAME)
    applied = copy.deepcopy(kube.objects[key])
    api.requests.clear()
    clock = Clock(1000.0)
    p = Periodic(api, kube, leader=lambda: True, lock=LOCKS, resync_s=60, pods_s=3600, clock=clock,  # type: ignore[arg-type]
                 reconcile=lambda ns, n: reconcile(api, kube, ns, n, receiver=RECEIVER, settings=SHARED_FORM),  # type: ignore[arg-type]
                 resync=lambda body: resync(api, kube, body, receiver=RECEIVER, settings=SHARED_FORM),  # type: ignore[arg-type]
                 operator_objects=lambda: apply_shared_rules(api, opts))  # type: ignore[arg-type]  # fmt: skip

    def one_pass() -> list[str]:
        api.requests.clear()
        clock.now += 60
        p.tick()
        return api.requests

    assert one_pass() == [], "in place: no request"
    del kube.objects[key]
    assert one_pass() == ["apply PrometheusRule"], "deleted: applied again, and nothing else"
    assert kube.objects[key] == applied
    edited = copy.deepcopy(applied)
    edited["spec"]["groups"][0]["rules"] = edited["spec"]["groups"][0]["rules"][:3]
    kube.put(edited)
    assert one_pass() == ["apply PrometheusRule"], "edited: applied again"
    assert kube.objects[key] == applied
    assert one_pass() == [], "steady again"


class Yielding:
    """The fast path's hold as a reconcile sees it (remediation/urgency.py): what had happened when the
    reconcile asked to wait."""

    def __init__(self, api: Counted) -> None:
        self.api = api
        self.asked: list[tuple[int, bool]] = []

    def wait(self) -> float:
        self.asked.append((len(self.api.requests), LOCKS("ml", "llama-pretrain").locked()))
        return 0.0


def test_a_reconcile_and_a_resync_wait_for_the_fast_path_before_any_request_and_the_monitors_lock() -> None:
    """Before the lock: the fast path writes the monitor's pending signals and records under it."""
    kube, api = cluster()
    held = Yielding(api)
    reconcile(api, kube, "ml", "llama-pretrain", receiver=RECEIVER, settings=MonitorSettings(urgency=held))  # type: ignore[arg-type]
    assert held.asked == [(0, False)]
    assert "patch_status" in api.requests, "then it reconciled"
    api.requests.clear()
    held.asked.clear()
    body = kube.get_monitor("ml", "llama-pretrain")
    assert body is not None
    resync(api, kube, body, receiver=RECEIVER, settings=MonitorSettings(urgency=held))  # type: ignore[arg-type]
    assert held.asked == [(0, False)]


def test_the_metrics_count_a_resync_by_what_it_found_and_a_reconcile_only_when_it_writes() -> None:
    """A pass over 2,000 monitors every 2 minutes is no reconcile of each: counted as one, the steady
    passes made the reconciles of a 500-second apply look 4.6 a monitor."""
    kube, api = cluster()
    created(kube, api)
    metrics = OperatorMetrics(CollectorRegistry())
    settings = MonitorSettings(metrics=metrics)
    memo = InPlace(clock=Clock(1000.0))

    def one_pass() -> None:
        body = kube.get_monitor("ml", "llama-pretrain")
        assert body is not None
        resync(api, kube, body, receiver=RECEIVER, settings=settings, in_place=memo)  # type: ignore[arg-type]

    one_pass()  # rendered, found in place
    one_pass()  # the same inputs: not rendered again
    rule = next(o for k, o in kube.objects.items() if k[0] == "PrometheusRule")
    edited = copy.deepcopy(rule)
    edited["spec"]["groups"] = edited["spec"]["groups"][:1]
    kube.put(edited)
    one_pass()  # the hand edit is written back, by a reconcile
    got = metrics.registry.get_sample_value
    counts = {
        o: got("trainguard_operator_resyncs_total", {"outcome": o})
        for o in ("in_place", "rendered", "written")
    }
    assert counts == {"in_place": 1, "rendered": 1, "written": 1}
    assert got("trainguard_operator_reconcile_total", {"result": "success"}) == 1
    assert got("trainguard_operator_reconcile_duration_seconds_count", {}) == 1


def test_a_monitor_a_reconcile_is_writing_now_is_left_to_it() -> None:
    """At 2,000 monitors every resync reconcile of the burst found the status a reconcile in flight on
    another thread had not written yet: it then waited for the lock and wrote nothing."""
    kube, api = cluster()
    created(kube, api)
    body = copy.deepcopy(kube.monitor("ml", "llama-pretrain"))
    assert body is not None
    body.pop("status")  # what the cache holds while the reconcile is still at work
    metrics = OperatorMetrics(CollectorRegistry())
    settings = MonitorSettings(metrics=metrics)
    with LOCKS("ml", "llama-pretrain"):
        assert resync(api, kube, body, receiver=RECEIVER, settings=settings) is False  # type: ignore[arg-type]
    assert api.requests == []
    assert (
        metrics.registry.get_sample_value("trainguard_operator_resyncs_total", {"outcome": "reconciling"})
        == 1
    )
    assert resync(api, kube, body, receiver=RECEIVER, settings=settings) is True, "no reconcile at it: judged"  # type: ignore[arg-type]


def test_the_log_names_the_status_fields_a_resync_repairs(caplog: Any) -> None:
    """Why a monitor was written again is in the log: the fields of its status, conditions by type."""
    kube, api = cluster()
    created(kube, api)
    body = copy.deepcopy(kube.monitor("ml", "llama-pretrain"))
    assert body is not None
    del body["status"]["inputHash"]
    body["status"]["conditions"] = [c for c in body["status"]["conditions"] if c["type"] != "Ready"]
    with caplog.at_level("INFO", logger="trainguard.handlers"):
        assert resync(api, kube, body, receiver=RECEIVER) is True  # type: ignore[arg-type]
    found = [r.getMessage() for r in caplog.records if "the resync finds" in r.getMessage()]
    assert found == [
        "ml/llama-pretrain: the resync finds status trainingjobmonitors ml/llama-pretrain to write "
        "(status: conditions Ready, inputHash)"
    ]


class ListedBefore:
    """The caches as a pass finds them: `monitors()` is the list taken at the pass's start, before the
    monitor's first reconcile wrote its status; everything else, `monitor()` included, is current."""

    def __init__(self, kube: FakeKube, listed: list[dict[str, Any]]) -> None:
        self.kube, self.listed = kube, listed

    def monitors(self) -> list[dict[str, Any]]:
        return self.listed

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)


def test_a_pass_judges_each_monitor_as_its_cache_holds_it_when_its_turn_comes() -> None:
    """A pass over 2,000 monitors takes a minute during a burst: a monitor reconciled after the pass
    listed it is in place when its turn comes, and is neither reconciled again nor counted again."""
    kube, api = cluster()
    listed = [copy.deepcopy(kube.monitor("ml", "llama-pretrain"))]  # no status yet
    created(kube, api)
    reads = ListedBefore(kube, listed)  # type: ignore[arg-type]
    metrics = OperatorMetrics(CollectorRegistry())
    settings = MonitorSettings(metrics=metrics)
    p = Periodic(api, reads, leader=lambda: True, lock=LOCKS, resync_s=60, pods_s=60, clock=Clock(0.0),  # type: ignore[arg-type]
                 reconcile=lambda ns, n: reconcile(api, kube, ns, n, receiver=RECEIVER, settings=settings),  # type: ignore[arg-type]
                 resync=lambda body: resync(api, kube, body, receiver=RECEIVER, settings=settings))  # type: ignore[arg-type]  # fmt: skip
    p.clock = Clock(60.0)
    p.tick()
    assert api.requests == []
    assert metrics.registry.get_sample_value("trainguard_operator_resyncs_total", {"outcome": "written"}) == 0
    kube.objects.pop(("TrainingJobMonitor", "ml", "llama-pretrain"))
    p.clock = Clock(120.0)
    p.tick()
    assert api.requests == [], "deleted since the list: nothing to judge"
