"""The CRDs' schema and CEL rules, as a real kube-apiserver applies them: what the models reject, the
apiserver rejects at `kubectl apply` too (docs/rendering.md lists the few exceptions), and valid objects
that use the edges of the rules (prefixed label keys, empty values, a relay URL) still go in."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from e2e.cluster import Cluster

GROUP, VERSION = "trainguard.io", "v1alpha1"

MONITOR: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "TrainingJobMonitor",
    "metadata": {"name": "llama-pretrain"},
    "spec": {
        "selector": {"matchLabels": {"app": "llama-pretrain"}},
        "exporter": {"gpuBackend": "simulated"},
        "policyRefs": [{"name": "default"}],
    },
}

POLICY: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "AlertPolicy",
    "metadata": {"name": "default"},
    "spec": {
        "receivers": [{"name": "im", "type": "webhook", "roles": ["im"], "url": "http://relay.invalid/im"}],
    },
}

RULE = {"name": "MyLossSpike", "expr": "trainguard_train_loss{$selector} > 10", "severity": "P2"}
WINDOW = {"name": "mw", "start": "2026-12-01T02:00:00Z", "end": "2026-12-01T06:00:00Z"}


def changed(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(base)
    for path, value in change.items():
        node = obj
        *parents, last = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return obj


def create(cluster: Cluster, ns: str, obj: dict[str, Any]) -> Any:
    plural = {"TrainingJobMonitor": "trainingjobmonitors", "AlertPolicy": "alertpolicies"}[obj["kind"]]
    return cluster.custom.create_namespaced_custom_object(  # Strict: what kubectl does
        GROUP, VERSION, ns, plural, obj, field_validation="Strict"
    )


REJECTED = [
    pytest.param(
        MONITOR,
        {"spec.selector": {"matchLabels": {"app": 'llama"} or up{x="'}}},
        "spec.selector.matchLabels.app",
        id="monitor-label-value-with-quotes",
    ),
    pytest.param(
        MONITOR,
        {"spec.selector": {"matchLabels": {"app": "llama pretrain"}}},
        "spec.selector.matchLabels.app",
        id="monitor-label-value-with-space",
    ),
    pytest.param(
        MONITOR,
        {"spec.selector": {"matchLabels": {"my app": "x"}}},
        "a label key is an optional DNS-subdomain prefix",
        id="monitor-label-key-with-space",
    ),
    pytest.param(
        MONITOR,
        {"spec.selector": {"matchLabels": {f"{'a' * 254}/app": "x"}}},
        "a label key is an optional DNS-subdomain prefix",
        id="monitor-label-key-prefix-too-long",
    ),
    pytest.param(
        MONITOR,
        {"spec.selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a b"]}]}},
        "spec.selector.matchExpressions[0].values[0]",
        id="monitor-expression-value",
    ),
    pytest.param(
        MONITOR,
        {"spec.selector": {"matchExpressions": [{"key": "-tier", "operator": "Exists"}]}},
        "spec.selector.matchExpressions[0].key",
        id="monitor-expression-key",
    ),
    pytest.param(
        MONITOR,
        {"spec.policyRefs": [{"name": "default"}, {"name": "default"}]},
        "policyRefs must not name the same policy twice",
        id="monitor-duplicate-policy-refs",
    ),
    pytest.param(
        MONITOR,
        {"metadata.name": "llama.pretrain"},
        "metadata.name must be a DNS label",
        id="monitor-name-with-a-dot",
    ),
    pytest.param(
        POLICY,
        {"spec.alerts": [{"name": "GPUNodeDown", "for": "1m"}, {"name": "GPUNodeDown", "severity": "P1"}]},
        "each alert may be overridden once",
        id="policy-duplicate-alert-overrides",
    ),
    pytest.param(
        POLICY,
        {"spec.customRules": [RULE | {"labels": {"team": "ml", "severity": "P0"}}]},
        "labels must not set",
        id="policy-reserved-custom-rule-label",
    ),
    pytest.param(
        POLICY,
        {"spec.customRules": [RULE | {"labels": {"training_job": "other"}}]},
        "labels must not set",
        id="policy-custom-rule-sets-training-job",
    ),
    pytest.param(
        POLICY,
        {"spec.customRules": [RULE | {"labels": {"on-call": "ml"}}]},
        "label names must be Prometheus label names",
        id="policy-custom-rule-label-name-not-prometheus",
    ),
    pytest.param(
        POLICY,
        {"spec.customRules": [RULE | {"name": "GPUNodeDown"}]},
        "name is a catalogue alert",
        id="policy-custom-rule-named-like-a-catalogue-alert",
    ),
    pytest.param(
        POLICY,
        {
            "spec.receivers": [
                {
                    "name": "ding",
                    "type": "dingtalk",
                    "url": "https://oapi.dingtalk.com/robot/send?access_token=x",
                }
            ]
        },
        "a relay",
        id="policy-dingtalk-bot-api-url",
    ),
    pytest.param(
        POLICY,
        {
            "spec.receivers": [
                {"name": "lark", "type": "feishu", "url": "https://Open.Feishu.cn/open-apis/bot/v2/hook/x"}
            ]
        },
        "a relay",
        id="policy-feishu-bot-api-url",
    ),
    pytest.param(
        POLICY,
        {"spec.maintenanceWindows": [WINDOW | {"nodeSelector": {"matchLabels": {"pool": "gpu a"}}}]},
        "spec.maintenanceWindows[0].nodeSelector.matchLabels.pool",
        id="policy-node-selector-label-value",
    ),
    pytest.param(
        POLICY,
        {"spec.maintenanceWindows": [WINDOW | {"nodeSelector": {}}]},
        "name the nodes",
        id="policy-window-with-an-empty-node-selector",
    ),
]


@pytest.mark.parametrize(("base", "change", "fragment"), REJECTED)
def test_the_apiserver_rejects_what_the_model_rejects(
    cluster: Cluster, ns: str, base: dict[str, Any], change: dict[str, Any], fragment: str
) -> None:
    obj = changed(base, change)
    with pytest.raises(ApiException) as exc:
        create(cluster, ns, obj)
    body = str(exc.value.body)
    assert exc.value.status == 422, body
    assert fragment in body, body


ACCEPTED = [
    pytest.param(
        MONITOR,
        {
            "spec.selector": {
                "matchLabels": {"app.kubernetes.io/name": "llama-pretrain", "track": ""},
                "matchExpressions": [
                    {"key": f"{'a' * 253}/{'b' * 63}", "operator": "NotIn", "values": ["", "v1.2_3"]}
                ],
            }
        },
        id="monitor-label-syntax-edges",
    ),
    pytest.param(
        POLICY,
        {
            "spec.alerts": [
                {"name": "GPUNodeDown", "for": "1m"},
                {"name": "GPUMemoryHigh", "enabled": False},
            ],
            "spec.customRules": [RULE | {"labels": {"team": "ml"}}],
            "spec.receivers": [
                {
                    "name": "ding",
                    "type": "dingtalk",
                    "url": "http://prometheus-webhook-dingtalk.monitoring:8060/dingtalk/ops/send",
                },
                {"name": "lark", "type": "feishu", "url": "https://open.feishu.cn.relay.example/hook"},
            ],
            "spec.maintenanceWindows": [WINDOW | {"nodeSelector": {"matchLabels": {"pool": "gpu-a"}}}],
        },
        id="policy-with-every-checked-list",
    ),
]


@pytest.mark.parametrize(("base", "change"), ACCEPTED)
def test_the_apiserver_accepts_valid_objects_at_the_edges(
    cluster: Cluster, ns: str, base: dict[str, Any], change: dict[str, Any]
) -> None:
    created = create(cluster, ns, changed(base, change))
    assert created["metadata"]["name"] == base["metadata"]["name"]
