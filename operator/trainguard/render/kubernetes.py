"""The Kubernetes objects reconciled for one monitor: PrometheusRule, AlertmanagerConfig, PodMonitor
and, when needed, a Secret with receiver values an AlertmanagerConfig may only read from a Secret."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.kubernetes import MANAGED_LABELS
from trainguard.catalog.severity import GRADE
from trainguard.render.alertmanager import OperatorReceiver, alertmanager_config_spec
from trainguard.render.longterm import DEFAULT_INTERVAL, aggregate_group
from trainguard.render.policy import EffectivePolicy
from trainguard.render.prometheus import rule_group
from trainguard.render.receivers import inline_secret_data
from trainguard.render.shared import PER_MONITOR, SHARED, SHARED_RULE_NAME, monitor_groups, shared_groups

METRICS_PORT_NAME = "tg-metrics"
"""Name of the sidecar's container port; the PodMonitor scrapes it by name."""

Obj = dict[str, Any]


def object_name(monitor: TrainingJobMonitor) -> str:
    return f"trainguard-{monitor.name}"


def labels(monitor: TrainingJobMonitor) -> dict[str, str]:
    """managed-by=trainguard on each, Secrets included: the only Secrets the operator may write
    (deploy/secret-write-policy.yaml)."""
    return {**MANAGED_LABELS, "trainguard.io/training-job": monitor.name}


def _metadata(monitor: TrainingJobMonitor, name: str | None = None) -> Obj:
    meta: Obj = {
        "name": name or object_name(monitor),
        "namespace": monitor.namespace,
        "labels": labels(monitor),
    }
    if monitor.metadata.uid:
        # without a uid (rendered from a file) the owner is unknown; the operator sets it
        meta["ownerReferences"] = [monitor.owner_reference()]
    return meta


PARTIAL_RESPONSE = "warn"
"""Each PrometheusRule group's `partial_response_strategy`, read by a ThanosRuler only (prometheus-operator
removes it for a Prometheus). A Ruler evaluates through Thanos Query; Thanos's default, abort, fails the
evaluation when one store does not answer, so a receiver's death fails the rounds until Query drops it
(a round in e2e/test_distributed_rules.py), and an alert whose `for` ends then fires a round late. With
replicated receivers the other copy answers: warn evaluates on it (docs/distributed.md)."""


def _rule_groups(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**g, "partial_response_strategy": PARTIAL_RESPONSE} for g in groups]


def prometheus_rule(
    monitor: TrainingJobMonitor,
    policy: EffectivePolicy,
    aggregate_interval: str = DEFAULT_INTERVAL,
    severity_style: str = GRADE,
    rule_form: str = PER_MONITOR,
) -> Obj:
    """The monitor's alerting group and its long-term aggregate group (render.longterm), so that what the
    operator applies and what `trainguard render` prints are the same object. With `rule_form` shared,
    only what the shared group cannot judge (render/shared.py's monitor_groups) besides the aggregates."""
    alerting = (
        monitor_groups(monitor, policy, severity_style)
        if rule_form == SHARED
        else [rule_group(monitor, policy, severity_style)]
    )
    groups = [*alerting, aggregate_group(monitor, aggregate_interval)]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": _metadata(monitor),
        "spec": {"groups": _rule_groups(groups)},
    }


def shared_prometheus_rule(
    namespace: str,
    severity_style: str = GRADE,
    object_labels: Mapping[str, str] | None = None,
    parts: int = 1,
    lookups: bool = False,
) -> Obj:
    """The shared group (render/shared.py), once for the cluster, in the operator's namespace; in
    `parts` groups at most (--shared-rule-groups), its annotations looked up with `lookups`
    (--shared-annotation-lookups)."""
    return with_labels(
        [
            {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "PrometheusRule",
                "metadata": {
                    "name": SHARED_RULE_NAME,
                    "namespace": namespace,
                    "labels": dict(MANAGED_LABELS),
                },
                "spec": {"groups": _rule_groups(shared_groups(severity_style, parts, lookups))},
            }
        ],
        object_labels or {},
    )[0]


def receiver_secret_name(monitor: TrainingJobMonitor) -> str:
    return f"{object_name(monitor)}-receivers"


def receiver_secret(monitor: TrainingJobMonitor, policy: EffectivePolicy) -> Obj | None:
    data = inline_secret_data(policy)
    if not data:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(monitor, receiver_secret_name(monitor)),
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(data.items())},
    }


def emptied_receiver_secret(monitor: TrainingJobMonitor) -> Obj:
    """The receiver Secret with no data: applied server-side, it removes the values trainguard wrote
    once the policy no longer has inline ones (the operator may write Secrets, never delete them)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(monitor, receiver_secret_name(monitor)),
        "type": "Opaque",
    }


def fastpath_secret_name(monitor: TrainingJobMonitor) -> str:
    return f"{object_name(monitor)}-fastpath"


FASTPATH_TOKEN_KEY = "token"
"""The sidecars' bearer token for the operator's /v1/events (the only key the sidecar mounts besides the CA)."""
ALERTS_TOKEN_KEY = "alertmanager-token"
"""Alertmanager's bearer token for the operator's /v1/alerts (never mounted into a pod)."""
CA_KEY = "ca.crt"


def fastpath_secret(
    monitor: TrainingJobMonitor, token: str, alerts_token: str | None = None, ca: str | None = None
) -> Obj:
    """The credentials between the job and the operator's receiver. The caller derives the tokens (the
    operator's key stays outside the renderer); a token lets its holder post for this monitor only."""
    data = {FASTPATH_TOKEN_KEY: token}
    if alerts_token:
        data[ALERTS_TOKEN_KEY] = alerts_token
    if ca:
        data[CA_KEY] = ca
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(monitor, fastpath_secret_name(monitor)),
        "type": "Opaque",
        "stringData": data,
    }


def operator_receiver(monitor: TrainingJobMonitor, url: str, with_ca: bool) -> OperatorReceiver:
    return OperatorReceiver(
        url=url,
        secret=fastpath_secret_name(monitor),
        token_key=ALERTS_TOKEN_KEY,
        ca_key=CA_KEY if with_ca else None,
    )


def alertmanager_config(
    monitor: TrainingJobMonitor,
    policy: EffectivePolicy,
    resolved_nodes: dict[str, list[str]] | None = None,
    operator: OperatorReceiver | None = None,
) -> Obj:
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "AlertmanagerConfig",
        "metadata": _metadata(monitor),
        "spec": alertmanager_config_spec(
            monitor, policy, receiver_secret_name(monitor), resolved_nodes, operator
        ),
    }


TARGET_IDENTITY: tuple[tuple[str, str | None], ...] = (
    ("namespace", "__meta_kubernetes_namespace"),
    ("pod", "__meta_kubernetes_pod_name"),
    ("node", "__meta_kubernetes_pod_node_name"),
    ("training_job", None),
)
"""Each identity label of the metric contract (COMMON_LABELS) and the target's discovery label it is set
from; training_job is the monitor's name (a PodMonitor selects one monitor's pods in its own namespace)."""

TARGET_OWNED_LABELS: tuple[str, ...] = (
    *(name for name, _ in TARGET_IDENTITY),
    *("container", "endpoint", "job", "instance"),
)
"""Labels the scrape target sets on every series: the identity, and what prometheus-operator sets on a
PodMonitor's targets. A scraped label of one of these names is renamed `exported_<name>` by Prometheus
(`exported_exported_<name>` if that is taken too) and dropped, so no rule or dashboard can read it."""

EXPORTED_TARGET_LABELS = f"(exported_)+({'|'.join(TARGET_OWNED_LABELS)})"
"""The label names a scraped series may carry that claim what its target owns (a relabel regex, which
Prometheus anchors at both ends)."""


def pod_monitor(monitor: TrainingJobMonitor) -> Obj:
    """Scrapes the sidecars. Target labels are the truth: no honorLabels, and the relabelings set
    `namespace`, `pod`, `node` and `training_job` on every series from the scrape target, so a pod of one
    tenant cannot expose series labelled as another tenant's job (whose rules would fire, and whose
    AlertmanagerConfig would send the alert to the operator); metricRelabelings drop what the sidecar
    itself claimed under those names. `up` gets the same labels, which GPUNodeDown reads."""
    relabelings: list[Obj] = []
    for label, source in TARGET_IDENTITY:
        rule: Obj = {"targetLabel": label, "action": "replace"}
        if source is None:
            rule["replacement"] = monitor.name
        else:
            rule["sourceLabels"] = [source]
        relabelings.append(rule)
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _metadata(monitor),
        "spec": {
            "selector": monitor.spec.selector.to_kubernetes(),
            "podMetricsEndpoints": [
                {
                    "port": METRICS_PORT_NAME,
                    "path": "/metrics",
                    "interval": monitor.spec.exporter.scrape_interval,
                    "relabelings": relabelings,
                    "metricRelabelings": [{"regex": EXPORTED_TARGET_LABELS, "action": "labeldrop"}],
                }
            ],
        },
    }


def monitor_objects(
    monitor: TrainingJobMonitor,
    policy: EffectivePolicy,
    resolved_nodes: dict[str, list[str]] | None = None,
    operator: OperatorReceiver | None = None,
    aggregate_interval: str = DEFAULT_INTERVAL,
    *,
    severity_style: str = GRADE,
    object_labels: Mapping[str, str] | None = None,
    rule_form: str = PER_MONITOR,
) -> list[Obj]:
    """Everything one monitor owns, in apply order (the Secret before the config that reads it). With
    `operator`, Alertmanager also posts the job's P0 and P1 alerts to the operator's receiver. The
    rules' `severity` is in `severity_style`; the routes match `priority`, the same in every style. With
    `object_labels`, each object carries them too (with_labels)."""
    objs = [prometheus_rule(monitor, policy, aggregate_interval, severity_style, rule_form)]
    secret = receiver_secret(monitor, policy)
    if secret is not None:
        objs.append(secret)
    objs += [alertmanager_config(monitor, policy, resolved_nodes, operator), pod_monitor(monitor)]
    return with_labels(objs, object_labels or {})


KUBE_PROMETHEUS_STACK_LABELS = {"release": "kube-prometheus-stack"}
"""What a kube-prometheus-stack release named kube-prometheus-stack selects PrometheusRules, PodMonitors
and ServiceMonitors by, with its chart's defaults (`*SelectorNilUsesHelmValues: true`)."""


def with_labels(objs: list[Obj], extra: Mapping[str, str]) -> list[Obj]:
    """The platform's labels on every object (what its Prometheus's ruleSelector and podMonitorSelector
    match, such as kube-prometheus-stack's `release`); trainguard's own labels win, so that the Secret-write
    policy and the owner lookups keep working whatever the platform sets."""
    if not extra:
        return objs
    out = []
    for obj in objs:
        meta = obj["metadata"]
        out.append({**obj, "metadata": {**meta, "labels": {**extra, **(meta.get("labels") or {})}}})
    return out
