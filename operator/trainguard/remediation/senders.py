"""The fast path's sender check at the receiver: the TokenReview (through kube/), a brief cache of the
identities it verified, and the reads `identity.admit` decides on (the pod and the monitor from the
watch caches; the pod from the API when the cache does not hold that pod yet).

A verified token is kept, under a hash of it, for `ttl_s` (never past its own expiry), so a burst of
events from one sidecar costs one review; concurrent requests with the same token share one review.
Only verified identities are kept: the pod and the monitor are read again for every event, so a pod
deleted a second ago is refused even while its token is cached.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainguard.api import monitor_of
from trainguard.catalog.events import EVENTS_AUDIENCE
from trainguard.remediation.identity import Refused, SenderIdentity, admit, identity_from_review, token_expiry
from trainguard.remediation.model import Signal

log = logging.getLogger("trainguard.remediation.senders")

Obj = dict[str, Any]

CACHE_TTL_S = 60.0
CACHE_MAX = 4096
REVIEW_WAIT_S = 30.0
"""How long a request waits for the review another request with the same token is making."""


class TokenReviews(Protocol):
    def token_review(self, token: str, audiences: list[str]) -> Obj:
        """The TokenReview's status for `token` asked with spec.audiences=`audiences`."""
        ...


class SenderReads(Protocol):
    def pod(self, namespace: str, name: str) -> Obj | None: ...

    def monitor(self, namespace: str, name: str) -> Obj | None: ...


def token_key(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class _Pending:
    done: threading.Event = field(default_factory=threading.Event)
    identity: SenderIdentity | None = None
    error: Refused | None = None


@dataclass
class Senders:
    reviews: TokenReviews
    reads: SenderReads
    read_pod: Callable[[str, str], Obj | None] | None = None
    """The pod from the API, asked when the cache lacks it or holds another pod of that name."""
    audience: str = EVENTS_AUDIENCE
    ttl_s: float = CACHE_TTL_S
    max_entries: int = CACHE_MAX
    clock: Callable[[], float] = time.time
    """Wall-clock seconds: a cached identity is dropped at its token's `exp` too."""
    reviews_made: int = 0
    _cache: OrderedDict[str, tuple[float, SenderIdentity]] = field(default_factory=OrderedDict)
    _pending: dict[str, _Pending] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def identify(self, token: str) -> SenderIdentity:
        """The sender the token names, from the cache or one TokenReview; Refused(401) for a token that
        names none, Refused(503) when the review cannot be made."""
        key = token_key(token)
        with self._lock:
            now = self.clock()
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                self._cache.move_to_end(key)
                return hit[1]
            if hit is not None:
                del self._cache[key]
            pending = self._pending.get(key)
            leader = pending is None
            if pending is None:
                pending = self._pending[key] = _Pending()
        if not leader:
            if not pending.done.wait(REVIEW_WAIT_S):
                raise Refused(503, "the token's review is taking too long; retry")
            if pending.identity is None:
                raise pending.error or Refused(503, "the token could not be reviewed; retry")
            return pending.identity
        try:
            pending.identity = self._review(token)
        except Refused as refused:
            pending.error = refused
            raise
        finally:
            with self._lock:
                del self._pending[key]
                if pending.identity is not None:
                    self._keep(key, token, pending.identity)
            pending.done.set()
        return pending.identity

    def _review(self, token: str) -> SenderIdentity:
        self.reviews_made += 1
        try:
            status = self.reviews.token_review(token, [self.audience])
        except Exception as exc:
            log.error(
                "cannot review a fast-path sender's token (%s); the sender will retry", type(exc).__name__
            )
            log.debug("the TokenReview failed", exc_info=True)
            raise Refused(503, "the sender's token cannot be reviewed now; retry") from None
        try:
            return identity_from_review(status, self.audience)
        except Refused:
            if status.get("error"):
                log.info("TokenReview refused a fast-path token: %s", str(status["error"])[:300])
            raise

    def _keep(self, key: str, token: str, identity: SenderIdentity) -> None:
        now = self.clock()
        until = now + self.ttl_s
        exp = token_expiry(token)
        if exp is not None:
            until = min(until, exp)
        if until <= now:
            return
        for stale in [k for k, (t, _) in self._cache.items() if t <= now]:
            del self._cache[stale]
        while len(self._cache) >= self.max_entries:
            self._cache.popitem(last=False)
        self._cache[key] = (until, identity)

    def cached(self) -> int:
        with self._lock:
            return len(self._cache)

    def _pod(self, namespace: str, name: str, uid: str) -> Obj | None:
        pod = self.reads.pod(namespace, name)
        if (pod is None or (pod.get("metadata") or {}).get("uid") != uid) and self.read_pod is not None:
            pod = self.read_pod(namespace, name)  # a pod newer than the cache's view of it
        return pod

    def admit(self, token: str, signals: list[Signal]) -> list[Signal]:
        """The signals as taken from this sender (pod and node from its identity), or Refused."""
        identity = self.identify(token)
        out = []
        for signal in signals:
            try:
                pod = self._pod(identity.namespace, identity.pod, identity.pod_uid)
                monitor = monitor_of(self.reads.monitor(signal.namespace, signal.training_job))
            except Exception as exc:
                log.error("cannot read the sender's pod or monitor (%s)", type(exc).__name__)
                raise Refused(503, "the sender's pod cannot be read now; retry") from None
            admitted = admit(identity, signal, pod, monitor)
            if admitted.overwritten:
                log.warning(
                    "fast-path event %s from pod %s/%s claimed %s; taken as the sender's own",
                    signal.alertname,
                    identity.namespace,
                    identity.pod,
                    ", ".join(
                        f"{k}={claim!r} (is {real!r})"
                        for k, (claim, real) in sorted(admitted.overwritten.items())
                    ),
                )
            out.append(admitted.signal)
        return out
