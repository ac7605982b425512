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


EVENTS_AUDIENCE = "trainguard.io/events"
"""The audience of the projected ServiceAccount token a sidecar posts its fast-path events with: the
operator's TokenReview asks for exactly this audience, so a token minted for anything else (the
apiserver's own, another service's) is refused, and this one is worth nothing elsewhere."""
EVENTS_TOKEN_EXPIRY_S = 600
"""The projected token's lifetime, the shortest the API allows; the kubelet writes a fresh one at 80%
of it, so a token read from the file is always current."""
