"""The fast-path event: a P0 signal the sidecar posts straight to the operator.

Its fingerprint is computed from the same labels the alert carries, so the operator can recognise
the same fault when it arrives a second time through Prometheus and Alertmanager.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

FINGERPRINT_LABELS: tuple[str, ...] = ("alertname", "namespace", "training_job", "node", "gpu")


def fingerprint(labels: Mapping[str, str]) -> str:
    """Stable across sources: only the identifying labels count, in a fixed order."""
    text = "\n".join(f"{k}={labels.get(k, '')}" for k in FINGERPRINT_LABELS)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
