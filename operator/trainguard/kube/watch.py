"""A watch-backed cache of one kind, as client-go's reflector keeps one: list once, then watch from the
list's resourceVersion with bookmarks, and list again only when the apiserver says the version is too
old (410 Gone). Readers get copies of what the last event left, never a call to the API.

It runs on a thread of its own, independent of kopf: a standby replica's kopf watches are paused, but
its admission webhook still answers, and its caches must be warm the moment it leads.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from trainguard.kube.errors import ApiError, NotSynced
from trainguard.kube.objects import slim

log = logging.getLogger("trainguard.kube.watch")

Obj = dict[str, Any]
Key = tuple[str, str]

LIST_PAGE = 500
WATCH_TIMEOUT_S = 300
"""The server ends each watch after this long (a little jitter added); the cache watches again from
the last version it saw, bookmarks included, so nothing is listed again."""
QUIET_S = 150.0
"""A watch that brings nothing for this long has lost its connection: the apiserver sends a bookmark
about every minute on a quiet watch (seen at 60 s intervals on the local control plane), so the read
gives up and the cache watches again from its last version."""
BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class Resource:
    """One kind's collection: cluster-wide, or in one namespace."""

    group: str
    version: str
    plural: str
    namespace: str | None = None

    @property
    def path(self) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        where = f"/namespaces/{self.namespace}" if self.namespace else ""
        return f"{base}{where}/{self.plural}"

    def __str__(self) -> str:
        kind = self.plural if not self.group else f"{self.plural}.{self.group}"
        return kind if not self.namespace else f"{kind} in {self.namespace}"


class Gone(Exception):
    """410: the version to watch from is older than the apiserver keeps; list again."""


class Dropped(Exception):
    """The watch connection was given up (nothing for QUIET_S, or `reconnect`): watch again, no list."""


@dataclass
class Counts:
    """What the cache asked of the API, for the operator's metrics and the tests."""

    lists: int = 0
    watches: int = 0
    events: int = 0
    relists: int = 0
    errors: int = 0
    quiet: int = 0
    """Watches dropped after QUIET_S without a byte (a lost connection), then resumed."""


@dataclass
class Informer:
    api: client.ApiClient
    resource: Resource
    transform: Callable[[Obj], Obj] = slim
    """What is kept of each object (slim drops managedFields; pods and nodes drop more)."""
    label_selector: str | None = None
    metadata_only: bool = False
    """Ask for PartialObjectMetadata: the objects' metadata alone (the owned objects' caches keep their
    version, hash annotation and field managers, never the rules themselves)."""
    watch_timeout_s: int = WATCH_TIMEOUT_S
    quiet_s: float = QUIET_S
    request_timeout_s: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    counts: Counts = field(default_factory=Counts)
    _objects: dict[Key, Obj] = field(default_factory=dict)
    _by_namespace: dict[str, dict[str, Obj]] = field(default_factory=dict)
    _changes: dict[str, int] = field(default_factory=dict)
    """Per namespace, how many events changed it since the last list (`version`)."""
    _lists: int = 0
    _guard: threading.Lock = field(default_factory=threading.Lock)
    _synced: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _response: Any = None
    _thread: threading.Thread | None = None
    _heard: float = field(default_factory=time.monotonic)
    _dropping: bool = False

    def heard_s(self) -> float:
        """Seconds since the API last told this cache anything (a list, a watch opened, an event, a
        bookmark): a watch whose connection died without a word shows here first."""
        return time.monotonic() - self._heard

    def reconnect(self) -> None:
        """Drop the current watch connection; the loop watches again from the last version it saw."""
        response = self._response
        if response is not None:
            self._dropping = True
            # shut the socket down first: closing it alone does not wake a read blocked on another thread
            with contextlib.suppress(Exception):
                response.response.shutdown()
            with contextlib.suppress(Exception):
                response.response.close()

    # ---- reads ----

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def _ready(self, timeout: float) -> None:
        if not self._synced.wait(timeout):
            raise NotSynced(f"the cache of {self.resource} has not listed yet")

    def get(self, namespace: str | None, name: str, *, timeout: float = 10.0) -> Obj | None:
        self._ready(timeout)
        with self._guard:
            return self._objects.get((namespace or "", name))

    def size(self) -> int:
        """How many objects the cache holds (0 before its first list)."""
        with self._guard:
            return len(self._objects)

    def version(self, namespace: str) -> tuple[int, int]:
        """A value that changes whenever the cache's objects of `namespace` may have: the lists made and
        the events applied to that namespace since. For a reader that derives something from them and
        keeps it until they change (ClusterCache.pods)."""
        with self._guard:
            return self._lists, self._changes.get(namespace, 0)

    def items(self, namespace: str | None = None, *, timeout: float = 10.0) -> list[Obj]:
        """Every object (of `namespace`), in name order. The objects are shared: do not change them."""
        self._ready(timeout)
        with self._guard:
            if namespace is not None:
                return [o for _, o in sorted((self._by_namespace.get(namespace) or {}).items())]
            return [o for _, o in sorted(self._objects.items())]

    def replace(self, objects: Iterable[Obj]) -> None:
        """Hold `objects` (kept as given) in place of everything held, as a list does; readers' kept
        answers go stale (`version`). The list calls it; so may a cache filled by hand."""
        by_key = {_key(obj): obj for obj in objects}
        by_namespace: dict[str, dict[str, Obj]] = {}
        for (ns, name), obj in by_key.items():
            by_namespace.setdefault(ns, {})[name] = obj
        with self._guard:
            self._objects, self._by_namespace = by_key, by_namespace
            self._lists += 1
            self._changes = {}
        self._synced.set()

    # ---- the loop ----

    def start(self) -> Informer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"trainguard-watch-{self.resource.plural}", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.reconnect()

    def _run(self) -> None:
        version: str | None = None
        failures = 0
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list()
                    failures = 0
                began, seen = time.monotonic(), self.counts.events
                version = self._watch(version)
                failures = 0
                if time.monotonic() - began < 1.0 and self.counts.events == seen:
                    self.sleep(1.0)  # a server that ends watches at once must not be asked in a loop
            except Gone:
                log.info("watch of %s: version too old, listing again", self.resource)
                self.counts.relists += 1
                version = None
            except Dropped as exc:
                if self._stop.is_set():
                    return
                log.info("watch of %s: %s, watching again", self.resource, exc)
                self.counts.quiet += 1
            except Exception as exc:
                if self._stop.is_set():
                    return
                self.counts.errors += 1
                delay = BACKOFF_S[min(failures, len(BACKOFF_S) - 1)]
                failures += 1
                log.warning("watch of %s failed (%s); again in %.1fs", self.resource, _short(exc), delay)
                self.sleep(delay)

    def _request(self, query: dict[str, str], read_timeout: float, *, listing: bool) -> Any:
        url_query = [(k, v) for k, v in query.items()]
        accept = "application/json"
        if self.metadata_only:
            kind = "PartialObjectMetadataList" if listing else "PartialObjectMetadata"
            accept = f"application/json;as={kind};g=meta.k8s.io;v=v1,application/json"
        method, url, headers, body, _ = self.api.param_serialize(
            "GET", self.resource.path, query_params=url_query,
            header_params={"Accept": accept}, auth_settings=["BearerToken"],
        )  # fmt: skip
        response = self.api.call_api(
            method, url, header_params=headers, body=body, _request_timeout=(10.0, read_timeout)
        )
        if response.status == 410:
            raise Gone()
        if not 200 <= response.status < 300:
            data = response.read()
            raise ApiError(status=response.status, reason=response.reason, body=data.decode(errors="replace"))
        return response

    def _list(self) -> str:
        """Every object, in pages, replacing what the cache held; returns the list's resourceVersion."""
        objects: dict[Key, Obj] = {}
        token, version = "", ""
        while True:
            query = {"limit": str(LIST_PAGE)}
            if token:
                query["continue"] = token
            if self.label_selector:
                query["labelSelector"] = self.label_selector
            self.counts.lists += 1
            page = json.loads(self._request(query, self.request_timeout_s, listing=True).read())
            for item in page.get("items") or []:
                kept = self.transform(item)
                objects[_key(kept)] = kept
            meta = page.get("metadata") or {}
            version, token = str(meta.get("resourceVersion") or ""), str(meta.get("continue") or "")
            if not token:
                break
        self.replace(objects.values())
        self._heard = time.monotonic()
        log.debug("listed %d %s at version %s", len(objects), self.resource, version)
        return version

    def _watch(self, version: str) -> str:
        """Follow the changes from `version` until the server ends the watch; returns the last version
        seen (a bookmark's included)."""
        query = {
            "watch": "true",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_timeout_s),
        }
        if self.label_selector:
            query["labelSelector"] = self.label_selector
        self.counts.watches += 1
        response = self._request(query, min(self.quiet_s, self.watch_timeout_s + 30.0), listing=False)
        self._response = response
        self._heard = time.monotonic()
        try:
            for line in _lines(response):
                if self._stop.is_set():
                    break
                event = json.loads(line)
                version = self._apply(event) or version
        except urllib3.exceptions.ReadTimeoutError:
            raise Dropped(f"nothing for {self.quiet_s:.0f}s") from None
        except Exception:
            if self._dropping:
                raise Dropped("dropped by reconnect") from None
            raise
        finally:
            self._dropping = False
            self._response = None
            response.response.release_conn()
        return version

    def _apply(self, event: dict[str, Any]) -> str | None:
        self._heard = time.monotonic()
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise ApiError(status=obj.get("code"), reason=obj.get("reason"), body=json.dumps(obj))
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            return str(version) if version else None
        self.counts.events += 1
        kept = self.transform(obj)
        key = _key(kept)
        with self._guard:
            self._changes[key[0]] = self._changes.get(key[0], 0) + 1
            if kind == "DELETED":
                self._objects.pop(key, None)
                (self._by_namespace.get(key[0]) or {}).pop(key[1], None)
            else:
                self._objects[key] = kept
                self._by_namespace.setdefault(key[0], {})[key[1]] = kept
        return str(version) if version else None


def _key(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _lines(response: Any) -> Iterator[str]:
    for line in iter_resp_lines(response.response):
        if line:
            yield line


def _short(exc: BaseException) -> str:
    if isinstance(exc, ApiError):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {str(exc)[:200]}"
