"""The sender check at the receiver: one TokenReview per token for a while (a burst costs one), never
past the token's expiry, a bounded cache, the pod read again for every event, and a review that cannot
be made answered 503."""

from __future__ import annotations

import base64
import json
import threading

import pytest

from tests.clock import T0, Clock
from tests.remediation.identities import FakeReads, FakeReviews, monitor_body, pod, review
from trainguard.catalog.events import EVENTS_AUDIENCE
from trainguard.remediation.identity import Refused
from trainguard.remediation.model import Signal
from trainguard.remediation.senders import CACHE_TTL_S, Senders, token_key
from trainguard.remediation.signals import from_fastpath

TOKEN = "token-of-llama-0"


def event(**labels: str) -> Signal:
    base = {"alertname": "GPULost", "severity": "P0", "namespace": "ml", "training_job": "llama",
            "node": "gpu-b", "gpu": "0"}  # fmt: skip
    return from_fastpath({"source": "sidecar", "labels": base | labels, "startsAt": T0}, T0)


def senders(clock: Clock | None = None, **kw: object) -> tuple[Senders, FakeReviews, FakeReads]:
    reviews = FakeReviews({TOKEN: review()})
    reads = FakeReads({("ml", "llama-0"): pod()}, {("ml", "llama"): monitor_body()})
    return Senders(reviews, reads, clock=clock or Clock(), **kw), reviews, reads  # type: ignore[arg-type]


def test_the_review_asks_for_the_trainguard_audience_and_the_signal_takes_the_identitys_node() -> None:
    check, reviews, _ = senders()
    (signal,) = check.admit(TOKEN, [event()])
    assert reviews.calls == [(TOKEN, [EVENTS_AUDIENCE])]
    assert (signal.labels["node"], signal.labels["pod"]) == ("gpu-a", "llama-0")


def test_a_burst_from_one_sidecar_costs_one_review() -> None:
    check, reviews, _ = senders()
    for _ in range(50):
        check.admit(TOKEN, [event()])
    assert len(reviews.calls) == 1
    assert check.cached() == 1


def test_a_cached_token_is_reviewed_again_after_the_ttl() -> None:
    clock = Clock()
    check, reviews, _ = senders(clock)
    check.admit(TOKEN, [event()])
    clock.now += CACHE_TTL_S - 1
    check.admit(TOKEN, [event()])
    assert len(reviews.calls) == 1
    clock.now += 1
    check.admit(TOKEN, [event()])
    assert len(reviews.calls) == 2


def test_a_token_is_never_cached_past_its_own_expiry() -> None:
    def jwt(exp: float) -> str:
        claims = base64.urlsafe_b64encode(json.dumps({"exp": exp}).encode()).rstrip(b"=").decode()
        return f"e30.{claims}.c2ln"

    clock = Clock()
    soon, gone = jwt(T0 + 10), jwt(T0 - 1)
    check, reviews, _ = senders(clock)
    reviews.known |= {soon: review(), gone: review()}
    check.admit(soon, [event()])
    clock.now += 10
    check.admit(soon, [event()])
    assert len(reviews.calls) == 2, "reviewed again once the token's exp passed, before the TTL"
    check.admit(gone, [event()])
    check.admit(gone, [event()])
    assert len(reviews.calls) == 4, "an already expired token is not kept at all"


def test_refusals_are_not_cached_and_the_cache_is_keyed_by_a_hash() -> None:
    check, reviews, _ = senders()
    for _ in range(2):
        with pytest.raises(Refused) as info:
            check.admit("forged", [event()])
        assert info.value.status == 401
    assert len(reviews.calls) == 2
    check.admit(TOKEN, [event()])
    assert list(check._cache) == [token_key(TOKEN)]
    assert TOKEN not in repr(check._cache)


def test_the_cache_holds_at_most_max_entries_dropping_the_least_recent() -> None:
    check, reviews, _ = senders(max_entries=2)
    for t in ("a", "b", "c"):
        reviews.known[t] = review()
    check.admit("a", [event()])
    check.admit("b", [event()])
    check.admit("a", [event()])  # a is now the most recent
    check.admit("c", [event()])
    assert check.cached() == 2
    check.admit("a", [event()])
    check.admit("b", [event()])
    assert [t for t, _ in reviews.calls] == ["a", "b", "c", "b"]


def test_a_pod_deleted_while_its_token_is_cached_is_refused_at_once() -> None:
    check, _, reads = senders()
    check.admit(TOKEN, [event()])
    del reads.pods[("ml", "llama-0")]
    with pytest.raises(Refused) as info:
        check.admit(TOKEN, [event()])
    assert (info.value.status, info.value.reason) == (403, "pod ml/llama-0 does not exist")


def test_a_pod_the_cache_has_not_seen_yet_is_read_from_the_api() -> None:
    asked: list[tuple[str, str]] = []

    def read_pod(namespace: str, name: str) -> dict[str, object]:
        asked.append((namespace, name))
        return pod(uid="uid-new")

    check, reviews, reads = senders(read_pod=read_pod)
    reviews.known[TOKEN] = review(uid="uid-new")  # the cache still holds the pod's predecessor
    (signal,) = check.admit(TOKEN, [event()])
    assert asked == [("ml", "llama-0")]
    assert signal.labels["pod"] == "llama-0"
    reads.pods[("ml", "llama-0")] = pod(uid="uid-new")
    check.admit(TOKEN, [event()])
    assert asked == [("ml", "llama-0")], "a cache that holds the pod is enough"


def test_a_review_that_cannot_be_made_is_503_and_not_cached() -> None:
    check, reviews, _ = senders()
    reviews.fail = True
    with pytest.raises(Refused) as info:
        check.admit(TOKEN, [event()])
    assert info.value.status == 503
    reviews.fail = False
    check.admit(TOKEN, [event()])
    assert len(reviews.calls) == 2


def test_concurrent_requests_with_one_token_share_one_review() -> None:
    check, reviews, _ = senders()
    reviews.gate = threading.Event()
    results: list[str] = []

    def post() -> None:
        (signal,) = check.admit(TOKEN, [event()])
        results.append(signal.labels["node"])

    first = threading.Thread(target=post)
    first.start()
    assert reviews.entered.wait(5)  # the first request's review is in flight
    others = [threading.Thread(target=post) for _ in range(8)]
    for t in others:
        t.start()
    reviews.gate.set()
    for t in [first, *others]:
        t.join(10)
    assert results == ["gpu-a"] * 9
    assert len(reviews.calls) == 1
