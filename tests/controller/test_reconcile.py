"""reconcile_monitor's decisions, with the in-memory stand-in for the API edge, tests/kube/fakes.py (the
real API is exercised by e2e/test_operator.py against a kube-apiserver)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.conftest import MONITOR, POLICY, monitor_body
from tests.kube.fakes import FakeKube, namespace_terminating, node, pod, refused
from tests.kube.owners import jobset
from trainguard.catalog.severity import MAPPED
from trainguard.controller.reconcile import NamespaceTerminating, ReceiverSettings, reconcile_monitor
from trainguard.kube import HASH_ANNOTATION
from trainguard.kube import namespace_terminating as namespace_terminating_refusal
from trainguard.remediation import tokens

NODES = [node("gpu-node-7", rack="r12"), node("gpu-node-8", rack="r13")]
SELECTED = MONITOR["spec"]["selector"]["matchLabels"]
PODS = [
    pod("ml", "llama-0", SELECTED, "trainer", "trainguard-exporter"),
    pod("ml", "llama-1", SELECTED, "trainer", "trainguard-exporter"),
    pod("ml", "llama-2", SELECTED, "trainer"),  # let through without the sidecar
    pod("ml", "web-0", {"app": "web"}, "web", "trainguard-exporter"),  # selected by no monitor
]


def fake(*policies: dict[str, Any], **kw: Any) -> FakeKube:
    """The API edge with the cluster's nodes and pods and `policies`."""
    return FakeKube(*NODES, *PODS, *policies, **kw)


def cond(kube: FakeKube, type_: str) -> dict[str, Any]:
    assert kube.status is not None
    return next(c for c in kube.status["conditions"] if c["type"] == type_)


def test_applies_everything_then_nothing_when_unchanged() -> None:
    kube = fake(POLICY)
    events: list[tuple[str, str]] = []
    reconcile_monitor(kube, kube, monitor_body(), announce=lambda r, m: events.append((r, m)))  # type: ignore[arg-type]
    assert kube.applies == ["PrometheusRule", "AlertmanagerConfig", "PodMonitor"]
    assert [o["metadata"]["name"] for o in kube.created] == ["trainguard-llama-pretrain-fastpath"]
    assert cond(kube, "Ready")["status"] == "True"
    assert kube.status and kube.status["podsMonitored"] == 2
    assert kube.status["podsUnmonitored"] == 1, "llama-2 was let through without the sidecar"
    assert events and events[0][0] == "Applied" and "generation 1" in events[0][1]
    assert events[1][0] == "PodsWithoutExporter" and "(llama-2)" in events[1][1], events
    kube.applies.clear()
    events.clear()
    reconcile_monitor(
        kube, kube, monitor_body() | {"status": kube.status}, announce=lambda r, m: events.append((r, m))
    )  # type: ignore[arg-type]
    assert kube.calls[-3:] == ["PrometheusRule", "AlertmanagerConfig", "PodMonitor"], "applied every time"
    assert kube.applies == [] and events == [], "nothing changed, so nothing is announced"
    assert kube.objects[("PrometheusRule", "ml", "trainguard-llama-pretrain")]["metadata"]["annotations"][
        HASH_ANNOTATION
    ]


def test_the_platforms_severity_style_is_applied_and_a_switch_re_renders_the_rules() -> None:
    kube = fake(POLICY)

    def labels() -> dict[str, dict[str, str]]:
        rule = kube.objects[("PrometheusRule", "ml", "trainguard-llama-pretrain")]
        return {r["alert"]: r["labels"] for r in rule["spec"]["groups"][0]["rules"] if "alert" in r}

    reconcile_monitor(kube, kube, monitor_body())  # type: ignore[arg-type]
    assert labels()["GPUCriticalXid"] == {"priority": "P0", "severity": "P0"}
    kube.applies.clear()
    reconcile_monitor(kube, kube, monitor_body(), severity_style=MAPPED)  # type: ignore[arg-type]
    assert labels()["GPUCriticalXid"] == {"priority": "P0", "severity": "critical"}
    assert kube.applies == ["PrometheusRule"], "the routes match priority: they do not change"


def test_a_hand_edit_of_an_owned_object_is_repaired_by_the_next_reconcile() -> None:
    kube = fake(POLICY)
    reconcile_monitor(kube, kube, monitor_body())  # type: ignore[arg-type]
    rule = kube.objects[("PrometheusRule", "ml", "trainguard-llama-pretrain")]
    rendered = copy.deepcopy(rule["spec"])
    rule["spec"]["groups"][0]["rules"] = []  # kubectl edit: every rule gone, the annotation kept
    kube.applies.clear()
    reconcile_monitor(kube, kube, monitor_body())  # type: ignore[arg-type]
    assert kube.applies == ["PrometheusRule"]
    assert kube.objects[("PrometheusRule", "ml", "trainguard-llama-pretrain")]["spec"] == rendered


def test_an_apply_the_api_refuses_is_degraded_naming_the_object_and_the_message() -> None:
    message = 'admission webhook "prometheusrulevalidate.monitoring.coreos.com" denied the request: bad expr'
    kube = fake(POLICY, refuse={"PrometheusRule": refused(422, message)})
    events: list[tuple[str, str]] = []
    reconcile_monitor(kube, kube, monitor_body(), announce=lambda r, m: events.append((r, m)))  # type: ignore[arg-type]
    c = cond(kube, "Degraded")
    assert c["status"] == "True" and c["reason"] == "ApplyFailed"
    assert "PrometheusRule ml/trainguard-llama-pretrain" in c["message"] and message in c["message"]
    assert cond(kube, "Ready")["status"] == "False"
    assert cond(kube, "RulesApplied")["status"] == "False"
    assert events == [("ApplyFailed", c["message"])]


def test_a_forbidden_apply_is_degraded_and_later_objects_say_what_was_applied() -> None:
    kube = fake(POLICY, refuse={"PodMonitor": refused(403, "podmonitors is forbidden")})
    reconcile_monitor(kube, kube, monitor_body())  # type: ignore[arg-type]
    c = cond(kube, "Degraded")
    assert c["reason"] == "ApplyFailed" and "PodMonitor" in c["message"] and "RBAC" in c["message"]
    assert cond(kube, "RulesApplied")["status"] == "True"
    assert cond(kube, "RoutesApplied")["status"] == "True"


def test_a_namespace_being_deleted_is_neither_degraded_nor_announced() -> None:
    kube = fake(POLICY, refuse={"PodMonitor": namespace_terminating()})
    events: list[tuple[str, str]] = []
    with pytest.raises(NamespaceTerminating, match="namespace ml is being deleted"):
        reconcile_monitor(kube, kube, monitor_body(), announce=lambda r, m: events.append((r, m)))
    assert kube.status is None and events == []


def test_only_the_namespace_lifecycle_refusal_counts_as_a_namespace_being_deleted() -> None:
    assert namespace_terminating_refusal(namespace_terminating())
    rbac = refused(
        403, 'podmonitors.monitoring.coreos.com is forbidden: User "system:serviceaccount:x" cannot create'
    )
    assert not namespace_terminating_refusal(rbac)  # RBAC's 403 has no cause: Degraded, as before
    assert not namespace_terminating_refusal(refused(409, "namespace ml is being terminated"))
    garbled = ApiException(status=403)
    garbled.body = "<html>proxy error</html>"
    assert not namespace_terminating_refusal(garbled)


def test_a_transient_api_failure_is_reported_and_raised_for_kopf_to_retry() -> None:
    kube = fake(POLICY, refuse={"PrometheusRule": refused(503, "etcd unavailable")})
    with pytest.raises(ApiException):
        reconcile_monitor(kube, kube, monitor_body())  # type: ignore[arg-type]
    assert cond(kube, "Degraded")["reason"] == "ApplyFailed"


def test_the_receiver_secret_is_emptied_when_the_inline_url_goes() -> None:
    slack = copy.deepcopy(POLICY)
    slack["spec"]["receivers"].append(
        {"name": "chat", "type": "slack", "roles": ["im"], "url": "https://hooks.slack.invalid/T/B/x"}
    )
    kube = fake(slack)
    status = reconcile_monitor(kube, kube, monitor_body())  # type: ignore[arg-type]
    assert status["receiverSecret"] == "trainguard-llama-pretrain-receivers"
    assert "data" in kube.objects[("Secret", "ml", "trainguard-llama-pretrain-receivers")]
    kube.put(POLICY)
    status = reconcile_monitor(kube, kube, monitor_body() | {"status": status})  # type: ignore[arg-type]
    assert kube.emptied == ["trainguard-llama-pretrain-receivers"], (
        "the webhook URL no longer sits in a Secret"
    )
    assert status["receiverSecret"] == ""
    reconcile_monitor(kube, kube, monitor_body() | {"status": status})  # type: ignore[arg-type]
    assert kube.emptied == ["trainguard-llama-pretrain-receivers"], "emptied once"


def test_a_secret_rewritten_after_a_restart_is_not_announced_when_the_input_is_the_same() -> None:
    slack = copy.deepcopy(POLICY)
    slack["spec"]["receivers"].append(
        {"name": "chat", "type": "slack", "roles": ["im"], "url": "https://hooks.slack.invalid/T/B/x"}
    )
    kube = fake(slack)
    status = reconcile_monitor(kube, kube, monitor_body())  # type: ignore[arg-type]
    kube.written.clear()  # a restarted operator: it never wrote the Secret in this process
    events: list[tuple[str, str]] = []
    reconcile_monitor(
        kube, kube, monitor_body() | {"status": status}, announce=lambda r, m: events.append((r, m))
    )  # type: ignore[arg-type]
    assert events == []


def test_a_persisting_apply_failure_is_announced_once() -> None:
    kube = fake(POLICY, refuse={"PrometheusRule": refused(422, "bad rule")})
    events: list[tuple[str, str]] = []
    status = reconcile_monitor(kube, kube, monitor_body(), announce=lambda r, m: events.append((r, m)))  # type: ignore[arg-type]
    reconcile_monitor(
        kube, kube, monitor_body() | {"status": status}, announce=lambda r, m: events.append((r, m))
    )  # type: ignore[arg-type]
    assert [r for r, _ in events] == ["ApplyFailed"]


def test_policy_change_reapplies_only_what_changed() -> None:
    kube = fake(POLICY)
    reconcile_monitor(kube, kube, monitor_body())  # type: ignore[arg-type]
    kube.applies.clear()
    changed = copy.deepcopy(POLICY)
    changed["spec"]["alerts"] = [{"name": "GPUThermalThrottling", "threshold": 80}]
    kube.put(changed)
    reconcile_monitor(kube, kube, monitor_body())  # type: ignore[arg-type]
    assert kube.applies == ["PrometheusRule"]


def test_missing_policy_degrades_and_applies_nothing() -> None:
    kube = fake()
    reconcile_monitor(kube, kube, monitor_body())  # type: ignore[arg-type]
    assert kube.applies == []
    assert cond(kube, "Degraded")["reason"] == "PolicyNotFound"
    assert cond(kube, "Ready")["status"] == "False"


def test_invalid_spec_degrades_without_raising() -> None:
    kube = fake(POLICY)
    reconcile_monitor(kube, kube, monitor_body(baseline={"sigma": -1}))  # type: ignore[arg-type]
    c = cond(kube, "Degraded")
    assert c["reason"] == "InvalidSpec" and "spec.baseline.sigma" in c["message"]


def test_invalid_policy_degrades_naming_it() -> None:
    bad = copy.deepcopy(POLICY)
    bad["spec"]["alerts"] = [{"name": "GPUMemoryHang", "params": {"nope": 1}}]
    kube = fake(bad)
    reconcile_monitor(kube, kube, monitor_body())  # type: ignore[arg-type]
    c = cond(kube, "Degraded")
    assert c["reason"] == "InvalidPolicy" and "AlertPolicy ml/default" in c["message"]


def test_missing_prometheus_operator_crds_is_a_clear_condition() -> None:
    kube = fake(POLICY, missing_kinds=("PrometheusRule",))
    reconcile_monitor(kube, kube, monitor_body())  # type: ignore[arg-type]
    c = cond(kube, "Degraded")
    assert c["reason"] == "MissingCRDs" and "install prometheus-operator's CRDs" in c["message"]


def test_maintenance_window_node_selector_is_resolved_to_node_names() -> None:
    pol = copy.deepcopy(POLICY)
    pol["spec"]["maintenanceWindows"] = [
        {"name": "rack-12", "start": "2026-12-01T22:00:00Z", "end": "2026-12-01T23:00:00Z",
         "nodeSelector": {"matchLabels": {"rack": "r12"}}}
    ]  # fmt: skip
    kube = fake(pol)
    reconcile_monitor(kube, kube, monitor_body())  # type: ignore[arg-type]
    amc = kube.objects[("AlertmanagerConfig", "ml", "trainguard-llama-pretrain")]
    p0 = amc["spec"]["route"]["routes"][0]
    assert p0["routes"][0]["matchers"] == [{"name": "node", "matchType": "=~", "value": "gpu-node-7"}]
    assert p0["routes"][0]["routes"][0]["muteTimeIntervals"] == ["maintenance-rack-12"]


def test_with_a_receiver_the_credentials_are_derived_and_alertmanager_posts_to_the_operator() -> None:
    key = tokens.new_key()
    kube = fake(POLICY)
    settings = ReceiverSettings(key=key, url="https://op.trainguard-system.svc:8443", ca="CA PEM")
    reconcile_monitor(kube, kube, monitor_body(), receiver=settings)  # type: ignore[arg-type]
    assert kube.created == [], "no random token: the operator derives it and can check it again"
    secret = kube.objects[("Secret", "ml", "trainguard-llama-pretrain-fastpath")]["stringData"]
    assert tokens.verify(key, tokens.EVENTS, "ml", "llama-pretrain", "u-1", presented=secret["token"])
    assert tokens.verify(
        key, tokens.ALERTS, "ml", "llama-pretrain", "u-1", presented=secret["alertmanager-token"]
    )
    assert not tokens.verify(key, tokens.ALERTS, "ml", "llama-pretrain", "u-1", presented=secret["token"])
    amc = kube.objects[("AlertmanagerConfig", "ml", "trainguard-llama-pretrain")]["spec"]
    assert "trainguard-operator" in {r["name"] for r in amc["receivers"]}
    kube.applies.clear()
    reconcile_monitor(kube, kube, monitor_body(), receiver=settings)  # type: ignore[arg-type]
    assert kube.applies == [], "the same key gives the same Secret"


def test_a_secret_the_write_policy_refuses_says_the_name_is_taken() -> None:
    """A tenant's own Secret under the name of the monitor's fast-path Secret: the Secret-write policy
    (deploy/secret-write-policy.yaml) refuses the apply, and the condition says what to do."""
    message = (
        'secrets "trainguard-llama-pretrain-fastpath" is forbidden: ValidatingAdmissionPolicy '
        "'trainguard-operator-secret-writes' with binding 'trainguard-operator-secret-writes' denied request: "
        "trainguard-operator may update only Secrets it wrote"
    )
    kube = fake(POLICY, refuse={"Secret": refused(403, message)})
    receiver = ReceiverSettings(url="https://op:8443", key=b"k" * 32)
    reconcile_monitor(kube, kube, monitor_body(), receiver=receiver)  # type: ignore[arg-type]
    c = cond(kube, "Degraded")
    assert c["reason"] == "ApplyFailed" and message in c["message"]
    assert "Secret ml/trainguard-llama-pretrain-fastpath" in c["message"]
    assert "rename or remove that Secret" in c["message"] and "RBAC" not in c["message"]


def test_a_monitor_created_again_under_its_name_gets_new_tokens_from_the_same_operator() -> None:
    """The tokens are bound to the monitor's uid: the same operator process, the same name, another
    object, and the Secret is written again with tokens the old ones do not match."""
    key = tokens.new_key()
    kube = fake(POLICY)
    settings = ReceiverSettings(key=key, url="https://op.trainguard-system.svc:8443")
    secret_key = ("Secret", "ml", "trainguard-llama-pretrain-fastpath")
    reconcile_monitor(kube, kube, monitor_body(), receiver=settings)  # type: ignore[arg-type]
    old = kube.objects[secret_key]["stringData"]
    again = monitor_body()
    again["metadata"]["uid"] = "u-2"
    kube.applies.clear()
    reconcile_monitor(kube, kube, again, receiver=settings)  # type: ignore[arg-type]
    assert "Secret" in kube.applies
    secret = kube.objects[secret_key]
    new = secret["stringData"]
    assert tokens.verify(
        key, tokens.ALERTS, "ml", "llama-pretrain", "u-2", presented=new["alertmanager-token"]
    )
    assert tokens.verify(key, tokens.EVENTS, "ml", "llama-pretrain", "u-2", presented=new["token"])
    assert not tokens.verify(
        key, tokens.ALERTS, "ml", "llama-pretrain", "u-2", presented=old["alertmanager-token"]
    )
    assert not tokens.verify(key, tokens.EVENTS, "ml", "llama-pretrain", "u-2", presented=old["token"])
    assert [r["uid"] for r in secret["metadata"]["ownerReferences"]] == ["u-2"]


# ---- the workload owner (kube/workloads.py) ----


def with_ref(kind: str = "JobSet", name: str = "llama-pretrain") -> dict[str, Any]:
    return monitor_body(workloadRef={"kind": kind, "name": name})


def test_a_workload_ref_to_a_missing_object_waits_naming_the_field_and_is_not_degraded() -> None:
    """A monitor applied before its job (a GitOps sync, a pipeline that submits the job later) is
    waiting, not broken: WorkloadResolved says why, Degraded stays False (Argo CD's health stays Healthy)."""
    kube = fake(POLICY)
    events: list[tuple[str, str]] = []
    reconcile_monitor(kube, kube, with_ref("Job"), announce=lambda r, m: events.append((r, m)))  # type: ignore[arg-type]
    c = cond(kube, "WorkloadResolved")
    assert (c["status"], c["reason"]) == ("False", "WorkloadNotFound")
    assert (
        c["message"]
        == "spec.workloadRef: Job ml/llama-pretrain not found: create it, or fix spec.workloadRef.name"
    )
    assert cond(kube, "Degraded")["status"] == "False"
    assert cond(kube, "Ready")["status"] == "True", "the rules and routes work: only restarts do not"
    assert kube.applies == ["PrometheusRule", "AlertmanagerConfig", "PodMonitor"]
    assert ("WorkloadNotFound", c["message"]) in events
    body = with_ref("Job")
    body["status"] = kube.status
    events.clear()
    reconcile_monitor(kube, kube, body, announce=lambda r, m: events.append((r, m)))  # type: ignore[arg-type]
    assert [e for e in events if e[0] == "WorkloadNotFound"] == [], "announced once per distinct problem"


def test_a_status_written_before_workload_resolved_moves_to_it_and_says_so_once() -> None:
    """An operator upgraded in place reads the workload problem an older one wrote into Degraded."""
    kube = fake(POLICY)
    body = with_ref("Job")
    message = "spec.workloadRef: Job ml/llama-pretrain not found: create it, or fix spec.workloadRef.name"
    body["status"] = {"conditions": [{"type": "Degraded", "status": "True", "reason": "WorkloadUnresolved",
                                      "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}  # fmt: skip
    events: list[tuple[str, str]] = []
    reconcile_monitor(kube, kube, body, announce=lambda r, m: events.append((r, m)))  # type: ignore[arg-type]
    assert ("WorkloadNotFound", message) in events, "now known as a missing object: said once, as such"
    assert cond(kube, "Degraded")["status"] == "False"
    assert cond(kube, "WorkloadResolved")["reason"] == "WorkloadNotFound"


def test_a_workload_kind_whose_crd_is_not_installed_is_degraded_and_a_found_one_is_not() -> None:
    kube = fake(POLICY, missing_kinds=("JobSet",))
    reconcile_monitor(kube, kube, with_ref("JobSet"))  # type: ignore[arg-type]
    c = cond(kube, "Degraded")
    assert (
        c["reason"] == "WorkloadUnresolved"
        and "JobSet (jobset.x-k8s.io/v1alpha2) is not served" in c["message"]
    )
    found = FakeKube(*NODES, POLICY, jobset(name="llama-pretrain"))
    reconcile_monitor(found, found, with_ref("JobSet"))  # type: ignore[arg-type]
    assert (cond(found, "Degraded")["status"], cond(found, "Degraded")["reason"]) == ("False", "AsExpected")
    assert (cond(found, "WorkloadResolved")["status"], cond(found, "WorkloadResolved")["reason"]) == (
        "True",
        "Resolved",
    )
    strangers = fake(POLICY, jobset(name="llama-pretrain"))  # the selector's pods are not the JobSet's
    reconcile_monitor(strangers, strangers, with_ref("JobSet"))  # type: ignore[arg-type]
    assert cond(strangers, "Degraded")["message"].startswith(
        "spec.selector selects pods that JobSet llama-pretrain does not own (llama-0, llama-1, llama-2)"
    )


def test_a_reconcile_error_is_said_before_the_workloads_problem() -> None:
    kube = fake()  # no policy
    reconcile_monitor(kube, kube, with_ref("Job"))  # type: ignore[arg-type]
    assert cond(kube, "Degraded")["reason"] == "PolicyNotFound"
