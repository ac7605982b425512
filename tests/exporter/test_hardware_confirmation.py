"""GET /v1/hardware: the GPU faults a sidecar detected itself, which the operator asks for before it
cordons a node on an alert's word (remediation/executor.py's ConfirmFault). The operator's token only:
what a node saw is not for every pod on the network."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.exporter.running import running_exporter
from trainguard.catalog import control_auth


def get(url: str, token: str | None) -> tuple[int, Any]:
    """GET signed with `token` as the operator signs (catalog/control_auth.py); None: no Authorization."""
    path = urllib.parse.urlsplit(url).path
    signed = (
        control_auth.authorization(token, control_auth.Call("GET", path), now=time.time()) if token else ""
    )
    req = urllib.request.Request(url, headers={"Authorization": signed} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None


def test_the_sidecar_reports_the_gpu_faults_it_saw_to_the_operator_only(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t0k3n\n")
    with running_exporter("--backend", "simulated", "--gpus", "2", "--no-host", "--enable-fault-injection",
                          "--fastpath-token-file", str(token)) as exp:  # fmt: skip
        exp.scrape()
        assert get(f"{exp.url}/v1/hardware", "t0k3n") == (200, {"faults": []}), "nothing seen yet"
        exp.post("/v1/faults", {"fault": "xid-79", "gpu": 1})
        exp.scrape()
        code, body = get(f"{exp.url}/v1/hardware", "t0k3n")
        assert code == 200
        # XID 79 is both: the GPU fell off the bus, and a fatal XID
        assert [(f["alertname"], f["gpu"]) for f in body["faults"]] == [
            ("GPULost", "1"),
            ("GPUCriticalXid", "1"),
        ]
        assert body["faults"][1]["xid"] == "79"
        assert get(f"{exp.url}/v1/hardware", None)[0] == 401
        assert get(f"{exp.url}/v1/hardware", "wrong")[0] == 401
