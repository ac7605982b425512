"""The executor clears the workload's resume-from pointer with a None value: through the real
kube.Kube and kubernetes client, that must reach the apiserver as a JSON merge patch
with `null` (which removes the key), not as a dropped key or the string "None". Only the apiserver is
stood in for: an HTTP server in this process that records what it is sent."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from trainguard.catalog.kubernetes import RESUME_FROM
from trainguard.kube.client import MERGE_PATCH, Kube


@pytest.fixture
def apiserver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_PATCH(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(
                {"path": self.path, "type": self.headers.get("Content-Type"), "body": json.loads(body)}
            )
            answer = json.dumps({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(answer.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_none_annotation_reaches_the_apiserver_as_a_merge_patch_null(
    apiserver: tuple[str, list[dict[str, Any]]],
) -> None:
    url, seen = apiserver
    config = client.Configuration()
    config.host = url
    edge = Kube(client.ApiClient(config), timeout=5)

    edge.annotate_workload("ml", "batch/v1", "Job", "llama-pretrain", {RESUME_FROM: None})

    assert seen == [
        {
            "path": "/apis/batch/v1/namespaces/ml/jobs/llama-pretrain",
            "type": MERGE_PATCH,
            "body": {"metadata": {"annotations": {RESUME_FROM: None}}},
        }
    ]
