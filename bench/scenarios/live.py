"""Synthetic scrape targets served by one HTTP server, and real Prometheus and Alertmanager processes.

Each target is a function of wall time that returns its exposition text; a target listed as down
answers 503, so Prometheus records `up == 0` for it exactly as for a dead exporter. Prometheus picks
the target with the `target` URL parameter (`__param_target` in the scrape config), so one server
stands in for every node of every scenario.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

Render = Callable[[float], str]


def line(name: str, labels: dict[str, str], value: float) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{body}}} {value}\n"


@dataclass
class Targets:
    url: str = ""
    render: dict[str, Render] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set_down(self, target: str, down: bool) -> None:
        with self.lock:
            (self.down.add if down else self.down.discard)(target)


@contextlib.contextmanager
def serve_targets(targets: Targets) -> Iterator[Targets]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            name = parse_qs(urlparse(self.path).query).get("target", [""])[0]
            with targets.lock:
                fn = None if name in targets.down else targets.render.get(name)
            if fn is None:
                self.send_response(503)
                self.end_headers()
                return
            body = fn(time.time()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a scrape that timed out
                self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    targets.url = f"127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="synthetic-targets", daemon=True)
    thread.start()
    try:
        yield targets
    finally:
        server.shutdown()
        server.server_close()


def scrape_config(targets: Targets, identities: dict[str, dict[str, str]], interval: str) -> dict[str, Any]:
    """One static config per target: its identity labels (namespace, training_job, node, pod) become
    the labels of its `up` series, as Kubernetes service discovery would set them."""
    return {
        "job_name": "trainguard",
        # a static target, so no label can come from Kubernetes discovery: the exporter's own identity (the same
        # values as the target's) is honoured here; the PodMonitor sets it from the target and drops the pod's
        # (tests/integration/test_tenant_cannot_pose.py)
        "honor_labels": True,
        "scrape_interval": interval,
        "static_configs": [
            {"targets": [targets.url], "labels": {**labels, "__param_target": name}}
            for name, labels in sorted(identities.items())
        ],
    }


def prometheus_cmd(binary: str, workdir: Path, port: int, config: dict[str, Any]) -> list[str]:
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    return [
        binary,
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]


def alertmanager_cmd(binary: str, workdir: Path, port: int, config: dict[str, Any]) -> list[str]:
    (workdir / "alertmanager.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    return [
        binary,
        f"--config.file={workdir / 'alertmanager.yml'}",
        f"--storage.path={workdir / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
