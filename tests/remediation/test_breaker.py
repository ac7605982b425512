"""The circuit breaker's edge on the leader: it steps on the node cache, pages the platform while a pool's
breaker is open, resolves the page when it re-arms (after the clear time, or at once on a manual reset),
and a replica that stops leading forgets its state (the next leader re-evaluates from the nodes)."""

from __future__ import annotations

from typing import Any

from tests.clock import T0
from trainguard.catalog.alerts import BREAKER_OPEN
from trainguard.catalog.severity import GRADE, MAPPED
from trainguard.remediation.breaker import Breaker, reset_time
from trainguard.remediation.guardrails import BreakerConfig, Guardrails


class Nodes:
    def __init__(self, down: int) -> None:
        self.down = down

    def pools(self, label: str) -> list[tuple[str, str, bool]]:
        assert label == "rack"
        return [(f"n{i}", "r1", i >= self.down) for i in range(8)] + [("m0", "r2", True)]


class Rig:
    def __init__(self, down: int, severity_style: str = GRADE) -> None:
        self.nodes = Nodes(down)
        self.now = T0
        self.leading = True
        self.reset: float | None = None
        self.posted: list[list[dict[str, Any]]] = []
        self.styles: list[str] = []
        self.breaker = Breaker(
            self.nodes,
            Guardrails(pool_label="rack", breaker=BreakerConfig(share=0.3, min_down=3, rearm_s=60)),
            leader=lambda: self.leading,
            reset=lambda: self.reset,
            alertmanager_url="http://am",
            clock=lambda: self.now,
            post=self.post,
            severity_style=severity_style,
        )

    def post(self, url: str, alerts: list[dict[str, Any]], *, severity_style: str) -> None:
        self.posted.append(list(alerts))
        self.styles.append(severity_style)


def test_an_open_breaker_pages_each_pass_and_resolves_when_it_re_arms() -> None:
    rig = Rig(down=4)
    assert rig.breaker.run() == {"open": 1, "rearmed": 0}
    (page,) = rig.posted[-1]
    assert page["labels"] == {
        "alertname": BREAKER_OPEN,
        "priority": "P0",
        "severity": "P0",
        "pool_label": "rack",
        "pool": "r1",
    }
    assert "4 of 8 node(s) look down" in page["annotations"]["summary"]
    assert rig.breaker.evaluate() == {"r1": rig.breaker.state["r1"].reason}
    rig.nodes.down = 0
    rig.now += 30
    rig.breaker.run()
    assert rig.posted[-1][0]["endsAt"] > rig.posted[-1][0]["startsAt"], "still open: refreshed"
    rig.now += 60
    assert rig.breaker.run() == {"open": 0, "rearmed": 1}
    (resolved,) = rig.posted[-1]
    assert resolved["endsAt"] < rig.posted[-2][0]["endsAt"], "resolved now, not held on"
    assert rig.breaker.evaluate() == {}
    count = len(rig.posted)
    rig.breaker.run()
    assert len(rig.posted) == count, "nothing to post once every breaker is armed"


def test_a_re_arm_seen_by_a_signal_is_resolved_on_the_next_pass() -> None:
    rig = Rig(down=4)
    rig.breaker.run()
    rig.nodes.down = 0
    rig.now += 1
    rig.breaker.evaluate()
    rig.now += 61
    assert rig.breaker.evaluate() == {}
    rig.breaker.run()
    assert [a["labels"]["pool"] for a in rig.posted[-1]] == ["r1"]


def test_a_manual_reset_re_arms_on_the_next_pass_once_the_pool_looks_up() -> None:
    rig = Rig(down=4)
    rig.breaker.run()
    rig.nodes.down = 0
    rig.now += 5
    rig.reset = rig.now
    assert rig.breaker.run() == {"open": 0, "rearmed": 1}


def test_a_replica_that_stops_leading_forgets_and_the_next_one_opens_again_from_the_nodes() -> None:
    rig = Rig(down=4)
    rig.breaker.run()
    rig.leading = False
    rig.breaker.run()
    assert rig.breaker.state == {}
    rig.leading = True
    assert rig.breaker.run()["open"] == 1


def test_a_failed_reset_read_keeps_the_breaker_working() -> None:
    rig = Rig(down=4)

    def broken() -> float | None:
        raise OSError("apiserver unreachable")

    rig.breaker.reset = broken
    assert rig.breaker.run()["open"] == 1


def test_the_reset_time_is_read_from_the_configmap_data() -> None:
    assert reset_time({"reset-at": "1700000000"}) == 1_700_000_000.0
    assert reset_time({"reset-at": "soon"}) is None
    assert reset_time(None) is None


def test_the_page_is_posted_in_the_platforms_severity_style() -> None:
    rig = Rig(down=4, severity_style=MAPPED)
    rig.breaker.run()
    assert rig.styles == [MAPPED]
