"""Where a P2's diagnostic report is kept: one ConfigMap per firing alert, owned by its monitor, with a
stable name the P2 rule's annotation derives too (render/prometheus.report_configmap_template), so the
notification names it. Pure: the report pass (diagnosis/passes.py) writes what these build."""

from __future__ import annotations

import re
from typing import Any

from trainguard.catalog import ALERTS_BY_NAME
from trainguard.diagnosis.report import Report
from trainguard.render.prometheus import REPORT_CONFIGMAP_PREFIX

REPORT_SEVERITY = "P2"
CONFIGMAP_LIMIT = 900 * 1024
"""Under a ConfigMap's 1 MiB: past it the HTML (with its plots) is left out and the Markdown kept."""


def report_name(monitor: str, alert: dict[str, str]) -> str:
    """One ConfigMap per firing alert, stable across passes and operator restarts (its existence is the
    record that the report was written), named by the alert's identity: its name and its catalogue
    scope's labels. The P2 rule's `report_configmap` annotation derives the same name in Prometheus
    (render/prometheus.report_configmap_template), so the notification names the ConfigMap."""
    alertname = alert.get("alertname", "")
    spec = ALERTS_BY_NAME.get(alertname)
    scope = spec.scope.labels if spec else ()
    rest = [alert.get(k, "") for k in scope if k not in ("namespace", "training_job")]
    joined = "-".join([REPORT_CONFIGMAP_PREFIX, monitor, alertname, *rest]).lower()
    return re.sub("[^a-z0-9]+", "-", joined)[:253].rstrip("-")


def report_configmap(
    body: dict[str, Any], name: str, alert: dict[str, str], report: Report
) -> dict[str, Any]:
    meta = body["metadata"]
    data = {"report.md": report.markdown}
    if len(report.markdown) + len(report.html) < CONFIGMAP_LIMIT:
        data["report.html"] = report.html
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {
                "app.kubernetes.io/managed-by": "trainguard",
                "trainguard.io/monitor": meta["name"],
                "trainguard.io/alert": alert.get("alertname", "")[:63],
            },
            "ownerReferences": [
                {
                    "apiVersion": body["apiVersion"],
                    "kind": body["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                }
            ],
        },
        "data": data,
    }


def open_command(namespace: str, name: str) -> str:
    """What a person runs to open a report (the Event says it)."""
    return f"kubectl -n {namespace} get configmap {name} -o jsonpath='{{.data.report\\.html}}' > {name}.html"
