"""The watch cache against a stand-in apiserver in this process that speaks the list and watch protocol
(paged lists, a watch from the list's resourceVersion, bookmarks, a 410 Gone as an ERROR event and as
an HTTP status): it lists once, follows the events, moves its version on bookmarks, and lists again
only when told the version is gone. The real apiserver is exercised by e2e/test_watch_caches.py and
e2e/test_remediation_cluster.py."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from tests.processes import wait_for
from trainguard.kube import NotSynced
from trainguard.kube.watch import Informer, Resource


def pod(name: str, version: int, ns: str = "ml", **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": str(version), "labels": labels,
                         "managedFields": [{"manager": "kubectl"}]}}  # fmt: skip


class Apiserver:
    """Lists what `objects` holds (two per page), then answers each watch with the next script."""

    def __init__(self) -> None:
        self.objects = [pod("a", 5), pod("b", 6), pod("c", 7, ns="other")]
        self.version = 10
        self.scripts: list[list[dict[str, Any]] | int] = []
        """One per watch: events to stream (then the watch ends), or an HTTP status to answer with."""
        self.requests: list[dict[str, str]] = []
        self.after_gone: list[dict[str, Any]] | None = None
        """What the objects are once the server has said 410 (a relist must see them, not the old ones)."""
        self.gate = threading.Event()
        """Watches past the scripted ones wait here (a quiet cluster), until the test ends."""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                server.requests.append({"path": url.path, "accept": self.headers.get("Accept", ""), **query})
                if query.get("watch") == "true":
                    self._watch()
                else:
                    self._list(query)

            def _send(self, status: int, body: bytes, chunked: bool = False) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not chunked:
                    self.wfile.write(body)

            def _list(self, query: dict[str, str]) -> None:
                start = int(query.get("continue") or 0)
                page = server.objects[start : start + 2]
                more = start + 2 < len(server.objects)
                meta = {
                    "resourceVersion": str(server.version),
                    **({"continue": str(start + 2)} if more else {}),
                }
                self._send(200, json.dumps({"kind": "PodList", "metadata": meta, "items": page}).encode())

            def _watch(self) -> None:
                if not server.scripts:  # a quiet watch: headers at once, as the apiserver sends them
                    self._send(200, b"", chunked=True)
                    self.wfile.flush()
                    server.gate.wait(10)
                    with contextlib.suppress(OSError):  # the client may have gone
                        self.wfile.write(b"0\r\n\r\n")
                    return
                script = server.scripts.pop(0)
                gone = script == 410 or (isinstance(script, list) and any(
                    e.get("type") == "ERROR" and e["object"].get("code") == 410 for e in script))  # fmt: skip
                if gone and server.after_gone is not None:
                    server.objects = server.after_gone
                if isinstance(script, int):
                    self._send(script, json.dumps({"kind": "Status", "code": script}).encode())
                    return
                self._send(200, b"", chunked=True)
                for event in script:
                    line = (json.dumps(event) + "\n").encode()
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def apiserver() -> Iterator[tuple[Apiserver, client.ApiClient]]:
    fake = Apiserver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), fake.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake, client.ApiClient(cfg)
    finally:
        fake.gate.set()
        server.shutdown()
        server.server_close()


def names(informer: Informer, ns: str | None = None) -> list[str]:
    return [o["metadata"]["name"] for o in informer.items(ns, timeout=5)]


def test_it_lists_once_in_pages_then_follows_the_watch_from_the_lists_version(
    apiserver: tuple[Apiserver, client.ApiClient],
) -> None:
    fake, api = apiserver
    fake.scripts = [[
        {"type": "ADDED", "object": pod("d", 11)},
        {"type": "MODIFIED", "object": pod("a", 12, role="trainer")},
        {"type": "DELETED", "object": pod("b", 13)},
        {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "20"}}},
    ]]  # fmt: skip
    informer = Informer(api, Resource("", "v1", "pods")).start()
    try:
        wait_for("the events applied", lambda: names(informer) == ["a", "d", "c"] or None, 10, 0.02)
        assert names(informer, "ml") == ["a", "d"] and names(informer, "other") == ["c"]
        assert informer.version("ml") == (1, 3) and informer.version("other") == (1, 0), "events by namespace"
        assert informer.get("ml", "a", timeout=1)["metadata"]["labels"] == {"role": "trainer"}
        assert "managedFields" not in informer.get("ml", "a", timeout=1)["metadata"], "slimmed"
        watches = wait_for(
            "the second watch", lambda: [r for r in fake.requests if r.get("watch")][1:] or None, 10, 0.02
        )
        lists = [r for r in fake.requests if not r.get("watch")]
        assert len(lists) == 2 and lists[1]["continue"] == "2", "one list, in two pages"
        first_watch = next(r for r in fake.requests if r.get("watch"))
        assert first_watch["resourceVersion"] == "10" and first_watch["allowWatchBookmarks"] == "true"
        assert watches[0]["resourceVersion"] == "20", "the watch goes on from the bookmark, no list"
        assert informer.counts.lists == 2 and informer.counts.relists == 0
    finally:
        informer.stop()


@pytest.mark.parametrize("gone", ["event", "status"])
def test_a_410_gone_lists_again(apiserver: tuple[Apiserver, client.ApiClient], gone: str) -> None:
    fake, api = apiserver
    expired = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    fake.scripts = [[expired] if gone == "event" else 410]
    fake.after_gone = [pod("z", 30)]
    informer = Informer(api, Resource("", "v1", "pods")).start()
    try:
        wait_for("the cache listed again", lambda: names(informer) == ["z"] or None, 10, 0.02)
        first = [r for r in fake.requests if not r.get("watch")][:2]
        assert [r.get("continue") for r in first] == [None, "2"], "the first list, in two pages"
        assert informer.counts.relists == 1 and informer.counts.lists == 3
        assert informer.version("ml") == (2, 0), "a list anew: every reader's kept answer is stale"
    finally:
        informer.stop()


def test_a_read_before_the_first_list_fails_instead_of_answering_nothing() -> None:
    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # the discard port: nothing answers
    informer = Informer(
        client.ApiClient(cfg), Resource("", "v1", "pods"), sleep=lambda s: time.sleep(0.01)
    ).start()
    try:
        with pytest.raises(NotSynced, match="pods"):
            informer.items(timeout=0.2)
        wait_for("the failed list counted", lambda: informer.counts.errors, 10, 0.02)
    finally:
        informer.stop()


def test_a_reconnect_watches_again_from_the_last_version_without_a_list(
    apiserver: tuple[Apiserver, client.ApiClient],
) -> None:
    """What the Lease cache does when it has been quiet too long: drop the connection, watch again."""
    fake, api = apiserver
    fake.scripts = [[{"type": "ADDED", "object": pod("d", 11)}]]
    informer = Informer(api, Resource("", "v1", "pods")).start()
    try:
        wait_for("the event", lambda: "d" in names(informer) or None, 10, 0.02)
        wait_for("a quiet watch open", lambda: len([r for r in fake.requests if r.get("watch")]) >= 2
                 and informer._response is not None, 10, 0.02)  # fmt: skip
        assert informer.heard_s() < 5
        informer.reconnect()
        again = wait_for(
            "a third watch", lambda: [r for r in fake.requests if r.get("watch")][2:] or None, 10, 0.02
        )
        assert again[0]["resourceVersion"] == "11"
        assert informer.counts.lists == 2 and informer.counts.relists == 0
        assert informer.counts.errors == 0, "a reconnect is no error"
    finally:
        informer.stop()


def test_a_watch_that_brings_nothing_for_too_long_is_watched_again_without_a_list(
    apiserver: tuple[Apiserver, client.ApiClient],
) -> None:
    """A connection lost without a word (no bookmark, which the apiserver sends about every minute)."""
    fake, api = apiserver
    informer = Informer(api, Resource("", "v1", "pods"), quiet_s=0.5).start()
    try:
        assert names(informer) == ["a", "b", "c"]
        again = wait_for(
            "a second watch", lambda: [r for r in fake.requests if r.get("watch")][1:] or None, 10, 0.02
        )
        assert again[0]["resourceVersion"] == "10"
        assert informer.counts.quiet >= 1 and informer.counts.lists == 2 and informer.counts.errors == 0
    finally:
        informer.stop()


def test_a_metadata_only_cache_asks_for_partial_object_metadata(
    apiserver: tuple[Apiserver, client.ApiClient],
) -> None:
    """The owned objects' caches (kube/cache.py OWNED) keep no rule: the apiserver is asked for the
    objects' metadata alone, a PartialObjectMetadataList to list and PartialObjectMetadata to watch."""
    fake, api = apiserver
    informer = Informer(api, Resource("monitoring.coreos.com", "v1", "prometheusrules"), metadata_only=True,
                        label_selector="app.kubernetes.io/managed-by=trainguard").start()  # fmt: skip
    try:
        watch = wait_for(
            "the watch", lambda: next((r for r in fake.requests if r.get("watch")), None), 10, 0.02
        )
        listed = next(r for r in fake.requests if not r.get("watch"))
        assert "as=PartialObjectMetadataList;g=meta.k8s.io;v=v1" in listed["accept"]
        assert "as=PartialObjectMetadata;g=meta.k8s.io;v=v1" in watch["accept"]
        assert listed["labelSelector"] == watch["labelSelector"] == "app.kubernetes.io/managed-by=trainguard"
    finally:
        informer.stop()
