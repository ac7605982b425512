"""A stand-in apiserver over plain HTTP that answers GETs from a table of paths, and a kubeconfig whose
contexts point at such servers: the commands' --kubeconfig and --context go through the real
Kubernetes client to it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml


@contextmanager
def apiserver(answers: Mapping[str, Any]) -> Iterator[str]:
    """Its base URL while the block runs; a path not in `answers` is a 404 Status."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            found = path in answers
            body = json.dumps(answers[path] if found else {"kind": "Status", "code": 404}).encode()
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def kubeconfig(path: Path, servers: Mapping[str, str], current: str) -> Path:
    """A kubeconfig with one context (and cluster) per server, named as in `servers`."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": url}} for name, url in servers.items()],
        "users": [{"name": "user", "user": {"token": "a-token"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "user"}} for name in servers],
        "current-context": current,
    }
    path.write_text(yaml.safe_dump(config))
    return path
