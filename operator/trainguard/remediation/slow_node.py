"""Whether the sidecars' control views bear out a StragglerRank claim: a pure decision over what each
rank's sidecar reports of its trainer (GET /v1/control: `step_time_s`, the last step's wall time, and
`allreduce_time_ratio`, the share of it spent in collectives).

In a synchronous gang every rank's step takes as long as the slowest one's, so the wall time alone
cannot tell the straggler: its peers wait for it in the collectives. What a rank computes on its own is
the step minus that wait, step_time_s x (1 - allreduce_time_ratio); the straggler's is the longest. A
rank is confirmed when its own time is at least STRAGGLER_GAP above the median of its peers': a whole
gang slowed (a slow storage, a checkpoint save, an evaluation) moves every rank alike and confirms no
one. A sidecar whose trainer reports no collective share counts its wall time, which only a rank whose
peers do not wait for it (an asynchronous job) can confirm."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

STRAGGLER_GAP = 0.1
"""How far above its peers' median a rank's own time must be (diagnosis/straggler.py's MIN_GAP, and the
catalogue's default threshold for a slow GPU)."""


def own_time(view: Mapping[str, Any]) -> float | None:
    """The seconds a rank's last step spent outside the collectives, or None when its sidecar reports no
    step time."""
    step_time = view.get("step_time_s")
    if isinstance(step_time, bool) or not isinstance(step_time, int | float) or not step_time > 0:
        return None
    ratio = view.get("allreduce_time_ratio")
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0.0 <= ratio <= 1.0:
        ratio = 0.0
    return float(step_time) * (1.0 - float(ratio))


def straggler_evidence(views: Mapping[str, Mapping[str, Any]], pods: list[str]) -> tuple[str, str]:
    """(the confirmed pod, why) when one of `pods` (the claim's pod, or the sidecars on its node) is a
    straggler by its sidecars' views, else ("", why not). `views` holds every rank that answered."""
    times = {pod: t for pod, view in views.items() if (t := own_time(view)) is not None}
    why = ""
    for pod in pods:
        mine = times.get(pod)
        peers = [t for p, t in times.items() if p != pod]
        if mine is None:
            why = f"the sidecar of {pod} reports no step time"
            continue
        if not peers:
            why = f"no peer of {pod} reports a step time to compare with"
            continue
        centre = statistics.median(peers)
        gap = (mine - centre) / centre if centre > 0 else 0.0
        said = f"{pod} computes {mine:.3g}s a step, its {len(peers)} peer(s) {centre:.3g}s (median)"
        if gap >= STRAGGLER_GAP:
            return pod, f"{said}: {gap:.0%} slower"
        why = f"{said}: {gap:.0%}, under the {STRAGGLER_GAP:.0%} that makes a straggler"
    return "", why or "no sidecar of the claimed rank answered"
