"""What people are sent, on a real Alertmanager with the rendered routes and a notification sink: a
rack heating up is one event, a P2 on several pods of a job one mail and one ticket, a page's end is
told to IM only and no other alert's end to anyone, and a P0 that fires again on a node pages again
within seconds."""

from __future__ import annotations

import datetime as dt
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import monitor, policy
from tests.processes import alertmanager, http_json
from tests.render.amconfig import write_config
from tests.render.notification_sink import Notification, Sink, serve
from trainguard.catalog.severity import grade_labels
from trainguard.render import dump_yaml
from trainguard.render.routing import TIMING

pytestmark = pytest.mark.tools

JOB = {"namespace": "ml", "training_job": "llama-pretrain"}


@pytest.fixture(scope="module")
def am_binary() -> str:
    path = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if path is None:
        pytest.skip("Alertmanager is not installed (.ci/run installs prometheus-alertmanager)")
    return path


def _receivers(sink: Sink) -> list[dict[str, Any]]:
    """The default policy's four receivers, sendResolved unset (decided by role and grade), posting to
    the sink."""
    return [
        {"name": "oncall-phone", "type": "webhook", "roles": ["phone", "sms"], "url": sink.receiver_url("phone")},
        {"name": "im", "type": "webhook", "roles": ["im"], "url": sink.receiver_url("im")},
        {"name": "email", "type": "webhook", "roles": ["email"], "url": sink.receiver_url("email")},
        {"name": "ticket", "type": "webhook", "roles": ["ticket"], "url": sink.receiver_url("ticket")},
    ]  # fmt: skip


def _faster(route: dict[str, Any], keep: str) -> dict[str, Any]:
    """group_wait 1s and group_interval 3s on every severity route but `keep`'s, so that the test waits
    seconds where P1 and P2 wait minutes."""
    out = dict(route)
    if "group_wait" in out and f'priority="{keep}"' not in out.get("matchers", []):
        out |= {"group_wait": "1s", "group_interval": "3s"}
    if "routes" in out:
        out["routes"] = [_faster(r, keep) for r in out["routes"]]
    return out


@pytest.fixture
def running(am_binary: str, tmp_path: Path) -> Iterator[tuple[str, Sink]]:
    """A real Alertmanager serving the rendered configuration of the default policy (P0 timing as
    rendered, the others shortened), and the sink its receivers post to."""
    with serve() as sink:
        path = write_config(tmp_path, [(monitor(), policy(**{"spec.receivers": _receivers(sink)}))])
        config = yaml.safe_load(path.read_text())
        config["route"] = _faster(config["route"], keep="P0")
        path.write_text(dump_yaml(config))
        with alertmanager(am_binary, path, tmp_path) as url:
            yield url, sink


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def alert(name: str, severity: str, *, resolved: bool = False, **labels: str) -> dict[str, Any]:
    a: dict[str, Any] = {"labels": {"alertname": name, **JOB, **grade_labels(severity), **labels}}
    if resolved:
        a["endsAt"] = (_now() - dt.timedelta(seconds=1)).isoformat()
    return a


def heat(node: str, *, resolved: bool = False) -> list[dict[str, Any]]:
    where = {"pod": f"llama-pretrain-{node}", "node": node}
    return [
        alert(name, "P1", resolved=resolved, **where, gpu=gpu)
        for name in ("GPUThermalThrottling", "GPUMemoryTemperatureHigh")
        for gpu in ("0", "1")
    ]


def sent(sink: Sink, receiver: str, status: str | None = None) -> list[Notification]:
    return [n for n in sink.notifications() if n.receiver == receiver and status in (None, n.status)]


def names(n: Notification) -> set[str]:
    return {a["labels"]["alertname"] for a in n.alerts if a["status"] == n.status}


def test_a_rack_heating_up_is_one_event_for_im(running: tuple[str, Sink]) -> None:
    """One node's heat (two alerts on two GPUs) is one message; a second node and the rack event that
    follows are the next one, naming the rack; its end, a P1's, is none. Grouped per node and alert,
    with resolved messages, the first node alone was two messages and the end three more."""
    url, sink = running
    http_json(f"{url}/api/v2/alerts", heat("gpu-1"))
    assert sink.wait(lambda s: len(sent(s, "im")) >= 1, timeout=15)
    time.sleep(2)
    rack = alert("RackThermalEvent", "P1", rack="r1")
    http_json(f"{url}/api/v2/alerts", [*heat("gpu-1"), *heat("gpu-2"), rack])
    assert sink.wait(lambda s: len(sent(s, "im")) >= 2, timeout=15)
    time.sleep(4)  # a group tick more: nothing else comes
    expected = [{"GPUThermalThrottling", "GPUMemoryTemperatureHigh"}, {"RackThermalEvent"}]
    assert [names(n) for n in sent(sink, "im")] == expected
    ends = [*heat("gpu-1", resolved=True), *heat("gpu-2", resolved=True)]
    http_json(f"{url}/api/v2/alerts", [*ends, alert("RackThermalEvent", "P1", resolved=True, rack="r1")])
    time.sleep(7)  # two group ticks
    assert len(sent(sink, "im")) == 2


def test_a_p2_on_every_pod_of_a_job_is_one_mail_and_one_ticket_and_its_end_none(
    running: tuple[str, Sink],
) -> None:
    url, sink = running
    pods = [{"pod": f"llama-pretrain-{i}", "node": f"gpu-{i}"} for i in range(3)]
    http_json(f"{url}/api/v2/alerts", [alert("DataLoaderSlow", "P2", **p) for p in pods])
    assert sink.wait(lambda s: len(sent(s, "email")) >= 1 and len(sent(s, "ticket")) >= 1, timeout=15)
    time.sleep(4)  # a group tick more: nothing else comes
    for receiver in ("email", "ticket"):
        [n] = sent(sink, receiver)
        assert {a["labels"]["node"] for a in n.alerts} == {"gpu-0", "gpu-1", "gpu-2"}
    http_json(f"{url}/api/v2/alerts", [alert("DataLoaderSlow", "P2", resolved=True, **p) for p in pods])
    time.sleep(5)
    assert len(sent(sink, "email")) == len(sent(sink, "ticket")) == 1


def test_a_p0_that_fires_again_pages_within_seconds_and_its_end_reaches_im_only(
    running: tuple[str, Sink],
) -> None:
    """A fatal XID on a GPU pages; it resolves (IM is told, the phone is not); the same XID again, while
    its group still holds it, pages after at most the P0 group_interval. With a group_interval of a
    minute it waited up to a minute, the whole budget of a P0 and more."""
    url, sink = running
    xid = {"pod": "llama-pretrain-0", "node": "gpu-1", "gpu": "3"}
    http_json(f"{url}/api/v2/alerts", [alert("GPUCriticalXid", "P0", **xid)])
    assert sink.wait(lambda s: len(sent(s, "phone")) == 1, timeout=15)
    http_json(f"{url}/api/v2/alerts", [alert("GPUCriticalXid", "P0", resolved=True, **xid)])
    assert sink.wait(lambda s: len(sent(s, "im", "resolved")) == 1, timeout=20)
    again = time.monotonic()
    http_json(f"{url}/api/v2/alerts", [alert("GPUCriticalXid", "P0", **xid)])
    assert sink.wait(lambda s: len(sent(s, "phone")) == 2, timeout=75)
    waited = time.monotonic() - again
    interval = float(TIMING["P0"]["group_interval"].removesuffix("s"))
    assert waited <= interval + 2, f"the repeat paged {waited:.1f}s after it fired again"
    # IM's group flushes on its own timer, so its repeat may land a moment after the phone's.
    assert sink.wait(lambda s: len(sent(s, "im")) >= 3, timeout=interval + 2)
    assert sent(sink, "phone", "resolved") == []
    assert [n.status for n in sent(sink, "im")] == ["firing", "resolved", "firing"]
