"""The MutatingWebhookConfiguration for sidecar injection, and the ValidatingWebhookConfiguration of
the eviction gate (remediation/maintenance.py: an eviction of a monitored job's pod from a node going
into maintenance waits, HTTP 429, until the job's checkpoint is taken).

failurePolicy Ignore: a broken or absent operator never stops training pods from starting. The
apiserver calls it only for the pods of namespaces labelled trainguard.io/monitored=true, which the
operator keeps on every namespace that holds a TrainingJobMonitor (controller/namespace_labels.py):
a pod elsewhere cannot concern a monitor (a monitor selects pods of its own namespace), and its
creation does not wait on the operator. The operator's own namespace, kube-system and
kube-node-lease are never mutated, and a pod opts out with the label `trainguard.io/inject: disabled`.
The eviction gate is failurePolicy Ignore too, for the same namespaces: an absent operator never holds a
drain.
"""

from __future__ import annotations

import base64
from typing import Any

from trainguard.catalog.kubernetes import MONITORED, MONITORED_VALUE

WEBHOOK_CONFIG_NAME = "trainguard-sidecar-injector"
WEBHOOK_PATH = "/inject-sidecar"
EVICTION_CONFIG_NAME = "trainguard-eviction-gate"
EVICTION_PATH = "/hold-eviction"


def excluded_namespaces(operator_namespace: str) -> list[str]:
    """The namespaces never mutated, whatever they hold (the operator labels none of them)."""
    return sorted({operator_namespace, "kube-system", "kube-node-lease"})


def mutating_webhook_configuration(
    ca_bundle: bytes,
    *,
    url: str | None = None,
    service: tuple[str, str, int] | None = None,
    operator_namespace: str = "trainguard-system",
    timeout_seconds: int = 5,
) -> dict[str, Any]:
    """`url` (https://host:port) for an operator outside the cluster, else `service` (namespace, name, port)."""
    client = _client(ca_bundle, url, service, WEBHOOK_PATH)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIG_NAME, "labels": {"app.kubernetes.io/part-of": "trainguard"}},
        "webhooks": [
            {
                "name": "sidecar.trainguard.io",
                "admissionReviewVersions": ["v1"],
                "clientConfig": client,
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "operations": ["CREATE"],
                        "scope": "Namespaced",
                    }
                ],
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "reinvocationPolicy": "Never",
                "matchPolicy": "Equivalent",
                "timeoutSeconds": timeout_seconds,
                "namespaceSelector": _namespaces(operator_namespace),
                "objectSelector": {
                    "matchExpressions": [
                        {"key": "trainguard.io/inject", "operator": "NotIn", "values": ["disabled"]}
                    ]
                },
            }
        ],
    }


def _client(
    ca_bundle: bytes, url: str | None, service: tuple[str, str, int] | None, path: str
) -> dict[str, Any]:
    if (url is None) == (service is None):
        raise ValueError("give exactly one of url or service")
    client: dict[str, Any] = {"caBundle": base64.b64encode(ca_bundle).decode()}
    if url is not None:
        client["url"] = url.rstrip("/") + path
    else:
        assert service is not None
        ns, name, port = service
        client["service"] = {"namespace": ns, "name": name, "port": port, "path": path}
    return client


def _namespaces(operator_namespace: str) -> dict[str, Any]:
    return {
        "matchLabels": {MONITORED: MONITORED_VALUE},
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": excluded_namespaces(operator_namespace),
            }
        ],
    }


def eviction_webhook_configuration(
    ca_bundle: bytes,
    *,
    url: str | None = None,
    service: tuple[str, str, int] | None = None,
    operator_namespace: str = "trainguard-system",
    timeout_seconds: int = 5,
) -> dict[str, Any]:
    """The eviction gate: CREATE of pods/eviction in the monitored namespaces. It denies with 429 while a
    job checkpoints before leaving a node under maintenance, which `kubectl drain` retries; Ignore on
    any webhook error, so the operator down never holds a drain."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": EVICTION_CONFIG_NAME, "labels": {"app.kubernetes.io/part-of": "trainguard"}},
        "webhooks": [
            {
                "name": "eviction.trainguard.io",
                "admissionReviewVersions": ["v1"],
                "clientConfig": _client(ca_bundle, url, service, EVICTION_PATH),
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods/eviction"],
                        "operations": ["CREATE"],
                        "scope": "Namespaced",
                    }
                ],
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "matchPolicy": "Equivalent",
                "timeoutSeconds": timeout_seconds,
                "namespaceSelector": _namespaces(operator_namespace),
            }
        ],
    }
