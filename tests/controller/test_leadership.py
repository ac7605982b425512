"""Which replica acts: kopf's peering rule, read from the ClusterKopfPeering status kopf writes."""

from __future__ import annotations

import datetime as dt

from trainguard.controller.leadership import Leadership, is_leader

NOW = dt.datetime(2026, 12, 1, 3, 0, tzinfo=dt.UTC)


def peer(priority: int, seconds_ago: float = 5, lifetime: int = 60) -> dict[str, object]:
    return {
        "priority": priority,
        "lifetime": lifetime,
        "lastseen": (NOW - dt.timedelta(seconds=seconds_ago)).isoformat(),
    }


def test_the_highest_live_priority_leads() -> None:
    peers = {"me": peer(100), "b": peer(50)}
    assert is_leader(peers, "me", 100, NOW)
    assert not is_leader(peers, "b", 50, NOW)


def test_a_dead_peer_does_not_count() -> None:
    assert is_leader({"me": peer(50), "old": peer(100, seconds_ago=61)}, "me", 50, NOW)
    assert not is_leader({"me": peer(50), "old": peer(100, seconds_ago=59)}, "me", 50, NOW)


def test_equal_priorities_pause_both_as_kopf_does() -> None:
    peers = {"a": peer(7), "b": peer(7)}
    assert not is_leader(peers, "a", 7, NOW) and not is_leader(peers, "b", 7, NOW)


def test_no_peering_status_yet_means_alone() -> None:
    assert is_leader(None, "me", 1, NOW)
    assert is_leader({"me": peer(1)}, "me", 1, NOW)


def test_kopf_timestamps_with_z_and_offsets_parse() -> None:
    peers = {"b": {"priority": 9, "lifetime": 60, "lastseen": "2026-12-01T02:59:30Z"}}
    assert not is_leader(peers, "me", 5, NOW)


def test_an_unreadable_peering_object_means_standby() -> None:
    def broken() -> None:
        raise OSError("apiserver unreachable")

    assert not Leadership(broken, "me", 100, clock=lambda: NOW)()
    assert Leadership(None, "me", 100, clock=lambda: NOW)(), "standalone: the only replica"
    assert Leadership(lambda: {"status": {"b": peer(50)}}, "me", 100, clock=lambda: NOW)()
