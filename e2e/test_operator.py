"""The operator against a real kube-apiserver, controller-manager and scheduler."""

from __future__ import annotations

import copy
import time
import uuid
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from e2e.cluster import RESYNC_SECONDS, Cluster
from e2e.monitors import MON, NAME, QUICKSTART, condition, indexed_job, quickstart, ready
from tests import exposition
from tests.processes import wait_for
from trainguard.api import load_documents
from trainguard.catalog.kubernetes import MONITORED
from trainguard.render import effective_policy, render_kubernetes
from trainguard.render.kubernetes import alertmanager_config, operator_receiver

OWNED = [
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("monitoring.coreos.com/v1alpha1", "AlertmanagerConfig"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
]


def rule(cluster: Cluster, ns: str, alert: str) -> dict[str, Any] | None:
    pr = cluster.get("monitoring.coreos.com/v1", "PrometheusRule", ns, NAME)
    for r in (pr or {}).get("spec", {}).get("groups", [{}])[0].get("rules", []):
        if r.get("alert") == alert and r["labels"].get("escalated_from") is None:
            return dict(r)
    return None


def test_quickstart_renders_owned_objects_and_becomes_ready(operator: Cluster, ns: str) -> None:
    operator.apply(quickstart(ns))
    obj = wait_for("monitor Ready", lambda: ready(operator, ns), timeout=60)
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    assert condition(obj, "RulesApplied")["status"] == "True"
    assert condition(obj, "RoutesApplied")["status"] == "True"
    # the quickstart's Job is not created here: its workloadRef does not resolve, which holds back the
    # restarts only, not the rules and routes (Ready above), and says so; a job not there yet is waited
    # for, not Degraded
    waiting = condition(obj, "WorkloadResolved")
    assert (waiting["status"], waiting["reason"]) == ("False", "WorkloadNotFound"), waiting
    assert waiting["message"].startswith(f"spec.workloadRef: Job {ns}/llama-pretrain not found"), waiting
    assert condition(obj, "Degraded")["status"] == "False", condition(obj, "Degraded")
    # the live objects carry exactly what `trainguard render` produces for the same input
    text = QUICKSTART.read_text().replace("namespace: ml", f"namespace: {ns}")
    docs = load_documents([("quickstart", text)])
    expected = {o["kind"]: o for o in render_kubernetes(docs)}
    # the operator adds its remediation receiver to the routes (the CLI knows of no operator)
    m = docs.monitors[0]
    operator_amc = alertmanager_config(m, effective_policy(m, docs.policies_for(m)), {},
                                       operator_receiver(m, operator.receiver_url(), with_ca=True))  # fmt: skip
    expected["AlertmanagerConfig"] = operator_amc
    for api_version, kind in OWNED:
        live = wait_for(f"{kind}", lambda a=api_version, k=kind: operator.get(a, k, ns, NAME))
        assert live["spec"] == expected[kind]["spec"], kind
        owner = live["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == (
            "TrainingJobMonitor",
            "llama-pretrain",
            True,
        )
        assert live["metadata"]["annotations"]["trainguard.io/input-hash"]


def test_policy_change_updates_the_rule_and_delete_collects_owned(operator: Cluster, ns: str) -> None:
    operator.apply(quickstart(ns))
    wait_for("monitor Ready", lambda: ready(operator, ns))
    assert ">= 0.95" in rule(operator, ns, "GPUMemoryCritical")["expr"]
    operator.apply(quickstart(ns, alerts=[{"name": "GPUMemoryCritical", "threshold": 0.9, "for": "30s"}]))
    changed = wait_for(
        "rule re-rendered",
        lambda: (
            (r := rule(operator, ns, "GPUMemoryCritical"))
            and ">= 0.9" in r["expr"]
            and ">= 0.95" not in r["expr"]
            and r
        ),
    )
    assert changed["for"] == "30s"
    operator.custom.delete_namespaced_custom_object(
        "trainguard.io", "v1alpha1", ns, "trainingjobmonitors", "llama-pretrain"
    )
    for api_version, kind in OWNED:
        wait_for(
            f"{kind} garbage-collected",
            lambda a=api_version, k=kind: operator.get(a, k, ns, NAME) is None,
            timeout=90,
        )


def test_missing_policy_degrades_then_recovers(operator: Cluster, ns: str) -> None:
    monitor, policy = quickstart(ns)
    operator.apply([monitor])
    degraded = wait_for(
        "Degraded",
        lambda: (
            (c := condition(operator.get(*MON, ns, "llama-pretrain"), "Degraded"))
            and c["status"] == "True"
            and c
        ),
    )
    assert degraded["reason"] == "PolicyNotFound"
    assert f"AlertPolicy {ns}/default named in spec.policyRefs does not exist" in degraded["message"]
    assert operator.get("monitoring.coreos.com/v1", "PrometheusRule", ns, NAME) is None
    operator.apply([policy])
    wait_for("Ready once the policy exists", lambda: ready(operator, ns), timeout=60)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"spec.baseline.sigma": -1}, "spec.baseline.sigma"),
        ({"spec.checkpoint.fullEverySteps": 1050}, "spec.checkpoint.fullEverySteps"),
        ({"spec.mode": "pretraining"}, "spec.mode"),
        ({"spec.selector": {"matchLabels": {}}}, "spec.selector"),
        ({"spec.exporter.scrapeInterval": "fast"}, "spec.exporter.scrapeInterval"),
        ({"spec.unknownField": 1}, "unknownField"),
    ],
)
def test_invalid_monitor_is_rejected_by_the_apiserver(
    cluster: Cluster, ns: str, change: dict[str, Any], field: str
) -> None:
    monitor = copy.deepcopy(quickstart(ns)[0])
    for path, value in change.items():
        node = monitor
        *parents, last = path.split(".")
        for p in parents:
            node = node[p]
        node[last] = value
    with pytest.raises(ApiException) as exc:
        cluster.custom.create_namespaced_custom_object(  # Strict: what kubectl does
            "trainguard.io", "v1alpha1", ns, "trainingjobmonitors", monitor, field_validation="Strict"
        )
    body = str(exc.value.body)
    assert exc.value.status in (400, 422), body  # 400: strict decoding of an unknown field
    assert field in body, body


def test_indexed_job_pods_get_one_sidecar_and_land_on_gpu_nodes(operator: Cluster, ns: str) -> None:
    operator.apply(quickstart(ns))
    wait_for("monitor Ready", lambda: ready(operator, ns))
    operator.apply([indexed_job(ns)])
    pods = wait_for(
        "2 job pods Running",
        lambda: (
            (items := operator.core.list_namespaced_pod(ns, label_selector="app=llama-pretrain").items)
            and len(items) == 2
            and all(p.status.phase == "Running" for p in items)
            and items
        ),
        timeout=90,
    )
    traces = set()
    for pod in pods:
        exporters = [c for c in pod.spec.init_containers or [] if c.name == "trainguard-exporter"]
        assert len(exporters) == 1, "injected exactly once"
        assert exporters[0].restart_policy == "Always", "a native sidecar, so the Job can complete"
        assert exporters[0].security_context.run_as_non_root is True
        assert [c.name for c in pod.spec.containers] == ["trainer", "logshipper"]
        for c in [*pod.spec.containers, *(pod.spec.init_containers or [])]:
            env = {e.name: e.value for e in c.env or []}
            traces.add(env["TRAINGUARD_TRACE_ID"])
        trainer_env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert trainer_env["EXISTING"] == "kept"
        assert trainer_env["TRAINGUARD_ENDPOINT"] == "unix:///var/run/trainguard/sdk.sock"
        exporter_env = {e.name: e for e in exporters[0].env}
        assert exporter_env["TRAINGUARD_NODE"].value_from.field_ref.field_path == "spec.nodeName"
        assert exporter_env["TRAINGUARD_TRAINING_JOB"].value == "llama-pretrain"
        assert {v.name for v in pod.spec.volumes} >= {"trainguard-run", "trainguard-fastpath-token"}
        assert pod.metadata.annotations["trainguard.io/injected"] == "llama-pretrain"
        assert pod.spec.node_name.startswith("gpu-node-"), "placed by the real scheduler on a fake GPU node"
    assert len(traces) == 1, "one trace id per run, shared by every container of every pod"
    # the scheduler honoured the GPU requests: 8 GPUs per node means one pod per node
    assert len({p.spec.node_name for p in pods}) == 2
    status = wait_for(
        "pods counted",
        lambda: (o := ready(operator, ns)) and o["status"].get("podsMonitored") == 2 and o,
        timeout=150,
    )
    assert status


def test_pods_that_match_no_monitor_or_opt_out_are_untouched(operator: Cluster, ns: str) -> None:
    operator.apply(quickstart(ns))
    wait_for("monitor Ready", lambda: ready(operator, ns))
    other = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": ns, "labels": {"app": "web"}},
             "spec": {"containers": [{"name": "web", "image": "registry.invalid/web:1"}]}}  # fmt: skip
    opted_out = copy.deepcopy(other)
    opted_out["metadata"].update(
        name="opt-out", labels={"app": "llama-pretrain", "trainguard.io/inject": "disabled"}
    )
    operator.apply([other, opted_out])
    for name in ("web", "opt-out"):
        pod = operator.core.read_namespaced_pod(name, ns)
        assert not pod.spec.init_containers
        assert "trainguard.io/injected" not in (pod.metadata.annotations or {})


def bare_pod(ns: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": {"app": "llama-pretrain"}},
            "spec": {"containers": [{"name": "trainer", "image": "registry.invalid/llama:1"}]}}  # fmt: skip


def test_the_webhook_is_called_only_for_the_pods_of_namespaces_holding_a_monitor(
    operator: Cluster, ns: str
) -> None:
    """The namespace is labelled trainguard.io/monitored before its monitor is Ready; a pod of another
    namespace, even one a monitor there would select, never reaches the operator (its admission count
    stays); the label goes once the namespace holds no monitor."""
    other = operator.namespace(f"e2e-{uuid.uuid4().hex[:8]}")

    def admissions() -> float:
        samples = exposition.samples_of(exposition.metric_families(operator.metrics_url()).values())
        return exposition.value(samples, "trainguard_operator_webhook_duration_seconds_count") or 0.0

    def labels(namespace: str) -> dict[str, str]:
        return dict(operator.core.read_namespace(namespace).metadata.labels or {})

    try:
        operator.apply(quickstart(ns))
        wait_for("monitor Ready", lambda: ready(operator, ns))
        assert labels(ns).get(MONITORED) == "true", "labelled before the monitor was Ready"
        assert MONITORED not in labels(other)
        before = admissions()
        operator.apply([bare_pod(other, "elsewhere")])
        assert not operator.core.read_namespaced_pod("elsewhere", other).spec.init_containers
        assert admissions() == before, "the apiserver did not call the webhook for it"
        operator.apply([bare_pod(ns, "here")])
        assert any(
            c.name == "trainguard-exporter"
            for c in operator.core.read_namespaced_pod("here", ns).spec.init_containers or []
        )
        assert admissions() == before + 1
        operator.custom.delete_namespaced_custom_object(
            "trainguard.io", "v1alpha1", ns, "trainingjobmonitors", "llama-pretrain"
        )
        wait_for(
            "the label gone with the namespace's last monitor",
            lambda: MONITORED not in labels(ns),
            timeout=30,
        )
    finally:
        operator.core.delete_namespace(other, propagation_policy="Background")


def test_restart_leaves_no_duplicates_and_keeps_status(operator: Cluster, ns: str) -> None:
    operator.apply(quickstart(ns))
    before = wait_for("monitor Ready", lambda: ready(operator, ns))
    rv = {k: operator.get(a, k, ns, NAME)["metadata"]["resourceVersion"] for a, k in OWNED}
    for proc in list(operator.operators):
        operator.stop_operator(proc)
    operator.start_operator(priority=100, keep_ports=True)  # where its Service would still point
    # The resumed operator reconciles again, at its start and at each resync, and as nothing changed it leaves
    # no trace (the creation's Applied Event was there all along): look after a resync has certainly passed
    time.sleep(RESYNC_SECONDS + 5)
    after = wait_for("still Ready", lambda: ready(operator, ns))
    assert condition(after, "Ready")["lastTransitionTime"] == condition(before, "Ready")["lastTransitionTime"]
    for api_version, kind in OWNED:
        items = operator.list(api_version, kind, ns)
        assert [i["metadata"]["name"] for i in items] == [NAME], f"one {kind}, not duplicates"
        assert items[0]["metadata"]["resourceVersion"] == rv[kind], f"{kind} untouched by the restart"


def test_two_replicas_apply_each_change_once(operator: Cluster, ns: str) -> None:
    second = operator.start_operator(priority=50, name="operator-b", manage_webhook=False)
    try:
        operator.apply(quickstart(ns))
        wait_for("monitor Ready", lambda: ready(operator, ns, generation=1))
        operator.apply(quickstart(ns, alerts=[{"name": "GPUThermalThrottling", "threshold": 80}]))
        wait_for(
            "rule updated", lambda: (r := rule(operator, ns, "GPUThermalThrottling")) and "> 80" in r["expr"]
        )

        def applied_rules() -> list[str]:
            messages = [e.message for e in operator.events(ns, "llama-pretrain", "Applied")]
            return [m for m in messages if "PrometheusRule" in m]

        # the change's Applied Event is posted after the apply that updated the rule
        wait_for("the change's Applied Event", lambda: len(applied_rules()) >= 2)
        time.sleep(5)  # give the second replica every chance to act as well
        applied = applied_rules()
        # one apply for the creation, one for the policy change: not one per replica
        assert len(applied) == 2, applied
        standby = (operator.workdir / "operator-b.log").read_text()
        assert f"{ns}/llama-pretrain: applied" not in standby, "the lower-priority replica stayed passive"
    finally:
        operator.stop_operator(second)


def test_every_receiver_type_and_time_interval_is_accepted_by_the_real_crd(
    operator: Cluster, ns: str
) -> None:
    """The AlertmanagerConfig trainguard renders for a full policy passes prometheus-operator's schema."""
    secret = {"name": "alerting", "key": "url"}
    spec = {
        "receivers": [
            {"name": "oncall-phone", "type": "pagerduty", "roles": ["phone"], "routingKeySecretRef": secret},
            {"name": "im", "type": "slack", "roles": ["im"], "url": "https://hooks.slack.invalid/T0/B0/x", "channel": "#gpu"},
            {"name": "wecom", "type": "wecom", "roles": ["im"], "corpId": "ww1", "agentId": "1000002",
             "apiSecretSecretRef": secret},
            {"name": "ding", "type": "dingtalk", "roles": ["sms"], "url": "http://dingtalk-relay:8060/dingtalk/ops/send"},
            {"name": "feishu", "type": "feishu", "roles": ["im"], "urlSecretRef": secret},
            {"name": "email", "type": "email", "roles": ["email"], "to": "ml-oncall@example.com",
             "from": "trainguard@example.com", "smarthost": "smtp.example.com:587", "authPasswordSecretRef": secret},
            {"name": "ticket", "type": "webhook", "roles": ["ticket"], "url": "http://tickets:8080/hook"},
        ],
        "quietHours": {"enabled": True, "timezone": "Asia/Shanghai", "start": "23:00", "end": "08:00",
                       "weekdays": ["monday", "friday"]},
        "maintenanceWindows": [{"name": "psu-swap", "start": "2026-12-01T22:00:00Z", "end": "2026-12-02T03:30:00Z",
                                "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": "gpu-node-2"}}}],
    }  # fmt: skip
    monitor, policy = quickstart(ns)
    policy["spec"] = spec
    operator.apply([monitor, policy])
    wait_for("monitor Ready with the full policy", lambda: ready(operator, ns), timeout=60)
    amc = operator.get("monitoring.coreos.com/v1alpha1", "AlertmanagerConfig", ns, NAME)
    assert {r["name"] for r in amc["spec"]["receivers"]} >= {
        "oncall-phone",
        "im",
        "wecom",
        "ding",
        "feishu",
        "email",
    }
    intervals = {i["name"]: i for i in amc["spec"]["muteTimeIntervals"]}
    assert set(intervals) == {"quiet-hours", "maintenance-psu-swap"}
    # Asia/Shanghai is UTC+8 all year: 23:00-08:00 local is 15:00-24:00 UTC
    assert intervals["quiet-hours"]["timeIntervals"][0]["times"] == [
        {"startTime": "15:00", "endTime": "24:00"}
    ]
    # the window's nodeSelector was resolved by the operator against the cluster's nodes
    p0 = amc["spec"]["route"]["routes"][0]
    assert p0["routes"][0]["receiver"] == "trainguard-operator", "the operator sees every P0 first, unmuted"
    assert p0["routes"][1]["matchers"] == [{"name": "node", "matchType": "=~", "value": "gpu-node-2"}]
    assert "maintenance-psu-swap" in p0["routes"][1]["routes"][0]["muteTimeIntervals"]
    slack_url = operator.core.read_namespaced_secret(
        f"{NAME}-receivers", ns
    )  # the inline Slack URL, as a Secret
    assert "im-url" in slack_url.data
