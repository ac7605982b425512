"""The chart's longTermStorage.remoteWrite as the tests set it (tests/packaging/test_chart_remote_write.py,
e2e/test_kube_prometheus_stack_values.py): the --set flags for a store's URLs, and the ConfigMap
trainguard-remote-write the chart renders from them."""

from __future__ import annotations

from typing import Any

from tests.packaging.chart import objects, template

URL = "http://victoria-metrics.monitoring:8428/api/v1/write"
EVENTS_URL = "https://vm-events.monitoring:8428/api/v1/write"


def remote_write_settings(url: str, events_url: str | None) -> list[str]:
    """helm --set flags: the store's URL, and the events' own store if they have one."""
    sets = [f"longTermStorage.remoteWrite.url={url}"]
    if events_url is not None:
        sets.append(f"longTermStorage.remoteWrite.eventsUrl={events_url}")
    return sets


def remote_write_configmap(helm: str, *sets: str) -> dict[str, Any]:
    """The one ConfigMap trainguard-remote-write the chart renders with `sets`."""
    docs = objects(template(helm, *sets))
    found = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "trainguard-remote-write"
    ]
    assert len(found) == 1, f"expected the ConfigMap trainguard-remote-write, rendered {len(found)}"
    return found[0]
