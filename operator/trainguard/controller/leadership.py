"""Which replica acts. kopf's peering pauses every replica but the one with the highest priority; the
operator's own loops (the resync, the pod count) and, later, its remediation must follow the same rule,
so it is read from the same ClusterKopfPeering object kopf keeps, with kopf's criteria.

A decision is pure (the peering status, this replica's identity and priority, the time); reading the
object is the caller's.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("trainguard.leadership")


def _lastseen(value: Any, now: dt.datetime) -> dt.datetime:
    if not isinstance(value, str):
        return now  # kopf too counts a peer without lastseen as just seen
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return now
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def is_leader(peers: Mapping[str, Any] | None, identity: str, priority: int, now: dt.datetime) -> bool:
    """kopf's rule: pause while another live peer has a higher or the same priority (equal priorities
    pause both, as kopf does, so that two replicas never act at once)."""
    for peer_id, info in (peers or {}).items():
        if peer_id == identity or not isinstance(info, Mapping):
            continue
        lifetime = dt.timedelta(seconds=int(info.get("lifetime", 60)))
        if _lastseen(info.get("lastseen"), now) + lifetime <= now:
            continue  # dead: its keepalives stopped
        if int(info.get("priority", 0)) >= priority:
            return False
    return True


class Leadership:
    """Asks the API each time; an error means "not leader": acting twice is worse than a late act."""

    def __init__(
        self,
        read_peering: Callable[[], Mapping[str, Any] | None] | None,
        identity: str,
        priority: int,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.read_peering = read_peering
        self.identity = identity
        self.priority = priority
        self.clock = clock
        self._last: bool | None = None

    def __call__(self) -> bool:
        if self.read_peering is None:  # standalone: the only replica
            return True
        try:
            peering = self.read_peering()
        except Exception as exc:
            log.warning("cannot read the peering object, acting as a standby: %s", exc)
            return False
        leader = is_leader((peering or {}).get("status"), self.identity, self.priority, self.clock())
        if leader != self._last:
            log.info("this replica (%s, priority %d) is %s", self.identity, self.priority,
                     "the leader" if leader else "a standby")  # fmt: skip
            self._last = leader
        return leader
