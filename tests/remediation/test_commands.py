"""`trainguard ack` against a real Alertmanager, and `trainguard uncordon` through the real Kubernetes
client against a small apiserver stand-in (the e2e test runs it on a real control plane)."""

from __future__ import annotations

import copy
import json
import shutil
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.kube.fakes import merge_patch
from tests.processes import alertmanager, free_port, http_json
from tests.remediation.escalation_inputs import ON, posted
from trainguard.catalog.kubernetes import (
    CORDON_REASON,
    CORDONED_AT,
    CORDONED_BY,
    FAULT_HISTORY,
    FAULTY_TAINT,
    LEMON_LABEL,
    LEMON_REASON,
)
from trainguard.cli import main
from trainguard.remediation.escalation import due, escalated, parse_time
from trainguard.remediation.uncordon import UNCORDON_REASON, UNCORDONED_AT, UNCORDONED_BY

AM_CONFIG = """
route:
  receiver: blackhole
receivers:
  - name: blackhole
"""


@pytest.fixture(scope="module")
def am_binary() -> str:
    path = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if path is None:
        pytest.skip("Alertmanager is not installed (.ci/run installs prometheus-alertmanager)")
    return path


@pytest.fixture
def am_url(am_binary: str, tmp_path: Path) -> Iterator[str]:
    config = tmp_path / "alertmanager.yml"
    config.write_text(AM_CONFIG)
    with alertmanager(am_binary, config, tmp_path) as url:
        yield url


def _silenced(url: str) -> dict[tuple[str, str, str], list[str]]:
    """(alertname, training_job, severity) -> the silences muting it, once Alertmanager processed all."""
    deadline = time.monotonic() + 10
    while True:
        got = http_json(f"{url}/api/v2/alerts")
        if all(a["status"]["state"] != "unprocessed" for a in got) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return {
        (a["labels"]["alertname"], a["labels"]["training_job"], a["labels"]["severity"]): a["status"][
            "silencedBy"
        ]
        for a in got
    }


@pytest.mark.tools
def test_ack_silences_the_alert_of_that_monitor_and_records_who(
    am_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    p1 = posted("GPUThermalThrottling", "P1", 20 * 60, node="n1", gpu="0")
    http_json(
        f"{am_url}/api/v2/alerts",
        [
            p1,
            escalated(p1, ON, time.time()),  # a copy already posted is acknowledged with it
            posted("GPUThermalThrottling", "P1", 20 * 60, training_job="bert-finetune", gpu="0"),
            posted("GPUMemoryCritical", "P1", 20 * 60, gpu="1"),
        ],
    )
    before = time.time()
    code = main(
        [
            "ack",
            "GPUThermalThrottling",
            "--monitor",
            "ml/llama-pretrain",
            "--alertmanager",
            am_url,
            "--for",
            "2h",
            "--comment",
            "fan replaced, watching",
            "--by",
            "alice",
        ]
    )
    assert code == 0
    silence_id = capsys.readouterr().out.strip()
    silence = http_json(f"{am_url}/api/v2/silence/{silence_id}")
    assert silence["status"]["state"] == "active"
    assert silence["createdBy"] == "alice"
    assert silence["comment"].startswith("acknowledged with trainguard ack by alice at ")
    assert silence["comment"].endswith(": fan replaced, watching")
    assert {(m["name"], m["value"], m["isEqual"], m["isRegex"]) for m in silence["matchers"]} == {
        ("alertname", "GPUThermalThrottling", True, False),
        ("namespace", "ml", True, False),
        ("training_job", "llama-pretrain", True, False),
    }
    assert abs((_seconds(silence["endsAt"]) - before) - 7200) < 30

    assert _silenced(am_url) == {
        ("GPUThermalThrottling", "llama-pretrain", "P1"): [silence_id],
        ("GPUThermalThrottling", "llama-pretrain", "P0"): [silence_id],
        ("GPUThermalThrottling", "bert-finetune", "P1"): [],
        ("GPUMemoryCritical", "llama-pretrain", "P1"): [],
    }
    # and so the operator's escalation pass leaves it alone, while the unacknowledged one is due
    alerts = http_json(f"{am_url}/api/v2/alerts")
    todo = due(alerts, ON, time.time(), namespace="ml", training_job="llama-pretrain")
    assert [a["labels"]["alertname"] for a in todo] == ["GPUMemoryCritical"]


def _seconds(text: str) -> float:
    value = parse_time(text)
    assert value is not None
    return value


@pytest.mark.tools
def test_ack_by_defaults_to_user_at_host(
    am_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("USER", "bob")
    monkeypatch.setenv("TRAINGUARD_ALERTMANAGER", am_url)
    monkeypatch.setattr("socket.gethostname", lambda: "laptop")
    assert main(["ack", "CheckpointStale", "--monitor", "ml/llama-pretrain"]) == 0
    silence = http_json(f"{am_url}/api/v2/silence/{capsys.readouterr().out.strip()}")
    assert silence["createdBy"] == "bob@laptop"
    assert abs(_seconds(silence["endsAt"]) - _seconds(silence["startsAt"]) - 4 * 3600) < 2, "4h default"


def test_ack_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINGUARD_ALERTMANAGER", raising=False)
    cases = [
        (["--monitor", "llama-pretrain", "--alertmanager", "http://x"], "NAMESPACE/NAME"),
        (["--monitor", "ml/llama-pretrain"], "--alertmanager URL"),
        (["--monitor", "ml/llama-pretrain", "--alertmanager", "http://x", "--for", "soon"], "--for"),
        (["--monitor", "ml/llama-pretrain", "--alertmanager", "http://x", "--for", "0s"], "--for"),
    ]
    for extra, why in cases:
        with pytest.raises(SystemExit) as exc:
            main(["ack", "GPUThermalThrottling", *extra])
        assert exc.value.code == 2, extra
        assert why in capsys.readouterr().err


def test_ack_without_a_reachable_alertmanager_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SystemExit) as exc:
        main(["ack", "GPUThermalThrottling", "--monitor", "ml/x", "--alertmanager", url, "--by", "a"])
    assert exc.value.code == 1
    assert "could not reach Alertmanager" in capsys.readouterr().err


# ---- uncordon: the real kubernetes client against a stand-in apiserver ----


class FakeApiserver:
    """Serves one node like the apiserver does: GET, a JSON merge PATCH that checks resourceVersion
    (409 on a stale one) and bumps it, and POST of Events; records every request."""

    def __init__(self, node: dict[str, Any]) -> None:
        self.node = node
        self.requests: list[tuple[str, str, str, Any]] = []
        self.conflicts = 0
        """Answer this many PATCHes with 409 first (another writer got in between)."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: Any) -> None:
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _body(self) -> Any:
                return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")

            def do_GET(self) -> None:
                server.requests.append(("GET", self.path, "", None))
                if self.path.split("?")[0] == "/api/v1/nodes":
                    self._send(
                        200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": [server.node]}
                    )
                    return
                name = server.node["metadata"]["name"]
                if self.path.split("?")[0] != f"/api/v1/nodes/{name}":
                    self._send(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
                    return
                self._send(200, server.node)

            def do_PATCH(self) -> None:
                body = self._body()
                server.requests.append(("PATCH", self.path, self.headers["Content-Type"], body))
                if server.conflicts:
                    server.conflicts -= 1
                    server.node["metadata"]["resourceVersion"] = str(
                        int(server.node["metadata"]["resourceVersion"]) + 1
                    )
                wanted = (body.get("metadata") or {}).get("resourceVersion")
                if wanted and wanted != server.node["metadata"]["resourceVersion"]:
                    self._send(409, {"kind": "Status", "code": 409, "reason": "Conflict"})
                    return
                server.node = merge_patch(server.node, body)
                server.node["metadata"]["resourceVersion"] = str(
                    int(server.node["metadata"]["resourceVersion"]) + 1
                )
                self._send(200, server.node)

            def do_POST(self) -> None:
                body = self._body()
                server.requests.append(("POST", self.path, self.headers["Content-Type"], body))
                self._send(201, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def methods(self) -> list[str]:
        return [r[0] for r in self.requests]


def kubeconfig(tmp: Path, server: str) -> Path:
    path = tmp / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "gpu-a",
        "uid": "u-1",
        "resourceVersion": "7",
        "annotations": {CORDONED_AT: "1700000000", CORDONED_BY: "rec-1", CORDON_REASON: "GPUCriticalXid"},
    },
    "spec": {
        "unschedulable": True,
        "taints": [
            {"key": "example.com/maintenance", "value": "planned", "effect": "PreferNoSchedule"},
            {"key": FAULTY_TAINT, "value": "GPUCriticalXid", "effect": "NoSchedule"},
        ],
    },
}


@pytest.fixture
def apiserver() -> Iterator[FakeApiserver]:
    server = FakeApiserver(copy.deepcopy(NODE))
    yield server
    server.httpd.shutdown()


def test_uncordon_returns_a_node_trainguard_cordoned_and_records_who(
    apiserver: FakeApiserver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    apiserver.conflicts = 1
    args = ["uncordon", "gpu-a", "--kubeconfig", str(kubeconfig(tmp_path, apiserver.url)), "--by", "alice"]
    assert main([*args, "--reason", "GPU reseated"]) == 0
    assert "node gpu-a returned to service by alice" in capsys.readouterr().out
    assert apiserver.methods() == ["GET", "PATCH", "GET", "PATCH", "POST"], "a 409 reads again"
    patch = apiserver.requests[3]
    assert patch[2] == "application/merge-patch+json"
    node = apiserver.node
    assert "unschedulable" not in node["spec"]
    assert [t["key"] for t in node["spec"]["taints"]] == ["example.com/maintenance"]
    annotations = node["metadata"]["annotations"]
    assert CORDONED_BY not in annotations and CORDONED_AT not in annotations
    assert annotations[UNCORDONED_BY] == "alice" and annotations[UNCORDON_REASON] == "GPU reseated"
    assert abs(float(annotations[UNCORDONED_AT]) - time.time()) < 30
    _, path, _, event = apiserver.requests[4]
    assert path == "/api/v1/namespaces/default/events"
    assert event["involvedObject"]["kind"] == "Node" and event["involvedObject"]["name"] == "gpu-a"
    assert event["reason"] == "Uncordoned" and "alice" in event["message"]

    # again: already back, nothing written, still success
    assert main(args) == 0
    assert "already back in service" in capsys.readouterr().out
    assert apiserver.methods()[5:] == ["GET"]


def test_uncordon_refuses_a_node_a_person_cordoned(
    apiserver: FakeApiserver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    apiserver.node["metadata"]["annotations"] = {}
    with pytest.raises(SystemExit) as exc:
        main(["uncordon", "gpu-a", "--kubeconfig", str(kubeconfig(tmp_path, apiserver.url)), "--by", "a"])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert "refused: node gpu-a was cordoned by someone other than trainguard" in err
    assert apiserver.methods() == ["GET"], "nothing written"
    assert apiserver.node["spec"]["unschedulable"] is True


def test_uncordon_of_a_missing_node_exits_1(
    apiserver: FakeApiserver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["uncordon", "gpu-z", "--kubeconfig", str(kubeconfig(tmp_path, apiserver.url))])
    assert exc.value.code == 1
    assert "node gpu-z does not exist" in capsys.readouterr().err


LEMON_HISTORY = json.dumps([
    {"ts": 1699000000, "cause": "GPULost", "record": "rec-a"},
    {"ts": 1699500000, "cause": "GPUCriticalXid", "record": "rec-b"},
    {"ts": 1700000000, "cause": "GPUCriticalXid", "record": "rec-1"},
])  # fmt: skip


def test_uncordon_refuses_a_lemon_without_force_and_lists_it_for_repair(
    apiserver: FakeApiserver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta = apiserver.node["metadata"]
    meta["labels"] = {LEMON_LABEL: "true"}
    meta["annotations"] |= {FAULT_HISTORY: LEMON_HISTORY, LEMON_REASON: "3 fault(s) in the last 30d"}
    config = ["--kubeconfig", str(kubeconfig(tmp_path, apiserver.url))]
    with pytest.raises(SystemExit) as exc:
        main(["uncordon", "gpu-a", *config, "--by", "alice"])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert "refused: node gpu-a is a lemon (3 fault(s) in the last 30d)" in err
    assert "rec-a" in err and "--force" in err
    assert apiserver.methods() == ["GET"] and apiserver.node["spec"]["unschedulable"] is True

    assert main(["nodes", "--lemons", *config]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpu-a  LEMON  cordoned  3 fault(s) recorded: 3 fault(s) in the last 30d")
    assert "2023-11-14T22:13:20Z  GPUCriticalXid  (record rec-1)" in out
    assert main(["nodes", *config, "-o", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)["nodes"]
    assert [(n["node"], n["lemon"], len(n["faults"])) for n in listed] == [("gpu-a", True, 3)]

    assert main(["uncordon", "gpu-a", *config, "--by", "alice", "--force"]) == 0
    assert "forced: it is a lemon" in capsys.readouterr().out
    assert "unschedulable" not in apiserver.node["spec"]
    assert apiserver.node["metadata"]["labels"] == {LEMON_LABEL: "true"}, "still a lemon, out of the spares"
    assert apiserver.node["metadata"]["annotations"][FAULT_HISTORY] == LEMON_HISTORY


def test_nodes_says_when_nothing_is_to_repair(
    apiserver: FakeApiserver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = ["--kubeconfig", str(kubeconfig(tmp_path, apiserver.url))]
    assert main(["nodes", "--lemons", *config]) == 0
    assert capsys.readouterr().out == "no lemon: no node to repair\n"
    assert main(["nodes", *config]) == 0  # its current cordon is a fault of its history
    assert capsys.readouterr().out.startswith("gpu-a  ok  cordoned  1 fault(s) recorded\n")
