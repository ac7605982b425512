"""Fast-path P0s as alerts for people, not only for the operator.

The Prometheus path pages at worst one exporter poll, one scrape interval, one rule evaluation and the
P0 group_wait after a fault: about 35 s at the 15 s defaults. The sidecar's fast path reaches the
operator within a second, so the operator posts each catalogue P0 it brings straight into
Alertmanager, where it is routed to the job's phone and IM like the rule's alert.

The rule's alert for the same fault arrives later with more labels (the scrape's job and instance,
the GPU's model and UUID, external labels), so Alertmanager cannot merge the two; the posted alert
carries `trainguard_path="fastpath"`, and an inhibition rule (render/inhibition.py) mutes the rule's
copy while it fires, so the fault pages once.
"""

from __future__ import annotations

from typing import Any

from trainguard.catalog import ALERTS_BY_NAME
from trainguard.catalog.severity import grade_labels
from trainguard.remediation.model import Signal, Source
from trainguard.render.inhibition import FASTPATH, PATH_LABEL
from trainguard.times import rfc3339

HOLD_S = 300.0
"""How long the posted alert fires. It is posted once (the sidecar sends a fault once) and must outlast
the arrival of the rule's copy it mutes (a scrape and an evaluation: under a minute at the defaults).
Not much longer: a fault the operator remediated (the pod deleted) must stop repeating, and a fault
that still holds after it pages again through the rule's copy, as a reminder."""


def page_alert(signal: Signal, now: float) -> dict[str, Any] | None:
    """The postable alert for a sidecar's P0, or None for anything else (an Alertmanager signal is
    already an alert; a non-catalogue name is not trainguard's to page)."""
    alert = ALERTS_BY_NAME.get(signal.alertname)
    if signal.source != Source.SIDECAR or not signal.firing or alert is None or signal.severity != "P0":
        return None
    start = min(signal.starts_at, now)
    # the grade in priority whatever the sidecar sent (an older one sends severity alone); the post
    # writes severity in the platform's style
    labels = (
        {k: v for k, v in signal.labels.items() if v} | grade_labels(signal.severity) | {PATH_LABEL: FASTPATH}
    )
    annotations = {
        "summary": f"{alert.summary}: {signal.namespace}/{signal.training_job}",
        "description": signal.annotations.get("summary", alert.condition),
        "probable_cause": alert.probable_cause,
    }
    return {
        "labels": labels,
        "annotations": annotations,
        "startsAt": rfc3339(start),
        "endsAt": rfc3339(start + HOLD_S),
    }
