"""The pod's network namespace, for a Python container that e2e/kubelet.py runs as a local process.

In a pod, a server listening on every interface (0.0.0.0) listens on the pod's own IP, and two pods may
both take port 9443. Local processes share the host's interfaces, so here a bind to the IPv4 wildcard
becomes a bind to the pod's IP ($E2E_POD_IP, the loopback address the fake kubelet gave the pod): the
container's args stay exactly what the apiserver holds. Python imports this module at startup because
the runner puts its folder on PYTHONPATH; an IPv6 wildcard bind fails, naming itself, rather than
taking the host's port."""

from __future__ import annotations

import os
import socket
from typing import Any

_POD_IP = os.environ.get("E2E_POD_IP")

if _POD_IP:
    _bind = socket.socket.bind

    def _pod_bind(self: socket.socket, address: Any) -> None:
        if isinstance(address, tuple) and address[0] in ("", "0.0.0.0"):
            if self.family == socket.AF_INET6:
                raise OSError(f"e2e pod network: an IPv6 wildcard listen ({address!r}) is not stood in for")
            address = (_POD_IP, *address[1:])
        elif isinstance(address, tuple) and address[0] == "::":
            raise OSError(f"e2e pod network: an IPv6 wildcard listen ({address!r}) is not stood in for")
        _bind(self, address)

    socket.socket.bind = _pod_bind  # type: ignore[method-assign]
