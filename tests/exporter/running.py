"""An exporter running in this process on free loopback ports, for scrape and SDK tests."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.exposition import Samples, scrape, value
from tests.processes import free_port, http_json
from trainguard.exporter.app import Exporter
from trainguard.exporter.flags import add_arguments
from trainguard.exporter.main import build
from trainguard.exporter.server import serve


@dataclass
class Running:
    exporter: Exporter
    url: str
    socket: str | None

    def scrape(self) -> Samples:
        self.exporter.render()
        return scrape(self.url)

    def value(self, name: str, **labels: str) -> float | None:
        return value(self.scrape(), name, **labels)

    def post(self, path: str, body: Any) -> Any:
        return http_json(f"{self.url}{path}", body)

    def delete(self, path: str) -> Any:
        return http_json(f"{self.url}{path}", method="DELETE")


@contextlib.contextmanager
def running_exporter(*flags: str, socket_path: str | None = None, sdk_tcp: bool = True) -> Iterator[Running]:
    """sdk_tcp: serve the SDK's endpoints on the loopback TCP port too (--sdk-tcp), as most tests post
    reports there; False keeps them on the unix socket only, as in a pod."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--namespace", "ml", "--pod", "llama-0", "--node", "gpu-node-1",
                              "--training-job", "llama-pretrain", *(["--sdk-tcp"] if sdk_tcp else []), *flags])  # fmt: skip
    exporter = build(args)
    exporter.start()
    port = free_port()
    servers = serve(exporter, "127.0.0.1", port, socket_path=socket_path,
                    fault_injection=args.enable_fault_injection, token_file=args.fastpath_token_file,
                    sdk_tcp=args.sdk_tcp)  # fmt: skip
    try:
        yield Running(exporter, f"http://127.0.0.1:{port}", socket_path)
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()
        exporter.stop()
